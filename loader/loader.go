package loader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"github.com/nodeguard/nodeguard/internal/host"
	"github.com/nodeguard/nodeguard/loader/event"
)

// Ring identifies one ring buffer (enum ng_ring in nodeguard.h).
type Ring uint32

// The rings. Each traffic class has its own so that one cannot drown another.
const (
	RingOOM       Ring = 0 // oom_kill, oom_score_adj
	RingReclaim   Ring = 1 // reclaim episodes
	RingLifecycle Ring = 2 // cgroup mkdir/rmdir, process exit
	RingBench     Ring = 3 // synthetic benchmark records
	numRings           = 4
)

var ringMaps = [numRings]string{"ring_oom", "ring_reclaim", "ring_lifecycle", "ring_bench"}

func (r Ring) String() string {
	switch r {
	case RingOOM:
		return "oom"
	case RingReclaim:
		return "reclaim"
	case RingLifecycle:
		return "lifecycle"
	case RingBench:
		return "bench"
	}
	return fmt.Sprintf("ring(%d)", uint32(r))
}

// Defaults, each with its reason.
const (
	// DefaultQueueSize bounds the events waiting for the consumer: 8192
	// records is seconds of a busy node's lifecycle traffic, a few MiB.
	DefaultQueueSize = 8192
	// DefaultRingSize is 256 KiB per ring: ~4000 exit records, more than a
	// scheduler tick's worth of churn on a dense node.
	DefaultRingSize = 256 << 10
	// DefaultMinReclaimEpisode: reclaim episodes shorter than 1 ms are
	// routine and only aggregated; longer ones are stalls worth an event.
	DefaultMinReclaimEpisode = time.Millisecond
	// oomHeadroom is the part of the queue that only the OOM ring may use.
	oomHeadroomDiv = 8
)

// sharedMaps are defined in every object (bpf/include/ng_common.h) and must
// be one map at run time.
var sharedMaps = []string{
	"monitored_cgroups", "ng_settings", "monitored_prefixes", "ring_stats",
	"ring_oom", "ring_reclaim", "ring_lifecycle", "ring_bench",
}

// Options configure Open. The zero value loads every production family.
type Options struct {
	Logger *slog.Logger
	// Families to load; nil means oom, reclaim, cgroup and exit. The bench
	// family is loaded only when named.
	Families []string
	// Paths to try for each hook, in order; nil means tp_btf then
	// tracepoint. Tests use it to exercise the fallback on kernels where
	// tp_btf works.
	Paths []AttachPath
	// RingSize in bytes per ring (a power of two, at least one page); 0
	// means DefaultRingSize. RingSizes overrides it per ring.
	RingSize  int
	RingSizes map[Ring]int
	// QueueSize bounds the consumer queue; 0 means DefaultQueueSize.
	QueueSize int
	// MinReclaimEpisode: shorter episodes are aggregated but not sent.
	// Negative means DefaultMinReclaimEpisode; 0 sends every episode.
	MinReclaimEpisode time.Duration
	// MonitorAll reports every cgroup on the machine instead of the
	// monitored subtree.
	MonitorAll bool
	// NoReaders loads and attaches without reading the rings (doctor).
	NoReaders bool

	// mapEntries overrides the max_entries of the named maps of every
	// family (tests shrink reclaim_stats to fill it with a few cgroups).
	mapEntries map[string]uint32
}

