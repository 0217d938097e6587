package host

import "errors"

var (
	// ErrUnsupported reports that the kernel or this process lacks the
	// probed feature: a missing file, a disabled subsystem, an unknown
	// capability.
	ErrUnsupported = errors.New("unsupported")

	// ErrMalformed reports kernel output this package cannot parse.
	ErrMalformed = errors.New("malformed")
)
