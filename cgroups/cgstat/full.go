package cgstat

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	v1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	"github.com/containerd/cgroups/v3/cgroup2"
	v2stats "github.com/containerd/cgroups/v3/cgroup2/stats"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/psi"
)

// Full is one reading of a cgroup's statistics for metrics, made through
// containerd/cgroups/v3 at scrape time. A section is nil when no directory
// of the cgroup is in a hierarchy that accounts for it, or when its files
// do not exist there (a root cgroup, a controller not enabled on cgroup2).
// Nil means "not reported", never zero.
type Full struct {
	// Memory holds the memory figures that containerd reports. Its Fields
	// say which optional ones: containerd reads neither memory.high nor
	// the workingset counters of Linux 5.9+, nor v1 total_shmem; the fast
	// path (Reader) reads them all.
	Memory *Memory
	// CPU is the CPU time the cgroup's tasks used: v1 cpuacct, or
	// cgroup2 cpu.stat, which has usage in every cgroup2 cgroup (also on
	// hybrid hosts, where no controller is enabled there).
	CPU *CPU
	// Throttling is CFS bandwidth throttling: the v1 cpu controller, or
	// the cgroup2 cpu controller when enabled for the cgroup.
	Throttling *Throttling
	// IO is block I/O per device: cgroup2 io.stat, or v1 blkio as
	// containerd reads it (see IO).
	IO *IO
	// Pids is the pids controller's count and limit.
	Pids *Pids
}

// CPU is cumulated CPU time. On v1, User and System come from
// cpuacct.stat, which counts in USER_HZ ticks (10 ms), so they are coarse.
type CPU struct {
	Usage, User, System time.Duration
}

// Throttling is CFS bandwidth throttling: how many enforcement periods
// elapsed while the cgroup had runnable tasks, in how many it was
// throttled, and for how long in total.
type Throttling struct {
	Periods, ThrottledPeriods uint64
	ThrottledTime             time.Duration
}

// IO is block I/O per device, sorted by major and minor number.
//
// On v1, containerd reads the blkio.throttle.io_service_bytes and
// io_serviced files unless the CFQ scheduler's *_recursive files exist
// (gone since Linux 5.0). The throttle files count only the cgroup's own
// tasks, not its descendants', so a pod-level cgroup whose processes live
// in container cgroups shows no I/O: read IO of the leaf cgroups on v1.
type IO struct {
	Devices []IODevice
}

// IODevice is the I/O of one block device.
type IODevice struct {
	Major, Minor                             uint64
	ReadBytes, WriteBytes, ReadOps, WriteOps uint64
}

// Pids is the number of tasks and its limit (Unlimited when none).
type Pids struct {
	Current, Max uint64
}

// v1Controllers are the v1 controllers Full reads, each through its own
// cgroup1.Load so that a missing file (the root cgroup has no pids.current)
// costs only its own section.
var v1Controllers = []cgroup1.Name{cgroup1.Memory, cgroup1.Cpu, cgroup1.Cpuacct, cgroup1.Blkio, cgroup1.Pids}

// v1Sub is a containerd subsystem bound to one hierarchy.
type v1Sub struct {
	name cgroup1.Name
	sub  cgroup1.Subsystem
}

// Stater reads full statistics of cgroups through containerd/cgroups/v3.
// It is safe for concurrent use.
type Stater struct {
	v1 map[uint32][]v1Sub // by hierarchy id
}

// NewStater returns a Stater for the hierarchies of l.
//
// containerd addresses a v1 controller as <directory>/<name> (for example
// /sys/fs/cgroup/memory), whatever l says; a controller whose mount cannot
// be reached that way (no such directory or symbolic link next to its
// mount) is left out, and its sections stay nil.
func NewStater(l *cgroups.Layout) *Stater {
	s := &Stater{v1: make(map[uint32][]v1Sub)}
	for i := range l.Hierarchies {
		h := &l.Hierarchies[i]
		if h.V2() {
			continue
		}
		root := filepath.Dir(h.Mount)
		for _, name := range v1Controllers {
			if !h.Has(string(name)) || !sameDir(filepath.Join(root, string(name)), h.Mount) {
				continue
			}
			var sub cgroup1.Subsystem
			switch name {
			case cgroup1.Memory:
				// Swap accounting may be off, and the kernel-memory
				// files are not used: leave them out rather than
				// fail on them.
				sub = cgroup1.NewMemory(root, cgroup1.OptionalSwap(), cgroup1.IgnoreModules("kmem", "kmem.tcp"))
			case cgroup1.Cpu:
				sub = cgroup1.NewCpu(root)
			case cgroup1.Cpuacct:
				sub = cgroup1.NewCpuacct(root)
			case cgroup1.Blkio:
				sub = cgroup1.NewBlkio(root)
			case cgroup1.Pids:
				sub = cgroup1.NewPids(root)
			}
			s.v1[h.ID] = append(s.v1[h.ID], v1Sub{name: name, sub: sub})
		}
	}
	return s
}

