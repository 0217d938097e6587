package mounts

import (
	"errors"
	"fmt"
)

var (
	// ErrUnsafePath is wrapped for a path from a manifest (subPath,
	// items[].path, a key) that is absolute, climbs with "..", uses a
	// reserved "..name", or resolves outside the directory it must stay in.
	ErrUnsafePath = errors.New("unsafe path")
	// ErrHostPathNotAllowed is wrapped for a hostPath outside
	// Config.HostPathAllow (every hostPath when the allowlist is empty).
	ErrHostPathNotAllowed = errors.New("hostPath not allowed by node policy")
	// ErrHostPathType is wrapped when a hostPath is missing or is not of the
	// type the volume asks for.
	ErrHostPathType = errors.New("hostPath type check failed")
	// ErrSourceNotFound is wrapped when a configMap or secret (or one of
	// its items' keys) is missing from Config.SourceDir and the volume is
	// not optional.
	ErrSourceNotFound = errors.New("volume source not found")
	// ErrUnsupported is wrapped for a volume source, downward API field or
	// mount propagation that this package does not implement. It differs
	// from a malformed value: the manifest is valid Kubernetes.
	ErrUnsupported = errors.New("not supported by nodeguard")
	// ErrPropagation is wrapped for Bidirectional mount propagation asked
	// by a container that is not privileged.
	ErrPropagation = errors.New("bidirectional mount propagation needs a privileged container")
	// ErrUnknownVolume is wrapped when a volumeMount names a volume the pod
	// does not have (or that Setup did not prepare).
	ErrUnknownVolume = errors.New("unknown volume")
	// ErrMountsRemain is wrapped by Teardown when a mount beneath a pod
	// directory could not be unmounted: nothing beneath it is removed.
	ErrMountsRemain = errors.New("mounts remain beneath pod directory")
	// ErrUsageLimit is wrapped by Usage when a disk-backed volume holds
	// more entries than one bounded walk visits.
	ErrUsageLimit = errors.New("volume too large to measure")
)

// VolumeError is the error of an operation on one volume of one pod: it
// carries the operation, the volume's name and the host path involved, and
// unwraps to the cause.
type VolumeError struct {
	// Op is the operation as a verb: "setup", "mount", "write", ...
	Op string
	// Volume is the pod's name for the volume.
	Volume string
	// Path is the host path the operation was working on, if any.
	Path string
	// Err is the cause.
	Err error
}

func (e *VolumeError) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s volume %q: %v", e.Op, e.Volume, e.Err)
	}
	return fmt.Sprintf("%s volume %q at %s: %v", e.Op, e.Volume, e.Path, e.Err)
}

func (e *VolumeError) Unwrap() error { return e.Err }

func volumeErr(op, volume, path string, err error) error {
	return &VolumeError{Op: op, Volume: volume, Path: path, Err: err}
}
