package kubepods

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"
)

// systemdRuntimeDir exists exactly when systemd is PID 1 (sd_booted(3)).
const systemdRuntimeDir = "/run/systemd/system"

// jobTimeout bounds one start or stop job of a slice, as runc's 30 s.
const jobTimeout = 30 * time.Second

// callTimeout bounds one D-Bus call: systemd answers in milliseconds, but
// one stalled in a reload must not hold a pod worker for ever.
const callTimeout = 30 * time.Second

// cpuQuotaPeriodVersion is the first systemd that knows CPUQuotaPeriodUSec
// (242); older ones refuse a unit that sets it, as runc's addCPUQuota knows.
const cpuQuotaPeriodVersion = 242

// systemdPlacer is the systemd driver: the hierarchy's cgroups are
// transient slice units that systemd makes, limits and removes, as the
// kubelet's systemd cgroup manager does through runc's systemd manager
// (StartTransientUnit with Wants= on the parent slice, accounting on,
// DefaultDependencies=false, the resources as unit properties; StopUnit
// and ResetFailedUnit to remove). Slices take no Delegate=: delegation is
// for the scopes the runtime makes for containers beneath them.
type systemdPlacer struct {
	m       *Cgroups
	conn    SystemdConn
	version int // systemd's, 0 when unknown
}

func newSystemdPlacer(ctx context.Context, m *Cgroups) (*systemdPlacer, error) {
	if !path.IsAbs(m.root) {
		return nil, fmt.Errorf("pod cgroups with the systemd driver: %w: the root %q is relative; systemd slices are absolute (use cgroupRoot: /)", ErrUnsupported, m.root)
	}
	conn := m.opts.Systemd
	if conn == nil {
		if _, err := os.Stat(systemdRuntimeDir); err != nil {
			return nil, fmt.Errorf("pod cgroups with the systemd driver: %w: systemd is not this host's init (%s: %w); use cgroupDriver: cgroupfs", ErrUnsupported, systemdRuntimeDir, err)
		}
		// The connection lives until Close, not until ctx ends: pods
		// are torn down while the agent stops.
		life := context.WithoutCancel(ctx)
		dial := func() (SystemdConn, error) {
			c, err := dialSystemd(life)
			if err != nil {
				return nil, err
			}
			return c, nil
		}
		first, err := dial()
		if err != nil {
			return nil, fmt.Errorf("pod cgroups with the systemd driver: %w: %w (use cgroupDriver: cgroupfs where systemd cannot be reached)", ErrUnsupported, err)
		}
		conn = newReconnecting(first, dial)
	}
	p := &systemdPlacer{m: m, conn: conn, version: systemdVersion(conn)}
	if p.version > 0 && p.version < cpuQuotaPeriodVersion {
		m.log.Info("systemd before 242: pod slices get no CPUQuotaPeriodUSec (the CFS period stays systemd's 100 ms, the kubelet's too)", "systemd", p.version)
	}
	return p, nil
}

func (p *systemdPlacer) close() error {
	p.conn.Close()
	return nil
}

// unitOf returns the slice unit of a systemd cgroup name
// ("/kubepods.slice/kubepods-burstable.slice" -> "kubepods-burstable.slice")
// and its parent slice ("-.slice" for the root).
func unitOf(name string) (unit, parent string, err error) {
	unit = path.Base(name)
	if path.Ext(unit) != systemdSuffix || !path.IsAbs(name) {
		return "", "", fmt.Errorf("%q is not a systemd slice path", name)
	}
	parent = path.Base(path.Dir(name))
	if parent == "/" {
		parent = "-.slice"
	}
	return unit, parent, nil
}

func prop(name string, v any) sddbus.Property {
	return sddbus.Property{Name: name, Value: godbus.MakeVariant(v)}
}

