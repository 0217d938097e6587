package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// doctorJSON runs `nodeguard doctor --json` with args and returns the
// report and the exit code.
func doctorJSON(t *testing.T, args ...string) (*doctorReport, int) {
	t.Helper()
	out, err := exec.Command(buildBinary(t), append([]string{"doctor", "--json"}, args...)...).Output()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	var r doctorReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("doctor --json is not JSON: %v\n%s", err, out)
	}
	return &r, code
}

// findCheck returns the check named name, failing t when there is none.
func findCheck(t *testing.T, r *doctorReport, name string) check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no %q check in %+v", name, r.Checks)
	return check{}
}

func TestDoctorRuntimeSide(t *testing.T) {
	cgtest.RequirePrivileged(t)

	t.Run("a running containerd is reported ok with its name and version", func(t *testing.T) {
		env := crienv.New(t)
		r, code := doctorJSON(t, "--runtime-endpoint", env.Endpoint())
		if code != 0 {
			t.Fatalf("exit code %d, reasons %v", code, r.Reasons)
		}
		c := findCheck(t, r, "runtime")
		if c.Status != stOK || !r.Runtime.Reachable || r.Runtime.Name != "containerd" || r.Runtime.Version == "" || r.Runtime.APIVersion != "v1" {
			t.Fatalf("runtime check %+v, report %+v", c, r.Runtime)
		}
		if !strings.Contains(c.Detail, r.Runtime.Version) {
			t.Errorf("detail %q does not give the version %q", c.Detail, r.Runtime.Version)
		}
	})

	t.Run("an explicitly given endpoint without a socket is a failure saying not running, with a fix", func(t *testing.T) {
		missing := "unix://" + filepath.Join(t.TempDir(), "containerd.sock")
		r, code := doctorJSON(t, "--runtime-endpoint", missing)
		c := findCheck(t, r, "runtime")
		if c.Status != stFail || !strings.Contains(c.Detail, "not running") || c.Fix == "" {
			t.Fatalf("runtime check %+v", c)
		}
		if r.Runtime.Reachable || r.Runtime.Error == "" || r.Runtime.Endpoint != missing {
			t.Errorf("runtime report %+v", r.Runtime)
		}
		if code != 2 || r.CanRun {
			t.Errorf("exit code %d, can run %v: an unreachable runtime that was asked for must fail", code, r.CanRun)
		}
	})

	t.Run("a path that is not a socket is named as such", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "not-a-socket")
		if err := os.WriteFile(file, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		r, _ := doctorJSON(t, "--runtime-endpoint", "unix://"+file)
		if c := findCheck(t, r, "runtime"); c.Status != stFail || !strings.Contains(c.Detail, "not a unix socket") || c.Fix == "" {
			t.Fatalf("runtime check %+v", c)
		}
	})

	t.Run("the CNI plugins, iptables and pod cgroup checks pass on a host that runs the privileged tests", func(t *testing.T) {
		r, _ := doctorJSON(t, "--runtime-endpoint", "unix://"+filepath.Join(t.TempDir(), "none.sock"))
		for _, name := range []string{"cni plugins", "iptables", "pod cgroups"} {
			if c := findCheck(t, r, name); c.Status != stOK {
				t.Errorf("%s: %+v", name, c)
			}
		}
		if c := findCheck(t, r, "pod cgroups"); !strings.Contains(c.Detail, "kubepods") || r.PodCgroups.Driver != "cgroupfs" || r.PodCgroups.Root != "/" {
			t.Errorf("the node default (cgroupfs, /) is not what doctor checked: %+v %+v", c, r.PodCgroups)
		}
		for _, p := range []string{"bridge", "host-local", "portmap", "bandwidth", "loopback"} {
			if r.CNIPlugins[p] == "" {
				t.Errorf("plugin %s not found: %v", p, r.CNIPlugins)
			}
		}
	})
}

func TestDoctorSaysWhenTheSystemdDriverCannotWork(t *testing.T) {
	cgtest.RequirePrivileged(t)
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Skip("systemd is init here: the node lane checks the driver working")
	}
	r, _ := doctorJSON(t, "--cgroup-driver", "systemd")
	c := findCheck(t, r, "pod cgroups")
	if c.Status != stFail || !strings.Contains(c.Detail, "systemd is not this host's init") || !strings.Contains(c.Fix, "cgroupfs") {
		t.Errorf("pod cgroups with the systemd driver and no systemd: %+v", c)
	}
}

func TestDoctorDelegationProbeLeavesNothing(t *testing.T) {
	cgtest.RequirePrivileged(t)
	r, _ := doctorJSON(t, "--cgroup-root", "nodeguard")
	if c := findCheck(t, r, "pod cgroups"); c.Status != stOK || !strings.Contains(c.Detail, "created and removed") {
		t.Errorf("a relative root's probe: %+v", c)
	}
	own := r.Cgroup.MemoryOwn
	if own == "" {
		t.Fatal("no memory cgroup in the report")
	}
	left, err := filepath.Glob(filepath.Join(own, "nodeguard-doctor-*"))
	if err != nil || len(left) > 0 {
		t.Fatalf("probe cgroups left behind: %v %v", left, err)
	}
}
