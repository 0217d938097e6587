package pressure

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

// CgroupKey identifies a cgroup by its memory cgroup: ids are unique only
// within a hierarchy, and a host has one memory hierarchy.
type CgroupKey struct {
	ID          uint64
	HierarchyID uint32
}

// Cgroup is one cgroup's statistics in a Snapshot.
type Cgroup struct {
	Key CgroupKey
	// UnifiedID is the cgroup2 id (the same as Key.ID on pure v2, 0 when
	// there is no cgroup2 directory).
	UnifiedID uint64
	// Rel is the cgroup's path within its hierarchy ("/a/b"); Dir its
	// memory directory on disk.
	Rel, Dir string
	Memory   cgstat.Memory
	// MemoryAt is when Memory was read: the Snapshot's Time for a hot
	// cgroup (Config.Hot), for a cold one the last snapshot that read the
	// cold cgroups (Snapshotter.SnapshotCold) or admitted it.
	MemoryAt time.Time
	// CPU and IO pressure from the cgroup2 directory (HasCPU/HasIO),
	// read every Config.SlowEvery snapshots at SlowAt. Memory limits and
	// event counters are refreshed on the same slow ticks; usage,
	// memory.stat and memory pressure on every tick. A cgroup that is not
	// Config.Hot is read (all of it) only by the snapshots that ask for
	// the cold cgroups; a Config.Calm one, while snapshots are calm, too. The slow figures feed metrics, not decisions (OOM
	// kills arrive as kernel events), and leaving them out halves the
	// cost of a tick.
	CPU, IO       psi.Stats
	HasCPU, HasIO bool
	SlowAt        time.Time
	// Err is the first error reading this cgroup; its figures are then
	// incomplete (those not read are zero and must not be used).
	Err error
}

// Node is the node-wide part of a Snapshot.
type Node struct {
	Meminfo nodestats.Meminfo
	Vmstat  nodestats.Vmstat
	// PSI of the whole node by resource; a resource missing from the map
	// is not supported by this kernel.
	PSI     map[psi.Resource]psi.Stats
	NodeFS  nodestats.FSStats
	ImageFS nodestats.FSStats
	PIDs    nodestats.PIDStats
	// Root is the node's memory as the kubelet reads it (root cgroup).
	Root cgstat.CgroupMemory
	// Pods is the pod cgroup root's memory and PodsLimit its limit
	// (HasPods).
	Pods      cgstat.CgroupMemory
	PodsLimit uint64
	HasPods   bool

	// Which of the above were read; a figure not read is zero and unused.
	okMeminfo, okRoot, okNodeFS, okImageFS, okPIDs bool
}

// Snapshot is everything sensed in one tick.
type Snapshot struct {
	Time    time.Time
	Took    time.Duration
	Node    Node
	Signals []nodestats.Observation
	Cgroups []Cgroup
	// ColdAt is when the cold cgroups (Config.Hot) were last read: the
	// Snapshot's Time when it read them (Snapshotter.SnapshotCold),
	// earlier when it carries an older reading, zero before the first.
	ColdAt time.Time
	// Errors are node-level read failures; per-cgroup errors are in
	// Cgroup.Err.
	Errors []error
}

// Signal returns the observation of one signal, if it was made.
func (s *Snapshot) Signal(sig nodestats.Signal) (nodestats.Observation, bool) {
	for _, o := range s.Signals {
		if o.Signal == sig {
			return o, true
		}
	}
	return nodestats.Observation{}, false
}