// resourceProperties turns rc into unit properties, with the names and
// conversions of runc's systemd managers (genV1ResourcesProperties,
// genV2ResourcesProperties, addCPUQuota): on cgroup v2 MemoryMax and
// CPUWeight, on v1 MemoryLimit and CPUShares; CPUQuotaPerSecUSec rounded up
// to systemd's 10 ms resolution, "infinity" (MaxUint64) for no quota;
// TasksMax.
//
// version is systemd's (0: unknown, taken as recent): before 242 it has no
// CPUQuotaPeriodUSec.
func resourceProperties(rc ResourceConfig, v2 bool, version int) []sddbus.Property {
	var props []sddbus.Property
	if rc.Memory != nil {
		name := "MemoryLimit"
		if v2 {
			name = "MemoryMax"
		}
		props = append(props, prop(name, uint64(max(*rc.Memory, 0))))
	}
	if v2 && rc.CPUWeight != nil {
		props = append(props, prop("CPUWeight", *rc.CPUWeight))
	}
	if !v2 && rc.CPUShares != nil {
		props = append(props, prop("CPUShares", *rc.CPUShares))
	}
	if rc.CPUQuota != nil && rc.CPUPeriod != nil && *rc.CPUPeriod > 0 {
		// systemd refuses 0: a quota of 0 (never made by PodResources)
		// is no quota, as in runc.
		perSec := uint64(math.MaxUint64)
		if q := *rc.CPUQuota; q > 0 {
			perSec = uint64(q) * 1000000 / *rc.CPUPeriod
			if r := perSec % 10000; r != 0 {
				perSec += 10000 - r
			}
		}
		if version == 0 || version >= cpuQuotaPeriodVersion {
			props = append(props, prop("CPUQuotaPeriodUSec", *rc.CPUPeriod))
		}
		props = append(props, prop("CPUQuotaPerSecUSec", perSec))
	}
	if rc.PidsLimit != nil {
		tasks := uint64(math.MaxUint64)
		switch l := *rc.PidsLimit; {
		case l == 0:
			tasks = 1 // systemd refuses 0
		case l > 0:
			tasks = uint64(l)
		}
		props = append(props, prop("TasksMax", tasks))
	}
	return props
}

func (p *systemdPlacer) ensure(ctx context.Context, name string, lv level, rc ResourceConfig) error {
	unit, parent, err := unitOf(name)
	if err != nil {
		return err
	}
	res := resourceProperties(rc, p.m.v2Memory(), p.version)
	if len(res) == 0 && lv != levelPod && p.hasCgroup(name) {
		// kubepods and the QoS slices are ensured before every pod: once
		// they are there, no D-Bus round trip.
		return nil
	}
	props := append([]sddbus.Property{
		sddbus.PropDescription("nodeguard " + lv.String() + " cgroup"),
		sddbus.PropWants(parent),
		prop("DefaultDependencies", false),
		prop("MemoryAccounting", true),
		prop("CPUAccounting", true),
		prop("IOAccounting", true),
		prop("TasksAccounting", true),
	}, res...)
	started, err := p.start(ctx, name, unit, props)
	if err != nil {
		return err
	}
	if !started && len(res) > 0 {
		// It exists (made by an earlier run): bring its settings up to
		// date. runtime=true: the change lives in /run, like the unit.
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := p.conn.SetUnitPropertiesContext(cctx, unit, true, res...)
		cancel()
		if err != nil {
			return fmt.Errorf("set properties of %s: %w", unit, err)
		}
	}
	return p.waitCgroup(ctx, name, true)
}

// start starts the transient slice unit for the cgroup name, waiting for
// its job. It returns false when the unit exists already with its cgroup
// (made by an earlier run). A unit of that name without a cgroup is a
// failed leftover (reset, and made again, as runc does) or an inactive one
// (started again).
func (p *systemdPlacer) start(ctx context.Context, name, unit string, props []sddbus.Property) (bool, error) {
	for attempt := 0; ; attempt++ {
		ch := make(chan string, 1)
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err := p.conn.StartTransientUnitContext(cctx, unit, "replace", props, ch)
		cancel()
		if err == nil {
			return true, p.waitJob(ctx, "start", unit, ch)
		}
		if !isDBusError(err, "org.freedesktop.systemd1.UnitExists") {
			return false, fmt.Errorf("start %s: %w", unit, err)
		}
		if p.hasCgroup(name) {
			return false, nil
		}
		if attempt == 0 {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			if err := p.conn.ResetFailedUnitContext(cctx, unit); err != nil {
				p.m.log.Warn("reset failed slice", "unit", unit, "err", err)
			}
			cancel()
			continue
		}
		// Loaded, not failed, without a cgroup: inactive. Start it as it
		// is; the caller sets its properties next.
		ch = make(chan string, 1)
		cctx, cancel = context.WithTimeout(ctx, callTimeout)
		_, err = p.conn.StartUnitContext(cctx, unit, "replace", ch)
		cancel()
		if err != nil {
			return false, fmt.Errorf("start the existing %s: %w", unit, err)
		}
		return false, p.waitJob(ctx, "start the existing", unit, ch)
	}
}

