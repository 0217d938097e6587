package kubepods

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/nodeguard/nodeguard/cgroups"
)

var (
	// ErrMisplaced: the runtime put a sandbox's cgroup somewhere other
	// than beneath the pod cgroup Cgroups made, so the limits, the
	// statistics, the tripwire and the kill would all miss its processes.
	ErrMisplaced = errors.New("containers would not be in their pod cgroups")
	// ErrDriverMismatch: the runtime places containers with the other
	// cgroup driver than Cgroups's.
	ErrDriverMismatch = errors.New("cgroup driver mismatch")
)

// hint says how to fix a mismatch, for the driver the runtime uses.
func driverHint(runtime Driver) string {
	if runtime == Systemd {
		return "the runtime uses the systemd cgroup driver: set cgroupDriver: systemd (or SystemdCgroup = false in containerd's runc options)"
	}
	return "the runtime uses the cgroupfs cgroup driver: set cgroupDriver: cgroupfs (or SystemdCgroup = true in containerd's runc options)"
}

// CheckRuntimeDriver compares the driver the runtime reports (CRI
// RuntimeConfig) with Cgroups's: a mismatch is an ErrDriverMismatch
// that says what to change.
func (m *Cgroups) CheckRuntimeDriver(runtime string) error {
	d, err := ParseDriver(runtime)
	if err != nil {
		return fmt.Errorf("the runtime reports cgroup driver %q: %w", runtime, err)
	}
	if d != m.driver {
		return fmt.Errorf("%w: cgroupDriver is %s but the runtime reports %s; %s", ErrDriverMismatch, m.driver, d, driverHint(d))
	}
	return nil
}

// CheckRuntimeCgroup is for a relative root on a host where the runtime is
// handed relative parents (see AbsoluteParents): runc resolves them against
// its own cgroup, so the runtime process (runtimePID, the CRI socket's
// peer) must share this process's cgroup in the memory
// hierarchy, as the private test runtime does. Anything else would put
// every container beneath the runtime's cgroup while Cgroups limits and
// watches empty cgroups beneath its own.
func (m *Cgroups) CheckRuntimeCgroup(runtimePID int) error {
	if m.AbsoluteParents() || runtimePID <= 0 {
		return nil
	}
	h := m.layout.Memory
	theirs, err := cgroups.ProcessCgroup(runtimePID, h)
	if err != nil {
		return fmt.Errorf("check the runtime's cgroup: %w", err)
	}
	if theirs != h.Own {
		return fmt.Errorf("%w: cgroupRoot %q is relative, and the runtime (pid %d) runs in %s while nodeguard runs in %s: its containers would land beneath %s; use an absolute cgroupRoot (/ on a node)",
			ErrMisplaced, m.root, runtimePID, theirs, h.Own, path.Join(theirs, m.root))
	}
	return nil
}

// CheckSandbox verifies that the runtime placed sandbox id beneath its pod
// cgroup parent, named the way Cgroups's driver expects: the bare id
// with cgroupfs, a <prefix>-<id>.scope with systemd.
func (m *Cgroups) CheckSandbox(parent, id string) error {
	dir, scope, ok, err := m.containerDir(parent, id)
	if err != nil {
		return err
	}
	if !ok {
		mem, _ := m.layout.Memory.Resolve(parent)
		hint := "the runtime resolved its cgroup parent elsewhere"
		if !m.AbsoluteParents() {
			hint = "a relative cgroup parent resolves against the runtime's own cgroup: use an absolute cgroupRoot (/ on a node)"
		}
		return fmt.Errorf("%w: sandbox %s has no cgroup in %s (%s)", ErrMisplaced, id, mem.Path, hint)
	}
	switch {
	case m.driver == Systemd && !scope:
		return fmt.Errorf("%w: the runtime made %s, a plain directory in a systemd slice; %s", ErrDriverMismatch, dir, driverHint(Cgroupfs))
	case m.driver == Cgroupfs && scope:
		return fmt.Errorf("%w: the runtime made the scope %s; %s", ErrDriverMismatch, dir, driverHint(Systemd))
	}
	return nil
}

// ExplainRunError turns the runtime's refusal of a cgroup parent in the
// other driver's form into an ErrDriverMismatch that says what to change;
// other errors are returned as they are. runc's systemd driver refuses a
// cgroupfs path with "expected cgroupsPath to be of format
// \"slice:prefix:name\"".
func (m *Cgroups) ExplainRunError(err error) error {
	if err == nil || m.driver != Cgroupfs || !strings.Contains(err.Error(), "slice:prefix:name") {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrDriverMismatch, driverHint(Systemd), err)
}