// Config says what a Snapshotter reads.
type Config struct {
	Layout *cgroups.Layout
	// Roots are the monitored cgroup subtrees (as nodeguard events
	// --cgroup: relative paths resolve against nodeguard's own cgroup).
	Roots []string
	// PodsRoot is the pod cgroup root (kubepods) for
	// allocatableMemory.available; "" leaves that signal out.
	PodsRoot string
	// Allocatable is the memory allocatable to pods in bytes; the pod
	// root's own limit applies when it is lower or Allocatable is 0.
	Allocatable uint64
	// ProcDir is /proc (injected for tests).
	ProcDir string
	// RootMemoryDir is the node's root memory cgroup directory (v1
	// /sys/fs/cgroup/memory, v2 /sys/fs/cgroup), read only.
	RootMemoryDir string
	// NodeFSPath and ImageFSPath are paths on the node and image
	// filesystems ("" leaves the signals out).
	NodeFSPath, ImageFSPath string
	// StatFSTimeout bounds a filesystem's statfs (default
	// nodestats.DefaultStatFSTimeout); past it the filesystem's signals
	// are left out of the Snapshot. StatFS replaces nodestats.StatFS,
	// for tests.
	StatFSTimeout time.Duration
	StatFS        func(path string) (nodestats.FSStats, error)
	// ImageFS, when set, replaces ImageFSPath: the runtime names its image
	// filesystem (CRI ImageFsInfo) and the function statfs's it, bounded,
	// as the kubelet's CRI stats provider does (imagegc.ImageFS.FSStats).
	ImageFS func(ctx context.Context) (nodestats.FSStats, error)
	// RescanEvery walks the roots again to find cgroups missed by Add.
	RescanEvery time.Duration
	// SlowEvery: cgroup cpu and io pressure are read every SlowEvery-th
	// snapshot (default 5) and carried over in between.
	SlowEvery int
	// Hot says which cgroups have their usage, memory.stat and memory
	// pressure read on every snapshot (all when nil). The others, the
	// cold ones, are read whole when they are admitted and then only by
	// the snapshots that ask for them (SnapshotCold: a metrics scrape),
	// their last reading carried over in between; one removed meanwhile
	// stays in the snapshots until the kernel's rmdir event (Remove), the
	// next rescan that misses it, or the next cold snapshot. Hot is given
	// the cgroup's path from its monitored root on, the root's own name
	// first ("kubepods/burstable/pod<uid>/<ctr>"), never what lies above
	// the root. nodeguard run makes the pod cgroups and those above them
	// hot: the eviction policy decides on pods, and their containers'
	// cgroups (two of every three beneath kubepods) feed only metrics and
	// the ids of kernel events; at 250 pods reading them on every 5th tick
	// cost a third of the agent's snapshots, whether or not anything
	// scraped the metrics.
	Hot func(fromRoot string) bool
	// Calm names, among the hot cgroups, those that a calm snapshot
	// (SnapshotCalm) reads as cold ones: nodeguard run names the pods'
	// own cgroups, which the eviction policy needs fresh only when it may
	// decide (memory near a threshold); the node's figures and the
	// cgroups above the pods stay fresh in every snapshot.
	Calm   func(fromRoot string) bool
	Logger *slog.Logger
}

// Snapshotter reads Snapshots. Snapshot may be called from one goroutine
// at a time; Add and Remove from any.
//
// Only Snapshot and Close close a cgroup's descriptors. Remove runs on the
// kernel event goroutine while a Snapshot may be reading the very entry it
// removes, outside the lock: closing there would fail that reading with
// EBADF (and the policy ranks a pod without a reading first), or let a
// file opened meanwhile take the descriptor's number, so that the reading
// returns another file's content. Remove therefore retires the entry, and
// the next Snapshot closes it before it reads anything.
type Snapshotter struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry // by Rel
	pending []string          // Rels added since the last tick
	retired []*entry          // removed since the last tick, still open
	scanned time.Time
	// sorted is entries in the order of their Rel, the order a Snapshot
	// lists them in; nil when entries changed since it was made (sorting
	// ~750 paths every tick cost a tenth of a snapshot at 250 pods).
	sorted []*entry
	// coldAt is when the cold cgroups were last read (SnapshotCold).
	coldAt time.Time

	meminfo *nodestats.MeminfoReader
	vmstat  *nodestats.VmstatReader
	sysPSI  map[psi.Resource]*psi.File
	roots   []root
	pods    *cgstat.Reader
	// nodeFS and imageFS are one probe when both paths are the same:
	// one statfs per filesystem in flight at most.
	nodeFS, imageFS *nodestats.FSProbe
	ticks           int
}

// root is one monitored subtree in every hierarchy. A cgroup beneath it has
// the same path below the root in each hierarchy, while the roots
// themselves may sit at different places (a relative root resolves against
// nodeguard's own cgroup, which differs between hierarchies on hybrid hosts).
type root struct {
	mem   cgroups.Dir   // in the memory hierarchy
	other []cgroups.Dir // in the other monitored hierarchies (cgroup2 on hybrid hosts)
	all   []cgroups.Dir // in every hierarchy (full statistics)
}

