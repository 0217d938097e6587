package crienv

import "errors"

// ErrUnsupported means the environment cannot run on this host or for this
// caller (not root, or no apt-get to install what is missing): a test
// skips on it unless NODEGUARD_REQUIRE_PRIVILEGED=1.
var ErrUnsupported = errors.New("crienv unsupported here")

// ErrInvalidConfig means a value given for the containerd or CNI
// configuration cannot be written into it.
var ErrInvalidConfig = errors.New("invalid environment config")
