package nodestats

import (
	"errors"
	"fmt"
)

var (
	// ErrUnsupported reports that this host lacks what was asked for: a
	// kernel file that the kernel or the mount does not provide, as
	// opposed to one that is there but does not parse.
	ErrUnsupported = errors.New("unsupported")

	// ErrMalformed reports a kernel file that does not parse, or that lacks
	// a key every supported kernel writes. The error is a *ParseError
	// naming the file and, where one is to blame, the line.
	ErrMalformed = errors.New("malformed")

	// ErrTimeout reports a reading that did not answer within its bound
	// (a statfs of a hung filesystem): the value is unknown, which is
	// neither unsupported nor malformed.
	ErrTimeout = errors.New("timed out")
)

// ParseError describes a malformed kernel file. It matches ErrMalformed
// with errors.Is.
type ParseError struct {
	File string // the path the caller gave, e.g. /proc/meminfo
	Line int    // 1-based line number; 0 when no single line is to blame
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