type entry struct {
	// last slow reading, carried between slow ticks
	mem           cgstat.Memory
	full          bool
	cpuSt, ioSt   psi.Stats
	hasCPU, hasIO bool
	slowAt        time.Time
	// slowTick is Snapshotter.ticks when the slow figures were read.
	slowTick int

	memAt time.Time
	// admitted is when the entry was opened: a rescan whose walk began
	// later and did not see its directory retires it.
	admitted time.Time
	hot      bool // read on every tick (Config.Hot)
	calm     bool // read as a cold one by a calm snapshot (Config.Calm)
	rel      string
	key      CgroupKey
	uid      uint64
	dir      string
	reader   *cgstat.Reader
	cpu, io  *psi.File
}

// New opens the node-wide files and scans the roots once.
func New(cfg Config) (_ *Snapshotter, retErr error) {
	if cfg.Layout == nil {
		return nil, errors.New("new snapshotter: no cgroup layout")
	}
	if cfg.Layout.Memory == nil {
		return nil, fmt.Errorf("new snapshotter: %w: no memory controller mounted", cgroups.ErrUnsupported)
	}
	if cfg.ProcDir == "" {
		cfg.ProcDir = "/proc"
	}
	if cfg.RootMemoryDir == "" {
		cfg.RootMemoryDir = cfg.Layout.Memory.Mount
	}
	if cfg.RescanEvery <= 0 {
		cfg.RescanEvery = 10 * time.Second
	}
	if cfg.SlowEvery <= 0 {
		cfg.SlowEvery = 5
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Snapshotter{cfg: cfg, log: log, entries: map[string]*entry{}, sysPSI: map[psi.Resource]*psi.File{}}
	defer func() {
		if retErr != nil {
			s.Close()
		}
	}()
	var err error
	if s.meminfo, err = nodestats.OpenMeminfo(filepath.Join(cfg.ProcDir, "meminfo")); err != nil {
		return nil, fmt.Errorf("new snapshotter: %w", err)
	}
	if s.vmstat, err = nodestats.OpenVmstat(filepath.Join(cfg.ProcDir, "vmstat")); err != nil {
		return nil, fmt.Errorf("new snapshotter: %w", err)
	}
	for _, r := range psi.Resources() {
		f, err := psi.OpenSystem(filepath.Join(cfg.ProcDir, "pressure"), r)
		if err != nil {
			if errors.Is(err, psi.ErrUnsupported) {
				continue
			}
			return nil, fmt.Errorf("new snapshotter: %w", err)
		}
		s.sysPSI[r] = f
	}
	for _, spec := range cfg.Roots {
		dirs, err := cfg.Layout.ResolveMonitored(spec)
		if err != nil {
			return nil, fmt.Errorf("new snapshotter: root %q: %w", spec, err)
		}
		var r root
		for _, d := range dirs {
			if d.Hierarchy.ID == cfg.Layout.Memory.ID {
				r.mem = d
			} else {
				r.other = append(r.other, d)
			}
		}
		if r.mem.Path == "" {
			return nil, fmt.Errorf("new snapshotter: root %q: not in the memory hierarchy", spec)
		}
		if r.all, err = cfg.Layout.Resolve(spec); err != nil {
			return nil, fmt.Errorf("new snapshotter: root %q: %w", spec, err)
		}
		s.roots = append(s.roots, r)
	}
	if cfg.PodsRoot != "" {
		dirs, err := cfg.Layout.ResolveMonitored(cfg.PodsRoot)
		if err != nil {
			return nil, fmt.Errorf("new snapshotter: pod root %q: %w", cfg.PodsRoot, err)
		}
		src, err := cgstat.SourceFor(dirs)
		if err != nil {
			return nil, fmt.Errorf("new snapshotter: pod root %q: %w", cfg.PodsRoot, err)
		}
		s.pods = cgstat.NewReader(src)
	}
	if cfg.NodeFSPath != "" {
		s.nodeFS = nodestats.NewFSProbe(cfg.NodeFSPath, cfg.StatFSTimeout, cfg.StatFS)
	}
	switch {
	case cfg.ImageFSPath == "":
	case cfg.ImageFSPath == cfg.NodeFSPath:
		s.imageFS = s.nodeFS
	default:
		s.imageFS = nodestats.NewFSProbe(cfg.ImageFSPath, cfg.StatFSTimeout, cfg.StatFS)
	}
	if err := s.rescan(); err != nil {
		return nil, err
	}
	return s, nil
}

// Add starts reading the cgroup at rel (its path within the memory
// hierarchy, as the kernel's cgroup_mkdir reports it) from the next
// Snapshot on. Paths outside the monitored roots are ignored.
func (s *Snapshotter) Add(rel string) {
	s.mu.Lock()
	s.pending = append(s.pending, rel)
	s.mu.Unlock()
}

// Remove stops reading the cgroup at rel from the next Snapshot on. A
// Snapshot under way may still read it; its descriptors are closed when
// the next one starts.
func (s *Snapshotter) Remove(rel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(rel)
}

// removeLocked retires the entry of rel, under mu.
func (s *Snapshotter) removeLocked(rel string) {
	if e, ok := s.entries[rel]; ok {
		delete(s.entries, rel)
		s.retired = append(s.retired, e)
		s.sorted = nil
	}
}

// closeRetired closes the entries removed since the last Snapshot. It is
// called by Snapshot only, before it reads, so no reading uses them.
func (s *Snapshotter) closeRetired() {
	s.mu.Lock()
	retired := s.retired
	s.retired = nil
	s.mu.Unlock()
	for _, e := range retired {
		e.close()
	}
}

// Len is the number of cgroups read per Snapshot.
func (s *Snapshotter) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.entries)
}

