package eviction

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalid reports a threshold, grace period, minimum reclaim or
	// PSI rule that does not parse or is out of range. Such errors are
	// *ConfigError values.
	ErrInvalid = errors.New("invalid")

	// ErrUnsupportedSignal reports a signal name that is well formed but
	// that nodeguard does not evaluate (containerfs.available,
	// swap.available, a misspelling). Such errors are *ConfigError
	// values too; errors.Is tells the two apart.
	ErrUnsupportedSignal = errors.New("unsupported eviction signal")
)

// ConfigError names the configuration entry that is wrong:
// Field[Key]: "Value": Err, as in
//
//	evictionHard[memory.available]: "12Zi": invalid: quantities must match ...
//
// Key is empty for entries without one (a PSI rule, a flag list).
type ConfigError struct {
	Field string // evictionHard, evictionSoft, evictionSoftGracePeriod, evictionMinimumReclaim, psiRules[3], ...
	Key   string // the signal
	Value string // the configured text
	Err   error  // wraps ErrInvalid or ErrUnsupportedSignal
}

// Error implements error.
func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(e.Field)
	if e.Key != "" {
		b.WriteString("[" + e.Key + "]")
	}
	if e.Value != "" || e.Key != "" {
		fmt.Fprintf(&b, ": %q", e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns the cause, which wraps ErrInvalid or ErrUnsupportedSignal.
func (e *ConfigError) Unwrap() error { return e.Err }

// invalidf builds an ErrInvalid cause.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
