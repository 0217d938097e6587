package kubeletproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Where FindBinary looks for the kubelet.
const (
	// EnvBinary names the kubelet binary to use.
	EnvBinary = "NODEGUARD_KUBELET_BIN"
	// envCPBin is the directory of the control plane's binaries
	// (scripts/controlplane.sh prints it; make test-cluster sets it).
	envCPBin = "NODEGUARD_CP_BIN"
	// envCPCache is scripts/controlplane.sh's cache.
	envCPCache = "NODEGUARD_CP_CACHE"
	// defaultCPCache and cpKey are scripts/controlplane.sh's default cache
	// and its entry for the versions it builds by default.
	defaultCPCache = "/var/cache/nodeguard-cp"
	cpKey          = "k8s-v1.37.2-etcd-v3.7.3"
)

// ErrNoBinary reports that no kubelet binary was found.
var ErrNoBinary = errors.New("no kubelet binary")

// FindBinary returns the kubelet binary: $NODEGUARD_KUBELET_BIN when set,
// else kubelet in $NODEGUARD_CP_BIN, else the one scripts/controlplane.sh
// cached (${NODEGUARD_CP_CACHE:-/var/cache/nodeguard-cp}/k8s-v1.37.2-etcd-v3.7.3/bin).
// It does not build one: scripts/controlplane.sh does (25 minutes cold).
func FindBinary() (string, error) {
	return findBinary(os.Getenv)
}

func findBinary(getenv func(string) string) (string, error) {
	p := getenv(EnvBinary)
	switch {
	case p != "":
	case getenv(envCPBin) != "":
		p = filepath.Join(getenv(envCPBin), "kubelet")
	default:
		cache := getenv(envCPCache)
		if cache == "" {
			cache = defaultCPCache
		}
		p = filepath.Join(cache, cpKey, "bin", "kubelet")
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%w: %w (scripts/controlplane.sh builds it; %s names another)", ErrNoBinary, err, EnvBinary)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file", ErrNoBinary, p)
	}
	return p, nil
}