func (e *entry) close() {
	_ = e.reader.Close()
	if e.cpu != nil {
		_ = e.cpu.Close()
	}
	if e.io != nil {
		_ = e.io.Close()
	}
}

// rescan walks the roots in the memory hierarchy and adds the cgroups it
// does not know, and retires those it knew before the walk began and did
// not find (a cold cgroup is not read between cold snapshots, so no read
// would tell that it vanished). Others that vanish are dropped when a
// read says so.
func (s *Snapshotter) rescan() error {
	began := time.Now()
	var rels []string
	for _, r := range s.roots {
		err := cgroups.Walk(r.mem.Path, func(p string) error {
			rels = append(rels, filepath.Join(r.mem.Rel, strings.TrimPrefix(p, r.mem.Path)))
			return nil
		})
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("scan cgroup root %s: %w", r.mem.Path, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	found := make(map[string]bool, len(rels))
	for _, rel := range rels {
		found[rel] = true
		if _, ok := s.entries[rel]; !ok {
			s.pending = append(s.pending, rel)
		}
	}
	for rel, e := range s.entries {
		if !found[rel] && e.admitted.Before(began) {
			s.removeLocked(rel)
		}
	}
	s.scanned = began
	return nil
}

// admit opens readers for pending cgroups; vanished ones are skipped.
func (s *Snapshotter) admit() {
	s.mu.Lock()
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	for _, rel := range pending {
		s.mu.Lock()
		_, known := s.entries[rel]
		s.mu.Unlock()
		if known {
			continue
		}
		e, err := s.open(rel)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				s.log.Debug("cgroup not admitted", "cgroup", rel, "err", err)
			}
			continue
		}
		s.mu.Lock()
		s.entries[rel] = e
		s.sorted = nil
		s.mu.Unlock()
	}
}

// dirsOf maps a path in the memory hierarchy to the cgroup's directory in
// every monitored hierarchy, through the root it lies beneath.
func (s *Snapshotter) dirsOf(rel string) ([]cgroups.Dir, error) {
	for _, r := range s.roots {
		sub, ok := strings.CutPrefix(rel, r.mem.Rel)
		if !ok || (sub != "" && sub[0] != '/') {
			continue
		}
		dirs := []cgroups.Dir{{Hierarchy: r.mem.Hierarchy, Path: r.mem.Path + sub, Rel: rel}}
		for _, o := range r.other {
			dirs = append(dirs, cgroups.Dir{Hierarchy: o.Hierarchy, Path: o.Path + sub, Rel: o.Rel + sub})
		}
		return dirs, nil
	}
	return nil, fmt.Errorf("cgroup %s: %w: not beneath a monitored root", rel, fs.ErrNotExist)
}

