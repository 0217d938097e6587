package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

var (
	// ErrUnsupported reports that this host lacks what was asked for: no
	// cgroup mounts, no such hierarchy, or this process's cgroup is not
	// visible beneath the mount.
	ErrUnsupported = errors.New("unsupported")

	// ErrMalformed reports a host file that does not parse. The error is a
	// *ParseError naming the file and line.
	ErrMalformed = errors.New("malformed")

	// ErrInvalidPath reports a cgroup path given by a caller that cannot be
	// resolved: empty, containing NUL, or climbing above its base with "..".
	ErrInvalidPath = errors.New("invalid cgroup path")

	// ErrNotCgroup reports a directory that is not on a cgroup filesystem.
	ErrNotCgroup = errors.New("not a cgroup directory")
)

// ParseError describes a malformed line in a host file. It matches
// ErrMalformed with errors.Is.
type ParseError struct {
	File string // absolute path of the file, e.g. /proc/self/mountinfo
	Line int    // 1-based line number
	Msg  string // what is wrong with the line
}

// Error implements error.
func (e *ParseError) Error() string {
	return fmt.Sprintf("parse %s line %d: %s", e.File, e.Line, e.Msg)
}

// Unwrap returns ErrMalformed so that errors.Is(err, ErrMalformed) holds.
func (e *ParseError) Unwrap() error { return ErrMalformed }

// Gone reports whether err, from opening or reading a cgroup file, means
// that the cgroup was removed: ENOENT, or ENODEV, which kernfs answers on
// a file of a cgroup whose removal is under way (or on a descriptor kept
// open across it).
func Gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}
