package registry

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// startTimeout bounds New's Start: the registry is ready in well under a
// second; the rest is room for an apt install of docker-registry.
const startTimeout = 10 * time.Minute

// New starts a registry in env's network namespace, trusted by env's
// containerd, for t, and registers a t.Cleanup that closes it. It skips t
// where the registry cannot run (not root, no apt-get), or fails it
// instead when NODEGUARD_REQUIRE_PRIVILEGED=1.
func New(t testing.TB, env *crienv.Env) *Registry {
	t.Helper()
	cgtest.RequirePrivileged(t)
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	r, err := Start(ctx, Options{NetNS: env.NetNS(), HostsDir: env.RegistryHostsDir(), Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if errors.Is(err, crienv.ErrUnsupported) {
		cgtest.Need(t, false, err.Error())
	}
	if err != nil {
		t.Fatalf("registry: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("registry: %v", err)
		}
	})
	return r
}
