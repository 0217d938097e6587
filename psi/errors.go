package psi

import (
	"errors"
	"fmt"
)

var (
	// ErrUnsupported reports that a pressure file does not exist or PSI
	// is disabled: a kernel without CONFIG_PSI or booted with psi=0, irq
	// pressure without CONFIG_IRQ_TIME_ACCOUNTING, a cgroup v1 directory,
	// or a cgroup with cgroup.pressure set to 0.
	ErrUnsupported = errors.New("psi unsupported")

	// ErrMalformed reports pressure file content this package cannot
	// parse. Such errors are *ParseError values.
	ErrMalformed = errors.New("malformed")

	// ErrGone reports that the cgroup of an open pressure file or trigger
	// was removed (the kernel answers ENODEV or EPOLLERR).
	ErrGone = errors.New("cgroup removed")

	// ErrClosed reports use of a closed File or Watcher.
	ErrClosed = errors.New("closed")
)

// ParseError describes malformed content of a pressure file. It matches
// ErrMalformed with errors.Is.
type ParseError struct {
	File string // the name given to Parse, normally the file's path
	Line int    // 1-based line number; 0 when the file as a whole is wrong
	Msg  string // what is wrong
}

// Error implements error.
func (e *ParseError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("parse %s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("parse %s line %d: %s", e.File, e.Line, e.Msg)
}

// Unwrap returns ErrMalformed so that errors.Is(err, ErrMalformed) holds.
func (e *ParseError) Unwrap() error { return ErrMalformed }