// Pipeline is the loaded kernel side: attached hooks, shared maps, ring
// readers and the consumer queue.
type Pipeline struct {
	log      *slog.Logger
	maps     map[string]*ebpf.Map // shared maps
	colls    []*ebpf.Collection   // map-only collection per family
	reclaim  *ebpf.Map            // reclaim_stats, nil without the reclaim family
	links    []link.Link
	progs    []*ebpf.Program
	hooks    []HookStatus
	readers  []*ringReader
	out      chan event.Event
	settings settings
	setMu    sync.Mutex
	prefixes []prefix
	forget   forgetQueue

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// settings mirrors struct ng_settings.
type settings struct {
	MonitorAll   uint32
	BenchTgid    uint32
	MinEpisodeNS uint64
}

// prefix mirrors struct ng_prefix.
type prefix struct {
	HierarchyID uint32
	Len         uint32
	Path        [256]byte
}

// Open loads and attaches the BPF programs and starts the ring readers.
// A hook that cannot be attached on any path is reported in Hooks() and does
// not fail Open; Open fails only when nothing can be loaded at all.
func Open(opts Options) (_ *Pipeline, retErr error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.MinReclaimEpisode < 0 {
		opts.MinReclaimEpisode = DefaultMinReclaimEpisode
	}
	paths := opts.Paths
	if paths == nil {
		paths = []AttachPath{PathTPBTF, PathTracepoint}
	}
	want := opts.Families
	if want == nil {
		want = []string{FamilyOOM, FamilyReclaim, FamilyCgroup, FamilyExit}
	}

	p := &Pipeline{
		log:  log,
		maps: map[string]*ebpf.Map{},
		out:  make(chan event.Event, opts.QueueSize),
	}
	defer func() {
		if retErr != nil {
			p.closeKernel()
		}
	}()

	cache := btf.NewCache()
	var fams []family
	for _, f := range families() {
		if slices.Contains(want, f.name) {
			fams = append(fams, f)
		}
	}
	if len(fams) == 0 {
		return nil, fmt.Errorf("open pipeline: no known family in %v", want)
	}
	for _, f := range fams {
		if err := p.loadFamily(f, opts, paths, cache); err != nil {
			return nil, err
		}
	}

	p.settings = settings{MinEpisodeNS: uint64(opts.MinReclaimEpisode)}
	if opts.MonitorAll {
		p.settings.MonitorAll = 1
	}
	if slices.Contains(want, FamilyBench) {
		p.settings.BenchTgid = uint32(os.Getpid())
	}
	if err := p.writeSettings(); err != nil {
		return nil, err
	}

	if !opts.NoReaders {
		if err := p.startReaders(opts, want); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func ringSize(opts Options, r Ring) int {
	if n := opts.RingSizes[r]; n > 0 {
		return n
	}
	if opts.RingSize > 0 {
		return opts.RingSize
	}
	return DefaultRingSize
}

// loadFamily creates the family's maps (reusing the shared ones) and then
// loads and attaches each hook on its own, so that one hook the kernel
// refuses cannot take the others down.
func (p *Pipeline) loadFamily(f family, opts Options, paths []AttachPath, cache *btf.Cache) error {
	spec, err := f.load()
	if err != nil {
		return fmt.Errorf("load %s object: %w", f.name, err)
	}
	for i, name := range ringMaps {
		if ms, ok := spec.Maps[name]; ok {
			ms.MaxEntries = uint32(ringSize(opts, Ring(i)))
		}
	}
	for name, n := range opts.mapEntries {
		if ms, ok := spec.Maps[name]; ok {
			ms.MaxEntries = n
		}
	}

	mapsOnly := spec.Copy()
	mapsOnly.Programs = map[string]*ebpf.ProgramSpec{}
	repl := map[string]*ebpf.Map{}
	for name, m := range p.maps {
		if _, ok := spec.Maps[name]; ok {
			repl[name] = m
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(mapsOnly, ebpf.CollectionOptions{MapReplacements: repl, Cache: cache})
	if err != nil {
		return fmt.Errorf("create %s maps: %w", f.name, err)
	}
	p.colls = append(p.colls, coll)
	for _, name := range sharedMaps {
		if _, have := p.maps[name]; !have && coll.Maps[name] != nil {
			p.maps[name] = coll.Maps[name]
		}
	}
	if m := coll.Maps["reclaim_stats"]; m != nil {
		p.reclaim = m
	}

	for _, h := range f.hooks {
		st := HookStatus{Name: h.name, Family: f.name, Path: PathOff}
		for _, path := range paths {
			prog := h.btfProg
			if path == PathTracepoint {
				prog = h.tracepoint
			}
			if prog == "" {
				continue
			}
			if path == PathTPBTF {
				if err := checkSignature(cache, h.name, h.args); err != nil {
					st.Failures = append(st.Failures, Attempt{Path: path, Err: err.Error()})
					continue
				}
			}
			l, pr, err := attachOne(spec, prog, path, h, coll.Maps, cache)
			if err != nil {
				st.Failures = append(st.Failures, Attempt{Path: path, Err: err.Error()})
				continue
			}
			p.links = append(p.links, l)
			p.progs = append(p.progs, pr)
			st.Path = path
			break
		}
		switch {
		case st.Path == PathOff && !h.optional:
			p.log.Warn("hook not attached", "hook", h.name, "family", f.name, "err", failureText(st.Failures))
		case len(st.Failures) > 0 && st.Path != PathOff:
			p.log.Info("hook attached on fallback path", "hook", h.name, "path", string(st.Path), "err", failureText(st.Failures))
		}
		p.hooks = append(p.hooks, st)
	}
	return nil
}

func failureText(fs []Attempt) string {
	var s string
	for i, f := range fs {
		if i > 0 {
			s += "; "
		}
		s += string(f.Path) + ": " + f.Err
	}
	return s
}

// attachOne loads one program against the family's maps and attaches it.
func attachOne(spec *ebpf.CollectionSpec, prog string, path AttachPath, h hookSpec, maps map[string]*ebpf.Map, cache *btf.Cache) (link.Link, *ebpf.Program, error) {
	ps, ok := spec.Programs[prog]
	if !ok {
		return nil, nil, fmt.Errorf("program %s missing from object", prog)
	}
	one := spec.Copy()
	one.Programs = map[string]*ebpf.ProgramSpec{prog: ps.Copy()}
	repl := map[string]*ebpf.Map{}
	for name := range one.Maps {
		if m, ok := maps[name]; ok {
			repl[name] = m
		}
	}
	if path == PathTracepoint {
		if _, err := host.EnsureTracefs(); err != nil {
			return nil, nil, err
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: repl, Cache: cache})
	if err != nil {
		return nil, nil, fmt.Errorf("load %s: %w", prog, err)
	}
	pr := coll.DetachProgram(prog)
	coll.Close()
	var l link.Link
	switch path {
	case PathTPBTF:
		l, err = link.AttachTracing(link.TracingOptions{Program: pr, AttachType: ebpf.AttachTraceRawTp})
	case PathTracepoint:
		l, err = link.Tracepoint(h.group, h.name, pr, nil)
	default:
		err = fmt.Errorf("unknown attach path %q", path)
	}
	if err != nil {
		pr.Close()
		return nil, nil, fmt.Errorf("attach %s to %s/%s: %w", prog, h.group, h.name, err)
	}
	return l, pr, nil
}

// Hooks reports how every hook of the loaded families is attached.
func (p *Pipeline) Hooks() []HookStatus {
	return slices.Clone(p.hooks)
}

// Events is the consumer queue. It is closed after Close.
func (p *Pipeline) Events() <-chan event.Event { return p.out }

func (p *Pipeline) writeSettings() error {
	m := p.maps["ng_settings"]
	if m == nil {
		return errors.New("write settings: ng_settings map missing")
	}
	if err := m.Update(uint32(0), p.settings, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("write settings: %w", err)
	}
	return nil
}

// SetMinReclaimEpisode changes the shortest reclaim episode sent as an event.
func (p *Pipeline) SetMinReclaimEpisode(d time.Duration) error {
	p.setMu.Lock()
	defer p.setMu.Unlock()
	p.settings.MinEpisodeNS = uint64(max(d, 0))
	return p.writeSettings()
}

// SetMonitorAll switches between the monitored subtree and every cgroup.
func (p *Pipeline) SetMonitorAll(all bool) error {
	p.setMu.Lock()
	defer p.setMu.Unlock()
	p.settings.MonitorAll = 0
	if all {
		p.settings.MonitorAll = 1
	}
	return p.writeSettings()
}

// Close stops the readers, detaches every hook and frees the maps. The
// Events channel is closed once the readers are gone.
func (p *Pipeline) Close() error {
	p.closeOnce.Do(func() {
		if p.cancel != nil {
			p.cancel()
		}
		var errs []error
		for _, r := range p.readers {
			errs = append(errs, r.rd.Close())
		}
		p.wg.Wait()
		close(p.out)
		errs = append(errs, p.closeKernel())
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

func (p *Pipeline) closeKernel() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	p.links = nil
	for _, pr := range p.progs {
		errs = append(errs, pr.Close())
	}
	p.progs = nil
	for _, c := range p.colls {
		c.Close()
	}
	p.colls = nil
	return errors.Join(errs...)
}
