package crienv

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// startTimeout bounds New's Start: a first run on a fresh machine installs
// packages (aptTimeout) and builds the images (~10 s); a warm start takes
// under a second.
const startTimeout = aptTimeout + 2*time.Minute

// New starts an environment for t and registers a t.Cleanup that closes it
// and fails t if anything is left behind. It skips t when not root or when
// the environment is unsupported here (no apt-get to install what is
// missing), or fails it instead when NODEGUARD_REQUIRE_PRIVILEGED=1; any
// other start error fails t. Progress lines go to stderr.
func New(t testing.TB) *Env {
	t.Helper()
	cgtest.RequirePrivileged(t)
	ctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	e, err := Start(ctx, Options{Log: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if errors.Is(err, ErrUnsupported) {
		cgtest.Need(t, false, err.Error())
	}
	if err != nil {
		t.Fatalf("crienv: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("crienv: %v", err)
		}
	})
	return e
}