// fromRoot is rel's path from the monitored root it lies beneath, the
// root's own name first: "kubepods/burstable/pod<uid>" for rel
// "/a/b/kubepods/burstable/pod<uid>" beneath root "/a/b/kubepods".
func (s *Snapshotter) fromRoot(rel string) string {
	for _, r := range s.roots {
		if sub, ok := strings.CutPrefix(rel, r.mem.Rel); ok && (sub == "" || sub[0] == '/') {
			return filepath.Base(r.mem.Rel) + sub
		}
	}
	return rel
}

// AllDirs maps a cgroup (its path in the memory hierarchy) to its
// directories in every hierarchy, for cgstat.Stater.Full.
func (s *Snapshotter) AllDirs(rel string) ([]cgroups.Dir, error) {
	for _, r := range s.roots {
		sub, ok := strings.CutPrefix(rel, r.mem.Rel)
		if !ok || (sub != "" && sub[0] != '/') {
			continue
		}
		dirs := make([]cgroups.Dir, 0, len(r.all))
		for _, d := range r.all {
			dirs = append(dirs, cgroups.Dir{Hierarchy: d.Hierarchy, Path: d.Path + sub, Rel: d.Rel + sub})
		}
		return dirs, nil
	}
	return nil, fmt.Errorf("cgroup %s: %w: not beneath a monitored root", rel, fs.ErrNotExist)
}

func (s *Snapshotter) open(rel string) (*entry, error) {
	dirs, err := s.dirsOf(rel)
	if err != nil {
		return nil, err
	}
	src, err := cgstat.SourceFor(dirs)
	if err != nil {
		return nil, err
	}
	id, err := cgroups.ID(src.Memory)
	if err != nil {
		return nil, err
	}
	e := &entry{rel: rel, dir: src.Memory, key: CgroupKey{ID: id, HierarchyID: s.cfg.Layout.Memory.ID}, reader: cgstat.NewReader(src), admitted: time.Now(),
		hot: s.cfg.Hot == nil || s.cfg.Hot(s.fromRoot(rel)), calm: s.cfg.Calm != nil && s.cfg.Calm(s.fromRoot(rel))}
	if src.PSI != "" {
		if uid, err := cgroups.ID(src.PSI); err == nil {
			e.uid = uid
		}
		// cpu and io pressure files exist in every cgroup2 directory
		// when PSI is on; a missing one is simply not reported.
		if f, err := psi.OpenFile(filepath.Join(src.PSI, "cpu.pressure")); err == nil {
			e.cpu = f
		}
		if f, err := psi.OpenFile(filepath.Join(src.PSI, "io.pressure")); err == nil {
			e.io = f
		}
	}
	return e, nil
}

// Snapshot reads the node and the hot cgroups (Config.Hot) once; cold
// ones carry their last reading. now is the time the Snapshot is taken at
// (injected: the caller's clock).
func (s *Snapshotter) Snapshot(ctx context.Context, now time.Time) *Snapshot {
	return s.snapshot(ctx, now, readMode{})
}

// SnapshotCalm is Snapshot with the cgroups Config.Calm names read as cold
// ones: they carry their last reading (Cgroup.MemoryAt and SlowAt say how
// old), from the last snapshot that was not calm or the last scrape
// (SnapshotCold). Slow ticks count calm snapshots as others.
func (s *Snapshotter) SnapshotCalm(ctx context.Context, now time.Time) *Snapshot {
	return s.snapshot(ctx, now, readMode{calm: true})
}

// SnapshotCold is Snapshot that reads the cold cgroups too, all of each
// (limits, event counters, cpu and io pressure): what a metrics scrape
// reports. With every cgroup hot (Config.Hot nil) it is Snapshot.
func (s *Snapshotter) SnapshotCold(ctx context.Context, now time.Time) *Snapshot {
	return s.snapshot(ctx, now, readMode{cold: true})
}

