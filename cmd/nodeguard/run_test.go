package main

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

func TestRunConfigErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"an unknown key is refused by name", "runtimeEndpoint: unix:///x\nrootDirr: /x\n", "rootDirr"},
		{"a relative root dir is refused", "runtimeEndpoint: unix:///x\nrootDir: rel\n", "rootDir"},
		{"a missing runtime endpoint is named", "rootDir: /x\n", "runtimeEndpoint"},
		{"an unsupported reserved resource is named", "runtimeEndpoint: unix:///x\nsystemReserved: {gpu: 1}\n", "systemReserved.gpu"},
		{"a back-off above its maximum is refused", "runtimeEndpoint: unix:///x\nbackoffInitial: 10m\nbackoffMax: 1m\n", "backoffInitial"},
		{"a zero containerLogMaxSize is refused by name", "runtimeEndpoint: unix:///x\ncontainerLogMaxSize: 0\n", "containerLogMaxSize 0: must be positive"},
		{"a malformed containerLogMaxSize is named", "runtimeEndpoint: unix:///x\ncontainerLogMaxSize: 10Zi\n", "containerLogMaxSize"},
		{"containerLogMaxFiles below 2 is refused by name", "runtimeEndpoint: unix:///x\ncontainerLogMaxFiles: 1\n", "containerLogMaxFiles 1: must be at least 2"},
		{"a malformed quantity names the field", "runtimeEndpoint: unix:///x\nkubeReserved: {memory: 12Zi}\n", "12Zi"},
		{"a malformed pod subnet is named", "runtimeEndpoint: unix:///x\nnetwork: {subnet: 10.88.0.0/33}\n", "network.subnet"},
		{"a subnet too small for maxPods is named", "runtimeEndpoint: unix:///x\nnetwork: {subnet: 10.88.0.0/28, maxPods: 110}\n", "network: netplumb"},
		{"a bridge name over 15 bytes is named", "runtimeEndpoint: unix:///x\nnetwork: {bridge: a-bridge-name-too-long}\n", "bridge"},
		{"a relative hostPath prefix is named", "runtimeEndpoint: unix:///x\nvolumes: {hostPathAllow: [data]}\n", "volumes.hostPathAllow[0]"},
		{"a relative source dir is named", "runtimeEndpoint: unix:///x\nvolumes: {sourceDir: src}\n", "volumes.sourceDir"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadRunConfig(path)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error naming %q", err, c.want)
			}
		})
	}
	t.Run("a valid file passes", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		os.WriteFile(path, []byte("runtimeEndpoint: unix:///run/containerd/containerd.sock\nsystemReserved: {memory: 512Mi, cpu: 500m}\nbackoffInitial: 5s\n"), 0o600)
		cfg, err := loadRunConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.BackoffInitial.Duration.String() != "5s" || cfg.SystemReserved.Memory().String() != "512Mi" {
			t.Errorf("decoded %+v", cfg)
		}
	})
}

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
