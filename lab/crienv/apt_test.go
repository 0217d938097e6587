package crienv

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lab/images"
)

func TestMissingPackages(t *testing.T) {
	tools := []hostTool{
		{path: "a", pkg: "pa"},
		{path: "b", pkg: "pb"},
		{path: "c", pkg: "pa"},
		{path: "d", pkg: "pd", ok: func(string) bool { return false }},
		{path: "e", pkg: "pe", ok: func(string) bool { return true }},
	}
	present := map[string]bool{"b": true, "d": true, "e": true}
	look := func(p string) (string, error) {
		if present[p] {
			return "/x/" + p, nil
		}
		return "", exec.ErrNotFound
	}
	got := missingPackages(tools, look)
	want := []string{"pa", "pd"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("missingPackages = %v, want %v (each package once, an unusable file counts as missing)", got, want)
	}
}

func TestEnsurePackagesLeavesEveryToolInstalled(t *testing.T) {
	cgtest.RequirePrivileged(t)
	ctx, cancel := context.WithTimeout(t.Context(), aptTimeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	start := time.Now()
	if err := EnsurePackages(ctx, log, images.DefaultCacheDir); err != nil {
		if errors.Is(err, ErrUnsupported) {
			cgtest.Need(t, false, err.Error())
		}
		t.Fatal(err)
	}
	t.Logf("EnsurePackages took %v", time.Since(start))
	if m := missingPackages(hostTools, lookTool); len(m) > 0 {
		t.Fatalf("after EnsurePackages still missing %v", m)
	}
}