// readMode says which cgroups a snapshot reads beyond the hot ones.
type readMode struct {
	// calm: the Config.Calm ones are read as cold ones.
	calm bool
	// cold: the cold ones are read too.
	cold bool
}

func (s *Snapshotter) snapshot(ctx context.Context, now time.Time, mode readMode) *Snapshot {
	start := time.Now()
	s.closeRetired()
	if now.Sub(s.scanned) >= s.cfg.RescanEvery {
		if err := s.rescan(); err != nil {
			s.log.Warn("rescan cgroups", "err", err)
		}
	}
	s.admit()
	snap := &Snapshot{Time: now}
	s.readNode(ctx, snap)

	entries := s.inOrder()
	// A scrape's snapshot (cold) is not a tick: it leaves the hot
	// cgroups' slow cadence where it was.
	slow := !mode.cold && s.ticks%s.cfg.SlowEvery == 0
	if !mode.cold {
		s.ticks++
	}
	snap.Cgroups = make([]Cgroup, 0, len(entries))
	var gone []string
	for _, e := range entries {
		c := Cgroup{Key: e.key, UnifiedID: e.uid, Rel: e.rel, Dir: e.dir}
		// A hot cgroup: limits and event counters on slow ticks only;
		// usage, memory.stat and memory pressure on every tick, unless
		// the snapshot is calm and the cgroup one of Config.Calm's. A
		// cold cgroup: all of it when admitted and when the snapshot
		// asks for the cold ones, nothing otherwise.
		//
		// A calm cgroup in a calm snapshot is not read, not even on a
		// slow tick: its slow figures feed metrics alone, and a scrape
		// (cold) reads those of every hot cgroup whose last slow reading
		// is SlowEvery ticks old. Far from every threshold, 250 pods'
		// limits, events and cpu and io pressure were half of the idle
		// agent's ticks.
		var read func(*cgstat.Memory) error
		readSlow := slow
		switch {
		case !e.full:
			read = e.reader.Read
		case !e.hot:
			if mode.cold {
				read = e.reader.Read
			}
			readSlow = mode.cold
		case mode.calm && e.calm:
			readSlow = false
		case slow:
			read = e.reader.Read
		case mode.cold && s.ticks-e.slowTick >= s.cfg.SlowEvery:
			read, readSlow = e.reader.Read, true
		default:
			read = e.reader.ReadHot
		}
		// A cgroup not read now keeps its last reading.
		c.Memory, c.MemoryAt = e.mem, e.memAt
		if read != nil {
			err := read(&c.Memory)
			switch {
			case errors.Is(err, cgstat.ErrGone):
				gone = append(gone, e.rel)
				continue
			case err != nil:
				c.Err = err
				e.full = false // read whole again on the next tick
			default:
				c.MemoryAt = now
				e.mem, e.memAt, e.full = c.Memory, now, true
			}
		}
		if readSlow || e.slowAt.IsZero() {
			e.readSlow(now, &c)
			e.slowTick = s.ticks
		}
		c.CPU, c.HasCPU, c.IO, c.HasIO, c.SlowAt = e.cpuSt, e.hasCPU, e.ioSt, e.hasIO, e.slowAt
		snap.Cgroups = append(snap.Cgroups, c)
	}
	for _, rel := range gone {
		s.Remove(rel)
	}
	if mode.cold || s.cfg.Hot == nil {
		s.coldAt = now
	}
	snap.ColdAt = s.coldAt
	snap.Signals = s.signals(snap)
	snap.Took = time.Since(start)
	return snap
}

// inOrder is the entries sorted by Rel, sorted again only when they
// changed.
func (s *Snapshotter) inOrder() []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sorted == nil {
		s.sorted = make([]*entry, 0, len(s.entries))
		for _, e := range s.entries {
			s.sorted = append(s.sorted, e)
		}
		slices.SortFunc(s.sorted, func(a, b *entry) int { return strings.Compare(a.rel, b.rel) })
	}
	// The caller reads it outside the lock: a change makes a new slice.
	return s.sorted
}

