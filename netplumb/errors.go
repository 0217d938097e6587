package netplumb

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrInvalidConfig is wrapped by every *ConfigError whose value is
	// malformed or out of range.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrUnsupported is wrapped by errors for values that are well formed
	// but not supported by netplumb (an IPv6 subnet, a CNI version without
	// CHECK).
	ErrUnsupported = errors.New("unsupported")
	// ErrNotPlumbed is wrapped by Verify's errors when the pod's plumbing
	// is missing or wrong (as opposed to the namespaces being unreadable).
	ErrNotPlumbed = errors.New("pod network is not plumbed")
)

// ConfigError names a field of Config, its value and what is wrong with
// it. It wraps ErrInvalidConfig or ErrUnsupported.
type ConfigError struct {
	Field string // the field's name as in a configuration file, e.g. "subnet"
	Value string // the offending value, as given
	Err   error
}

func (e *ConfigError) Error() string {
	v := e.Value
	if v == "" || strings.ContainsAny(v, " \t\n\"") {
		v = fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("netplumb: %s %s: %v", e.Field, v, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

func invalid(field, value, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Value: value, Err: fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalidConfig)}
}

func unsupported(field, value, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Value: value, Err: fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrUnsupported)}
}

// PluginNotFoundError reports a CNI plugin binary that is in none of the
// configured directories (or is not an executable regular file there).
type PluginNotFoundError struct {
	Plugin string
	Dirs   []string
}

func (e *PluginNotFoundError) Error() string {
	return fmt.Sprintf("netplumb: CNI plugin %q not found in %v", e.Plugin, e.Dirs)
}

// ShadowedError is returned by Install, together with the path it wrote,
// when another network configuration in the same directory sorts before
// nodeguard's: containerd (go-cni) and CRI-O use the lexically first file,
// so nodeguard's network is not the one pods get until that file is
// removed or renamed. The conflist has been written all the same.
type ShadowedError struct {
	Path string // nodeguard's conflist
	By   string // the file the runtime uses instead
}

func (e *ShadowedError) Error() string {
	return fmt.Sprintf("netplumb: %s is shadowed by %s, which sorts first and is the network the runtime uses", e.Path, e.By)
}