func sameDir(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// Full reads the statistics of one cgroup from its directories, one per
// hierarchy, as cgroups.Layout.Resolve returns them; directories that do
// not exist (a cgroup made only in some hierarchies) are skipped. v1
// controllers are read first; the cgroup2 directory fills only the
// sections they left empty.
//
// It fails with ErrGone when none of the directories exists, or one
// vanished during the reading.
func (s *Stater) Full(dirs ...cgroups.Dir) (*Full, error) {
	var f Full
	var v2 []cgroups.Dir
	found := false
	for _, d := range dirs {
		if d.Hierarchy == nil {
			return nil, fmt.Errorf("read statistics of %s: directory without a hierarchy", d.Path)
		}
		if !isDir(d.Path) {
			continue
		}
		found = true
		if d.Hierarchy.V2() {
			v2 = append(v2, d)
			continue
		}
		if err := s.statV1(d, &f); err != nil {
			return nil, err
		}
	}
	for _, d := range v2 {
		if err := statV2(d, &f); err != nil {
			return nil, err
		}
	}
	if !found {
		return nil, fmt.Errorf("read statistics of %s: %w: no directory of the cgroup exists", firstPath(dirs), ErrGone)
	}
	return &f, nil
}

func firstPath(dirs []cgroups.Dir) string {
	if len(dirs) == 0 {
		return "cgroup without directories"
	}
	return dirs[0].Path
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// inMount returns the path of d within its hierarchy's mount, which is the
// path containerd wants: "/" for the mount's root. On hosts that mount the
// whole hierarchy it equals d.Rel.
func inMount(d cgroups.Dir) (string, error) {
	rest, ok := strings.CutPrefix(d.Path, d.Hierarchy.Mount)
	if !ok || (rest != "" && rest[0] != '/') {
		return "", fmt.Errorf("read statistics of %s: %w: not beneath its mount %s", d.Path, cgroups.ErrInvalidPath, d.Hierarchy.Mount)
	}
	if rest == "" {
		return "/", nil
	}
	return rest, nil
}

// statV1 reads the v1 controllers of d's hierarchy, one Load each.
func (s *Stater) statV1(d cgroups.Dir, f *Full) error {
	group, err := inMount(d)
	if err != nil {
		return err
	}
	for _, vs := range s.v1[d.Hierarchy.ID] {
		sub := vs.sub
		cg, err := cgroup1.Load(cgroup1.StaticPath(group), cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) {
			return []cgroup1.Subsystem{sub}, nil
		}))
		if errors.Is(err, cgroup1.ErrCgroupDeleted) {
			if !isDir(d.Path) {
				return fmt.Errorf("read %s statistics of %s: %w", vs.name, d.Path, ErrGone)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("load %s statistics of %s: %w", vs.name, d.Path, err)
		}
		m, err := cg.Stat()
		if err != nil {
			if !isDir(d.Path) {
				return fmt.Errorf("read %s statistics of %s: %w: %w", vs.name, d.Path, ErrGone, err)
			}
			if errors.Is(err, fs.ErrNotExist) {
				// The controller's files are not all there: the root
				// cgroup lacks pids.current and pids.max.
				continue
			}
			return fmt.Errorf("read %s statistics of %s: %w", vs.name, d.Path, err)
		}
		switch vs.name {
		case cgroup1.Memory:
			f.Memory = memoryFromV1(m)
		case cgroup1.Cpu:
			f.Throttling = throttlingFromV1(m)
		case cgroup1.Cpuacct:
			f.CPU = cpuFromV1(m)
		case cgroup1.Blkio:
			f.IO = ioFromV1(m)
		case cgroup1.Pids:
			if f.Pids, err = pidsFromV1(m, sub, group); err != nil {
				return err
			}
		}
	}
	return nil
}

func memoryFromV1(m *v1stats.Metrics) *Memory {
	ms := m.GetMemory()
	if ms == nil {
		return nil
	}
	out := &Memory{
		Usage:        ms.GetUsage().GetUsage(),
		Limit:        v1Limit(ms.GetUsage().GetLimit()),
		High:         Unlimited,
		Anon:         ms.TotalRSS,
		File:         ms.TotalCache,
		ActiveFile:   ms.TotalActiveFile,
		InactiveFile: ms.TotalInactiveFile,
		Events: MemoryEvents{
			// See Reader: memsw fails first when both limits are equal.
			Max: ms.GetUsage().GetFailcnt() + ms.GetSwap().GetFailcnt(),
		},
	}
	if oc := m.GetMemoryOomControl(); oc != nil {
		out.Events.OOMKill = oc.OomKill
		out.UnderOOM = oc.UnderOom == 1
		out.Fields |= FieldUnderOOM
	}
	return out
}

func throttlingFromV1(m *v1stats.Metrics) *Throttling {
	t := m.GetCPU().GetThrottling()
	if t == nil {
		return nil
	}
	return &Throttling{
		Periods:          t.Periods,
		ThrottledPeriods: t.ThrottledPeriods,
		ThrottledTime:    time.Duration(t.ThrottledTime), // ns
	}
}

func cpuFromV1(m *v1stats.Metrics) *CPU {
	u := m.GetCPU().GetUsage()
	if u == nil {
		return nil
	}
	// All in ns: cpuacct.usage, and cpuacct.stat converted by containerd.
	return &CPU{Usage: time.Duration(u.Total), User: time.Duration(u.User), System: time.Duration(u.Kernel)}
}

func ioFromV1(m *v1stats.Metrics) *IO {
	b := m.GetBlkio()
	if b == nil {
		return nil
	}
	byDev := make(map[[2]uint64]*IODevice)
	dev := func(e *v1stats.BlkIOEntry) *IODevice {
		k := [2]uint64{e.Major, e.Minor}
		d, ok := byDev[k]
		if !ok {
			d = &IODevice{Major: e.Major, Minor: e.Minor}
			byDev[k] = d
		}
		return d
	}
	for _, e := range b.IoServiceBytesRecursive {
		switch e.Op {
		case "Read":
			dev(e).ReadBytes = e.Value
		case "Write":
			dev(e).WriteBytes = e.Value
		}
	}
	for _, e := range b.IoServicedRecursive {
		switch e.Op {
		case "Read":
			dev(e).ReadOps = e.Value
		case "Write":
			dev(e).WriteOps = e.Value
		}
	}
	return sortedIO(byDev)
}

func sortedIO(byDev map[[2]uint64]*IODevice) *IO {
	io := &IO{Devices: make([]IODevice, 0, len(byDev))}
	for _, d := range byDev {
		io.Devices = append(io.Devices, *d)
	}
	slices.SortFunc(io.Devices, func(a, b IODevice) int {
		return cmp.Or(cmp.Compare(a.Major, b.Major), cmp.Compare(a.Minor, b.Minor))
	})
	return io
}

// pidsFromV1 maps containerd's v1 pids figures. containerd reads "max" in
// pids.max as 0 on v1 (and as MaxUint64 on cgroup2), which is also a real
// limit, so a 0 is settled by reading the file.
func pidsFromV1(m *v1stats.Metrics, sub cgroup1.Subsystem, group string) (*Pids, error) {
	p := m.GetPids()
	if p == nil {
		return nil, nil
	}
	out := &Pids{Current: p.Current, Max: p.Limit}
	if p.Limit != 0 {
		return out, nil
	}
	pather, ok := sub.(interface{ Path(string) string })
	if !ok {
		return nil, fmt.Errorf("read pids.max: %w: containerd's pids controller has no Path", ErrUnsupported)
	}
	name := filepath.Join(pather.Path(group), "pids.max")
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if out.Max, err = parseSingle(b, name, true); err != nil {
		return nil, err
	}
	return out, nil
}

// statV2 reads d through cgroup2.Manager.StatFiltered. containerd reads a
// missing or unreadable file as 0 on cgroup2, so statV2 asks only for the
// controllers enabled in d (cgroup.controllers) whose files exist, and
// checks afterwards that d still exists.
func statV2(d cgroups.Dir, f *Full) error {
	group, err := inMount(d)
	if err != nil {
		return err
	}
	mgr, err := cgroup2.Load(group, cgroup2.WithMountpoint(d.Hierarchy.Mount))
	if err != nil {
		return fmt.Errorf("load statistics of %s: %w", d.Path, err)
	}
	ctrls, err := mgr.Controllers()
	if err != nil {
		if !isDir(d.Path) {
			return fmt.Errorf("read statistics of %s: %w: %w", d.Path, ErrGone, err)
		}
		return fmt.Errorf("read statistics of %s: %w", d.Path, err)
	}
	has := func(file string) bool {
		_, err := os.Lstat(filepath.Join(d.Path, file))
		return err == nil
	}
	var mask cgroup2.StatMask
	wantCPU := f.CPU == nil && has("cpu.stat")
	wantThrottling := f.Throttling == nil && slices.Contains(ctrls, "cpu") && has("cpu.stat")
	wantMemory := f.Memory == nil && slices.Contains(ctrls, "memory") && has("memory.current")
	wantIO := f.IO == nil && slices.Contains(ctrls, "io") && has("io.stat")
	wantPids := f.Pids == nil && slices.Contains(ctrls, "pids") && has("pids.current")
	if wantCPU || wantThrottling {
		mask |= cgroup2.StatCPU
	}
	if wantMemory {
		mask |= cgroup2.StatMemory | cgroup2.StatMemoryEvents
	}
	if wantIO {
		mask |= cgroup2.StatIO
	}
	if wantPids {
		mask |= cgroup2.StatPids
	}
	if mask == 0 {
		return nil
	}
	m, err := mgr.StatFiltered(mask)
	if err != nil {
		if !isDir(d.Path) {
			return fmt.Errorf("read statistics of %s: %w: %w", d.Path, ErrGone, err)
		}
		return fmt.Errorf("read statistics of %s: %w", d.Path, err)
	}
	if !isDir(d.Path) {
		return fmt.Errorf("read statistics of %s: %w: removed while being read", d.Path, ErrGone)
	}
	if c := m.GetCPU(); c != nil {
		if wantCPU {
			f.CPU = &CPU{
				Usage:  time.Duration(c.UsageUsec) * time.Microsecond,
				User:   time.Duration(c.UserUsec) * time.Microsecond,
				System: time.Duration(c.SystemUsec) * time.Microsecond,
			}
		}
		if wantThrottling {
			f.Throttling = &Throttling{
				Periods:          c.NrPeriods,
				ThrottledPeriods: c.NrThrottled,
				ThrottledTime:    time.Duration(c.ThrottledUsec) * time.Microsecond,
			}
		}
	}
	if wantMemory {
		f.Memory = memoryFromV2(m)
	}
	if wantIO {
		byDev := make(map[[2]uint64]*IODevice)
		for _, e := range m.GetIo().GetUsage() {
			byDev[[2]uint64{e.Major, e.Minor}] = &IODevice{
				Major: e.Major, Minor: e.Minor,
				ReadBytes: e.Rbytes, WriteBytes: e.Wbytes, ReadOps: e.Rios, WriteOps: e.Wios,
			}
		}
		f.IO = sortedIO(byDev)
	}
	if p := m.GetPids(); wantPids && p != nil {
		f.Pids = &Pids{Current: p.Current, Max: p.Limit} // "max" is MaxUint64 = Unlimited
	}
	return nil
}

func memoryFromV2(m *v2stats.Metrics) *Memory {
	ms := m.GetMemory()
	if ms == nil {
		return nil
	}
	out := &Memory{
		Usage:        ms.Usage,
		Limit:        ms.UsageLimit, // "max" is MaxUint64 = Unlimited
		High:         Unlimited,
		Anon:         ms.Anon,
		File:         ms.File,
		ActiveFile:   ms.ActiveFile,
		InactiveFile: ms.InactiveFile,
		Shmem:        ms.Shmem,
		Fields:       FieldShmem,
	}
	if ev := m.GetMemoryEvents(); ev != nil {
		// containerd does not say whether oom_group_kill was in the
		// file (Linux 5.17+), so it is not reported.
		out.Events = MemoryEvents{Low: ev.Low, High: ev.High, Max: ev.Max, OOM: ev.Oom, OOMKill: ev.OomKill}
		out.Fields |= FieldEventsLow | FieldEventsHigh | FieldEventsOOM
	}
	if p := ms.GetPSI(); p != nil && (p.Some != nil || p.Full != nil) {
		line := func(d *v2stats.PSIData) psi.Line {
			return psi.Line{Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300, Total: time.Duration(d.Total) * time.Microsecond}
		}
		if p.Some != nil {
			out.PSI.Some, out.PSI.HasSome = line(p.Some), true
		}
		if p.Full != nil {
			out.PSI.Full, out.PSI.HasFull = line(p.Full), true
		}
		out.Fields |= FieldPSI
	}
	return out
}
