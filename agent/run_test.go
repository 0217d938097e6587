package agent

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/internal/syncbuf"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// TestRunRefusesARelativeRootForARuntimeInAnotherCgroup is the first
// defect of a real node: containerd in one cgroup, nodeguard in another,
// and a relative cgroup root. runc resolves the relative parent against
// the runtime's cgroup, so every container would land beneath
// containerd's cgroup while nodeguard limits and watches empty ones
// beneath its own. Where the runtime is handed relative parents (hosts
// with v1 hierarchies; on pure v2 they are spelled absolute), nodeguard
// must refuse to start, saying why, and make nothing.
func TestRunRefusesARelativeRootForARuntimeInAnotherCgroup(t *testing.T) {
	cgtest.RequirePrivileged(t)
	cgtest.RequireMode(t, cgroups.ModeHybrid, cgroups.ModeV1)
	env := crienv.New(t)
	dir := t.TempDir()
	sb := cgtest.New(t) // nodeguard's cgroup: a sibling of the runtime's
	cmd := exec.Command(buildBinary(t), "run", "--config", envConfig(t, env, dir), "--runtime-endpoint", env.Endpoint(),
		"--cgroup-root", "ng-misplaced", "--root-dir", filepath.Join(dir, "state"), "--api-socket", filepath.Join(dir, "api.sock"),
		"--metrics-addr", "")
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := sb.Start(t, cmd); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("nodeguard run started; log:\n%s", out.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("nodeguard run neither refused nor stopped within 60 s; log:\n%s", out.String())
	}
	t.Logf("refused: %s", strings.TrimSpace(out.String()))
	for _, want := range []string{"is relative, and the runtime (pid", "use an absolute cgroupRoot"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out.String())
		}
	}
	for _, d := range sb.Dirs() {
		if _, err := os.Stat(filepath.Join(d.Path, "ng-misplaced")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a cgroup was made before the refusal: %s (%v)", filepath.Join(d.Path, "ng-misplaced"), err)
		}
	}
}
