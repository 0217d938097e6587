package cgstat

import (
	"errors"

	"github.com/nodeguard/nodeguard/cgroups"
)

var (
	// ErrGone reports that the cgroup was removed: a kept-open file
	// answered ENODEV, or a file and its directory no longer exist. The
	// caller drops the cgroup; a cgroup recreated under the same path is a
	// new cgroup (with a new id) and needs a new Reader.
	ErrGone = errors.New("cgroup gone")

	// ErrUnsupported reports that a file this package needs does not exist
	// although its cgroup does: the kernel is too old, the controller is
	// not enabled for the cgroup, or the cgroup is a root cgroup. It is the
	// same value as the cgroups package's ErrUnsupported.
	ErrUnsupported = cgroups.ErrUnsupported

	// ErrMalformed reports a cgroup file that does not parse. The error is
	// a *ParseError. It is the same value as the cgroups package's
	// ErrMalformed.
	ErrMalformed = cgroups.ErrMalformed
)

// ParseError describes a malformed line of a cgroup file: File is its path,
// Line the 1-based line number, Msg what is wrong. It matches ErrMalformed
// with errors.Is. It is the cgroups package's ParseError, so callers handle
// malformed host files one way wherever they come from.
type ParseError = cgroups.ParseError