// readSlow reads cpu and io pressure; an error other than "unsupported"
// marks the cgroup's reading.
func (e *entry) readSlow(now time.Time, c *Cgroup) {
	e.slowAt = now
	e.hasCPU, e.hasIO = false, false
	if e.cpu != nil {
		if st, err := e.cpu.Read(); err == nil {
			e.cpuSt, e.hasCPU = st, true
		} else if c.Err == nil && !errors.Is(err, psi.ErrUnsupported) {
			c.Err = err
		}
	}
	if e.io != nil {
		if st, err := e.io.Read(); err == nil {
			e.ioSt, e.hasIO = st, true
		} else if c.Err == nil && !errors.Is(err, psi.ErrUnsupported) {
			c.Err = err
		}
	}
}

func (s *Snapshotter) readNode(ctx context.Context, snap *Snapshot) {
	n := &snap.Node
	fail := func(err error) bool {
		if err != nil {
			snap.Errors = append(snap.Errors, err)
			return false
		}
		return true
	}
	var err error
	n.Meminfo, err = s.meminfo.Read()
	n.okMeminfo = fail(err)
	n.Vmstat, err = s.vmstat.Read()
	fail(err)
	n.PSI = make(map[psi.Resource]psi.Stats, len(s.sysPSI))
	for r, f := range s.sysPSI {
		st, err := f.Read()
		if fail(err) {
			n.PSI[r] = st
		}
	}
	if s.cfg.Layout.Memory.V2() {
		n.Root, err = cgstat.ReadCgroupMemoryV2(s.cfg.RootMemoryDir)
	} else {
		n.Root, err = cgstat.ReadCgroupMemoryV1(s.cfg.RootMemoryDir)
	}
	n.okRoot = fail(err)
	if s.pods != nil {
		var m cgstat.Memory
		if fail(s.pods.Read(&m)) {
			n.Pods = m.CgroupMemory()
			n.PodsLimit = m.Limit
			n.HasPods = true
		}
	}
	// A filesystem that does not answer in time is unknown: its
	// signals are left out (neither full nor empty) and the error says
	// why.
	if s.nodeFS != nil {
		n.NodeFS, err = s.nodeFS.Stat(ctx)
		n.okNodeFS = fail(err)
	}
	switch {
	case s.cfg.ImageFS != nil:
		n.ImageFS, err = s.cfg.ImageFS(ctx)
		n.okImageFS = fail(err)
	case s.imageFS == nil:
	case s.imageFS == s.nodeFS:
		n.ImageFS, n.okImageFS = n.NodeFS, n.okNodeFS
	default:
		n.ImageFS, err = s.imageFS.Stat(ctx)
		n.okImageFS = fail(err)
	}
	n.PIDs, err = nodestats.ReadPIDs(s.cfg.ProcDir)
	n.okPIDs = fail(err)
}

// signals computes the kubelet's signals from what this Snapshot read;
// a signal whose inputs failed is left out, never computed from zeros.
func (s *Snapshotter) signals(snap *Snapshot) []nodestats.Observation {
	n := &snap.Node
	in := nodestats.Inputs{}
	if n.okMeminfo && n.okRoot {
		in.Meminfo, in.Root = &n.Meminfo, &n.Root
	}
	if n.HasPods {
		in.Pods, in.PodsLimit = &n.Pods, n.PodsLimit
		if s.cfg.Allocatable > 0 {
			in.PodsLimit = min(in.PodsLimit, s.cfg.Allocatable)
		}
	}
	if n.okNodeFS {
		in.NodeFS = &n.NodeFS
	}
	if n.okImageFS {
		in.ImageFS = &n.ImageFS
	}
	if n.okPIDs {
		in.PIDs = &n.PIDs
	}
	return nodestats.AppendObservations(nil, in, snap.Time)
}

// Close releases every descriptor. It must not run while a Snapshot does.
func (s *Snapshotter) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for rel, e := range s.entries {
		e.close()
		delete(s.entries, rel)
	}
	for _, e := range s.retired {
		e.close()
	}
	s.retired = nil
	if s.meminfo != nil {
		_ = s.meminfo.Close()
	}
	if s.vmstat != nil {
		_ = s.vmstat.Close()
	}
	for _, f := range s.sysPSI {
		_ = f.Close()
	}
	if s.pods != nil {
		_ = s.pods.Close()
	}
	return nil
}