// hasCgroup reports whether the cgroup directory of name is there in the
// memory hierarchy.
func (p *systemdPlacer) hasCgroup(name string) bool {
	d, err := p.m.layout.Memory.Resolve(name)
	if err != nil {
		return false
	}
	_, err = os.Stat(d.Path)
	return err == nil
}

func (p *systemdPlacer) waitJob(ctx context.Context, op, unit string, ch <-chan string) error {
	t := time.NewTimer(jobTimeout)
	defer t.Stop()
	select {
	case r := <-ch:
		if r != "done" {
			_ = p.conn.ResetFailedUnitContext(ctx, unit)
			return fmt.Errorf("%s %s: systemd's job ended %q", op, unit, r)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("%s %s: systemd's job did not end within %v", op, unit, jobTimeout)
	case <-ctx.Done():
		return fmt.Errorf("%s %s: %w", op, unit, ctx.Err())
	}
}

// waitCgroup waits, bounded, until the cgroup directory of name exists
// (present) or is gone (!present) in the memory hierarchy: systemd makes
// and removes it as part of the job, but a removal is asynchronous when
// tasks are still dying.
func (p *systemdPlacer) waitCgroup(ctx context.Context, name string, present bool) error {
	d, err := p.m.layout.Memory.Resolve(name)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(removeWait)
	for {
		_, err := os.Stat(d.Path)
		if (err == nil) == present {
			return nil
		}
		if time.Now().After(deadline) {
			if present {
				return fmt.Errorf("%s is active but its cgroup %s is missing", path.Base(name), d.Path)
			}
			return fmt.Errorf("systemd stopped %s but its cgroup %s is still there", path.Base(name), d.Path)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (p *systemdPlacer) remove(ctx context.Context, name string, deadline time.Time) error {
	unit, _, err := unitOf(name)
	if err != nil {
		// Not a slice (a cgroupfs-named cgroup left by an earlier driver):
		// nothing for systemd to stop.
		return p.m.removeDirsBy(name, deadline)
	}
	// Stopping a slice kills what is in it, where rmdir would only
	// refuse: look once more right before, as late as possible.
	if d, err := p.m.layout.Memory.Resolve(name); err == nil {
		busy, err := cgroups.Populated(d.Path, d.Hierarchy.V2())
		switch {
		case err != nil && !cgroups.Gone(err):
			return err
		case busy:
			return fmt.Errorf("%s: %w", d.Path, ErrPopulated)
		}
	}
	ch := make(chan string, 1)
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	_, err = p.conn.StopUnitContext(cctx, unit, "replace", ch)
	cancel()
	switch {
	case isDBusError(err, "org.freedesktop.systemd1.NoSuchUnit"):
	case err != nil:
		return fmt.Errorf("stop %s: %w", unit, err)
	default:
		if err := p.waitJob(ctx, "stop", unit, ch); err != nil {
			return err
		}
	}
	// A failed unit stays loaded until reset; systemd then forgets it.
	cctx, cancel = context.WithTimeout(ctx, callTimeout)
	_ = p.conn.ResetFailedUnitContext(cctx, unit)
	cancel()
	// systemd before 240 leaves sub-cgroups, and the runtime may leave
	// an empty container cgroup: whatever remains goes as with cgroupfs.
	return p.m.removeDirsBy(name, deadline)
}

func isDBusError(err error, name string) bool {
	var derr godbus.Error
	return errors.As(err, &derr) && derr.Name == name
}
