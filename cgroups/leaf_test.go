package cgroups_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// envLeafHelper makes the test binary a helper process for
// TestMoveSelfIntoLeaf instead of running tests.
const envLeafHelper = "NODEGUARD_TEST_LEAF_HELPER"

// TestMain runs the helper process when asked to.
func TestMain(m *testing.M) {
	if os.Getenv(envLeafHelper) != "" {
		os.Exit(leafHelper())
	}
	os.Exit(m.Run())
}

// leafHelper is a process started in a sandbox cgroup, as nodeguard is
// in its service's cgroup: it moves itself into a leaf, then enables the
// memory controller below the cgroup it came from, and prints what it did.
func leafHelper() int {
	l, err := cgroups.Discover()
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	moved, err := cgroups.MoveSelfIntoLeaf(l.Unified, cgroups.AgentLeaf)
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	own := l.Unified.OwnDir()
	if err := cgroups.EnableControllers(own, "memory"); err != nil {
		fmt.Println("error:", err)
		return 3
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	fmt.Printf("moved=%v own=%s now=%s", moved, l.Unified.Own, strings.TrimSpace(string(self)))
	return 0
}

func TestMoveSelfIntoLeaf(t *testing.T) {
	cgtest.RequirePrivileged(t)
	cgtest.RequireMode(t, cgroups.ModeV2)
	helper := func(t *testing.T, sb *cgtest.Sandbox) (string, error) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envLeafHelper+"=1")
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := sb.Start(t, cmd); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("the helper did not end within 30 s: %s", out.String())
		}
		return "", nil
	}
	t.Run("alone in its cgroup, it moves into the leaf and the controllers can be enabled below", func(t *testing.T) {
		sb := cgtest.New(t)
		out, err := helper(t, sb)
		if err != nil {
			t.Fatalf("helper: %v: %s", err, out)
		}
		if want := "now=0::" + sb.Dirs()[0].Rel + "/" + cgroups.AgentLeaf; !strings.Contains(out, "moved=true") || !strings.Contains(out, want) {
			t.Errorf("helper said %q, want moved=true and %q", out, want)
		}
		b, err := os.ReadFile(filepath.Join(sb.UnifiedDir(), cgroups.FileSubtreeControl))
		if err != nil || !strings.Contains(string(b), "memory") {
			t.Errorf("subtree_control of the sandbox: %q %v", b, err)
		}
	})
	t.Run("with another process in its cgroup it moves nothing and says who", func(t *testing.T) {
		sb := cgtest.New(t)
		other := exec.Command("sleep", "60")
		if err := sb.Start(t, other); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
		out, err := helper(t, sb)
		if err == nil || !strings.Contains(out, "also holds pids") || !strings.Contains(out, fmt.Sprint(other.Process.Pid)) {
			t.Errorf("helper: %v: %q, want a refusal naming pid %d", err, out, other.Process.Pid)
		}
		if _, err := os.Stat(filepath.Join(sb.UnifiedDir(), cgroups.AgentLeaf)); !os.IsNotExist(err) {
			t.Errorf("a leaf was made: %v", err)
		}
	})
}
