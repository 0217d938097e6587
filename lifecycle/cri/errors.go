package cri

import (
	"errors"
	"fmt"
)

var (
	// ErrNotCRI means the endpoint answered, but not as a CRI v1 runtime: a
	// gRPC server without runtime.v1.RuntimeService, or a peer that does not
	// speak gRPC at all.
	ErrNotCRI = errors.New("not a CRI v1 runtime")
	// ErrUnsupportedEndpoint is wrapped for endpoints other than a unix
	// socket ("unix:///path" or a bare path).
	ErrUnsupportedEndpoint = errors.New("unsupported CRI endpoint")
	// ErrNotSocket is wrapped when the endpoint's path exists but is not a
	// unix socket.
	ErrNotSocket = errors.New("not a unix socket")
	// ErrNotFound is wrapped by operations on a sandbox, container or image
	// that the runtime does not know (gRPC NotFound).
	ErrNotFound = errors.New("not found")
	// ErrFailedPrecondition is wrapped when the runtime refuses an
	// operation in the object's present state (gRPC FailedPrecondition):
	// containerd says so when it will not remove a container whose task
	// still runs.
	ErrFailedPrecondition = errors.New("refused in its present state")
	// ErrImageNotPresent means an image is not in the runtime's store and
	// the client may not pull it.
	ErrImageNotPresent = errors.New("image not present")
	// ErrImageNeverPull means an image is not in the runtime's store and
	// its pull policy is Never: the kubelet's ErrImageNeverPull.
	ErrImageNeverPull = errors.New("image not present with pull policy of Never")
	// ErrImagePull is wrapped when the runtime failed to pull an image:
	// the kubelet's ErrImagePull.
	ErrImagePull = errors.New("image pull failed")
	// ErrPullDisabled is returned by PullImage on a client dialed without
	// WithImagePull.
	ErrPullDisabled = errors.New("image pull disabled: no registry configured")
	// ErrBadCgroupParent is wrapped by RunPodSandbox for a config whose
	// cgroup parent is empty, climbs out with "..", or is absolute on a
	// client that does not allow absolute parents.
	ErrBadCgroupParent = errors.New("refused cgroup parent")
	// ErrUnsupportedField is wrapped by ContainerConfig for a pod field it
	// cannot convert (an env source other than a value or a supported
	// fieldRef). Validation (lifecycle/podspec) refuses such pods earlier.
	ErrUnsupportedField = errors.New("unsupported pod field")
	// ErrInvalidOption is wrapped for an option value a function does not
	// know (an image pull policy other than Always, IfNotPresent or Never).
	ErrInvalidOption = errors.New("invalid option")
)

// EndpointError is a CRI endpoint that cannot be used: its socket is missing,
// is not a socket, or refuses connections. It unwraps to the cause
// (fs.ErrNotExist, ErrNotSocket, syscall.ECONNREFUSED, ...).
type EndpointError struct {
	Endpoint string // as given to Dial
	Path     string // the socket path
	Err      error
	Hint     string // what to check, for a person
}

func (e *EndpointError) Error() string {
	s := fmt.Sprintf("CRI endpoint %s: %v", e.Endpoint, e.Err)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

func (e *EndpointError) Unwrap() error { return e.Err }

func isNotPresent(err error) bool { return errors.Is(err, ErrImageNotPresent) }
