package nodevm

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nodeguard/nodeguard/internal/flock"
	"github.com/nodeguard/nodeguard/lab/vmtest"
)

// CrictlModule and CrictlVersion name the crictl the guest gets: Debian 12
// does not package it, so it is built from the Go module proxy once, static
// (the demo uses the same version).
const (
	CrictlModule  = "sigs.k8s.io/cri-tools/cmd/crictl"
	CrictlVersion = "v1.37.0"
)

// crictlTimeout bounds the build: ~45 s here with the module proxy, most of
// it downloading cri-tools' dependencies.
const crictlTimeout = 10 * time.Minute

// crictlPath is where the cache keeps crictl of version.
func crictlPath(cache, version string) string {
	return filepath.Join(cache, "crictl", version, "crictl")
}

// CachedCrictl returns a static crictl of CrictlVersion from the cache,
// building it first with `CGO_ENABLED=0 go install` into the cache (never
// into the clone) under an flock.
func CachedCrictl(ctx context.Context, cache, goCmd string, log *slog.Logger) (string, error) {
	bin := crictlPath(cache, CrictlVersion)
	if vmtest.CheckStatic(bin) == nil {
		return bin, nil
	}
	dir := filepath.Dir(bin)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build crictl: %w", err)
	}
	unlock, err := flock.Lock(ctx, filepath.Join(filepath.Dir(dir), "lock"))
	if err != nil {
		return "", fmt.Errorf("build crictl: %w", err)
	}
	defer unlock()
	if vmtest.CheckStatic(bin) == nil {
		return bin, nil
	}
	vmtest.SweepStaleRuns(dir, buildDirPrefix)
	tmp, err := os.MkdirTemp(dir, fmt.Sprintf("%s%d-", buildDirPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("build crictl: %w", err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	log.Info("building a static crictl (first use; cached afterwards)", "module", CrictlModule, "version", CrictlVersion)
	// Outside any module (Dir is the temporary directory, GOWORK off), so
	// that the clone's go.mod and GOFLAGS play no part.
	env := []string{"CGO_ENABLED=0", "GOBIN=" + tmp, "GOWORK=off", "GOFLAGS=-trimpath -buildvcs=false"}
	if err := runLogged(ctx, crictlTimeout, log, "go install crictl", tmp, env, goCmd,
		"install", "-ldflags=-s -w", CrictlModule+"@"+CrictlVersion); err != nil {
		return "", fmt.Errorf("build crictl: %w", err)
	}
	built := filepath.Join(tmp, "crictl")
	if err := vmtest.CheckStatic(built); err != nil {
		return "", fmt.Errorf("build crictl: %w", err)
	}
	if err := os.Rename(built, bin); err != nil {
		return "", fmt.Errorf("build crictl: %w", err)
	}
	log.Info("crictl cached", "path", bin, "duration", time.Since(start).Round(time.Millisecond))
	return bin, nil
}
