package cgtest_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// The host has one layout; the other two are simulated by handing New a
// Layout that shows only part of it, so both start paths run for real.
func TestStartInEachLayout(t *testing.T) {
	cgtest.RequirePrivileged(t)
	host, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	pureV2 := func() (*cgroups.Layout, bool) {
		if host.Unified == nil {
			return nil, false
		}
		h := *host.Unified
		// Pretend the memory controller lives here, as on production.
		h.Controllers = append(append([]string(nil), h.Controllers...), "memory")
		return cgroups.NewLayout(h), true
	}
	pureV1 := func() (*cgroups.Layout, bool) {
		if host.Memory == nil || host.Memory.V2() {
			return nil, false
		}
		return cgroups.NewLayout(*host.Memory), true
	}
	tests := []struct {
		name   string
		layout func() (*cgroups.Layout, bool)
		// gated: the command starts behind the gate shell.
		gated bool
	}{
		{name: "on the host's own layout the process lands in every sandbox directory", layout: func() (*cgroups.Layout, bool) { return host, true }, gated: host.Memory != nil && !host.Memory.V2()},
		{name: "on pure v2 the process is born in the cgroup2 directory without a gate", layout: pureV2, gated: false},
		{name: "on pure v1 the process is gated into the memory cgroup alone", layout: pureV1, gated: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, ok := tt.layout()
			if !ok {
				t.Skipf("this host (%v) cannot show that layout", host.Mode)
			}
			s := cgtest.New(t, cgtest.WithLayout(l))
			if len(s.Dirs()) != len(l.Monitored()) {
				t.Fatalf("%d sandbox dirs, want %d", len(s.Dirs()), len(l.Monitored()))
			}
			cmd := exec.Command("sleep", "30")
			if err := s.Start(t, cmd); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = s.Kill(); _ = cmd.Wait() }()
			pid := cmd.Process.Pid
			// Without the gate the command is exec'd directly: it runs
			// sleep at once (the kernel may publish /proc/PID/exe a moment
			// after the exec pipe closes, so allow a bounded wait).
			exe := ""
			for deadline := time.Now().Add(2 * time.Second); ; {
				var err error
				if exe, err = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil {
					t.Fatal(err)
				}
				if tt.gated || filepath.Base(exe) == "sleep" || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if !tt.gated && filepath.Base(exe) != "sleep" {
				t.Errorf("after Start the process runs %s, want sleep", exe)
			}
			got := procCgroups(t, pid)
			for _, d := range s.Dirs() {
				if got[d.Hierarchy.ID] != d.Rel {
					t.Errorf("in hierarchy %d the process is in %q, want %q", d.Hierarchy.ID, got[d.Hierarchy.ID], d.Rel)
				}
			}
			// Hierarchies outside the layout keep the process where its
			// parent is.
			self := procCgroups(t, os.Getpid())
			for id, p := range got {
				if _, in := l.ByID(id); !in && p != self[id] {
					t.Errorf("hierarchy %d outside the layout: process in %q, we are in %q", id, p, self[id])
				}
			}
		})
	}
}
