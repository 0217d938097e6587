package lifecycle_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// waitRemoved waits, bounded, until path does not exist.
func waitRemoved(t *testing.T, path, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s never removed (stat: %v)", what, path, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHostsFilesOfGonePodsAreRemoved: a hosts file left by a pod removed
// while nodeguard was down (no sandbox left) is removed once the sources
// are loaded, and so is the one of a pod whose sandbox nodeguard finds
// orphaned at start; a desired pod's stays.
func TestHostsFilesOfGonePodsAreRemoved(t *testing.T) {
	r := newRig(t)
	m, stop := r.manager(t)
	pods := r.pods(t, webPod)
	if _, err := m.Apply(t.Context(), pods, "test"); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "web", "running", running)
	webHosts := filepath.Join(r.root, "hosts", string(pods[0].UID))
	if _, err := os.Stat(webHosts); err != nil {
		t.Fatalf("the running pod has no hosts file: %v", err)
	}
	// nodeguard goes down; meanwhile a pod it ran before is gone with its
	// sandbox, leaving its hosts file.
	stop()
	stale := filepath.Join(r.root, "hosts", "0b6a5a39-gone")
	if err := os.WriteFile(stale, []byte("# Kubernetes-managed hosts file.\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// It comes back without "web" among its sources: web's sandbox is an
	// orphan, the other pod left nothing but its file.
	m, _ = r.manager(t)
	waitRemoved(t, stale, "the hosts file of a pod without a sandbox")
	waitGone(t, m, "web")
	waitRemoved(t, webHosts, "the hosts file of an orphaned sandbox's pod")
	if n := r.sandboxes(t); n != 0 {
		t.Errorf("%d sandboxes left", n)
	}

	// A desired pod's file stays.
	if _, err := m.Apply(t.Context(), pods, "test"); err != nil {
		t.Fatal(err)
	}
	removeAtEnd(t, m, "web")
	waitPod(t, m, "web", "running", running)
	if _, err := os.Stat(webHosts); err != nil {
		t.Errorf("the desired pod's hosts file: %v", err)
	}
}
