package oom

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

	// ErrNotAdmitted reports a pod refused by Admit. Such errors are
	// *AdmitError values.
	ErrNotAdmitted = errors.New("pod not admitted")

	// ErrEvictionRefused reports an eviction that someone else refused
	// for now: the API server's Eviction API, for a PodDisruptionBudget
	// (guard mode's soft evictions). The manager forgets the decision as
	// for any failure, but does not evaluate again at once: the next
	// tick or wake-up decides again, and the actor bounds how often it
	// asks (a refusal is never bypassed).
	ErrEvictionRefused = errors.New("eviction refused")
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

// AdmitError is the refusal of a pod under node pressure, as the
// kubelet's eviction admission handler words it: reason Evicted, message
// "The node had condition: [MemoryPressure]." It matches ErrNotAdmitted.
type AdmitError struct {
	// Conditions are the node conditions that held, in a fixed order
	// (MemoryPressure, DiskPressure, PIDPressure).
	Conditions []Condition
}

// AdmitReason is the pod status reason of a refused pod, the kubelet's.
const AdmitReason = "Evicted"

// Error implements error with the kubelet's message.
func (e *AdmitError) Error() string {
	names := make([]string, len(e.Conditions))
	for i, c := range e.Conditions {
		names[i] = string(c)
	}
	return fmt.Sprintf("The node had condition: [%s].", strings.Join(names, " "))
}

// Unwrap returns ErrNotAdmitted.
func (e *AdmitError) Unwrap() error { return ErrNotAdmitted }
