package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/internal/group"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/loader/event"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

type senseFlags struct {
	version     string // nodeguard's, in nodeguard_build_info
	metricsAddr string
	// profiling serves net/http/pprof beside /metrics.
	profiling bool
	roots     []string
	// hot picks the cgroups read on every tick (pressure.Config.Hot;
	// nil: all).
	hot       func(rel string) bool
	calm      func(rel string) bool // pressure.Config.Calm
	podsRoot  string
	rootDir   string
	imageFS   string
	tick      time.Duration
	fullEvery time.Duration
	noBPF     bool
	// ringSize and queueSize: the loader's (0: its defaults).
	ringSize, queueSize int
	// resolver labels cgroup series with pods (nodeguard run).
	resolver metrics.Resolver
	// storage: per-pod ephemeral storage (nodeguard run).
	storage metrics.StorageSource
	// imageFSStats, when set, replaces imageFS: the image filesystem as
	// the runtime names it (nodeguard run).
	imageFSStats func(ctx context.Context) (nodestats.FSStats, error)
	// onEvent, onWake and onSnapshot, when set, also see every kernel
	// event, PSI trigger wake-up and snapshot (the eviction manager and
	// its tripwire); they must not block.
	onEvent    func(event.Event)
	onWake     func(psi.Wake)
	onSnapshot func(*pressure.Snapshot)
}

// sensing is the running SENSE side: kernel pipeline, snapshots, PSI
// triggers and the exporter.
type sensing struct {
	log      *slog.Logger
	flags    *senseFlags
	layout   *cgroups.Layout
	pipeline *loader.Pipeline
	snapper  *pressure.Snapshotter
	sensor   *pressure.Sensor
	watcher  *psi.Watcher
	exporter *metrics.Exporter
	ln       net.Listener

	// observed is when the snapshot the observer (exporter, tripwire)
	// last took was taken, in Unix nanoseconds: the sensing loop's
	// heartbeat. Not Sensor.Latest: the eviction manager's own
	// snapshots (Fresh) keep that fresh while the loop is dead.
	observed atomic.Int64
	// readerBusySince is when the kernel event consumer began handling
	// the event in hand, in Unix nanoseconds (0: it waits for one);
	// readerDone is set once it has returned.
	readerBusySince atomic.Int64
	readerDone      atomic.Bool
}

func existing(path, fallback string) string {
	if _, err := os.Stat(path); err == nil {
		return path
	}
	return fallback
}

func startSensing(ctx context.Context, f *senseFlags, log *slog.Logger) (_ *sensing, retErr error) {
	// Zero means the default; a negative interval is a mistake, not that.
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--tick", f.tick}, {"--full-stats-every", f.fullEvery}} {
		if d.v < 0 {
			return nil, fmt.Errorf("%s %s: must not be negative (0: the default)", d.flag, d.v)
		}
	}
	s := &sensing{log: log, flags: f}
	defer func() {
		if retErr != nil {
			s.Close()
		}
	}()
	var err error
	if s.layout, err = cgroups.Discover(); err != nil {
		return nil, fmt.Errorf("discover cgroups: %w", err)
	}
	podsRoot := f.podsRoot
	if podsRoot == "" && len(f.roots) > 0 {
		podsRoot = f.roots[0]
	}
	if !f.noBPF {
		s.pipeline, err = loader.Open(loader.Options{Logger: log, RingSize: f.ringSize, QueueSize: f.queueSize})
		if err != nil {
			// Degrade, with one clear line: snapshots, PSI triggers and
			// tripwires still drive everything, only slower to see OOM
			// kills and reclaim.
			log.Warn("no eBPF pipeline: sensing from PSI and cgroup statistics only", "err", err)
			s.pipeline = nil
		}
	}
	if s.pipeline != nil {
		for _, root := range f.roots {
			dirs, err := s.layout.ResolveMonitored(root)
			if err != nil {
				return nil, fmt.Errorf("--cgroup-root %q: %w", root, err)
			}
			for _, d := range dirs {
				if _, err := s.pipeline.MonitorTree(d.Hierarchy.ID, d.Path, d.Rel); err != nil {
					return nil, fmt.Errorf("--cgroup-root %q: %w", root, err)
				}
			}
		}
	}
	// With the kernel's cgroup_mkdir and cgroup_rmdir events feeding the
	// snapshotter (handleEvent), its walk of the cgroup trees only catches
	// what a lost event missed: once a minute, not every 10 s (at 250
	// pods a walk visits ~750 cgroups).
	rescanEvery := time.Duration(0) // the snapshotter's default
	if s.pipeline != nil {
		rescanEvery = time.Minute
	}
	imageFS := existing(f.imageFS, "")
	s.snapper, err = pressure.New(pressure.Config{
		Layout:      s.layout,
		Roots:       f.roots,
		Hot:         f.hot,
		Calm:        f.calm,
		PodsRoot:    podsRoot,
		NodeFSPath:  existing(f.rootDir, "/"),
		ImageFSPath: imageFS,
		ImageFS:     f.imageFSStats,
		RescanEvery: rescanEvery,
		Logger:      log,
	})
	if err != nil {
		return nil, err
	}
	s.sensor = pressure.NewSensor(s.snapper, f.tick, nil)
	// Full statistics are read at a scrape, not on a tick of their own.
	s.sensor.EnableFull(cgstat.NewStater(s.layout), f.fullEvery)
	opts := metrics.Options{Snapshots: s.sensor, Full: s.sensor, Resolver: f.resolver, Storage: f.storage, Version: f.version}
	if s.pipeline != nil {
		opts.Kernel = s.pipeline
	}
	s.exporter = metrics.New(opts).WithRuntimeCollectors()
	s.sensor.OnSnapshot = func(snap *pressure.Snapshot) {
		s.observed.Store(snap.Time.UnixNano())
		s.exporter.ObserveSnapshot(snap)
		if f.onSnapshot != nil {
			f.onSnapshot(snap)
		}
	}

	// A node-wide memory trigger wakes the sensor between ticks: 100 ms of
	// some-stall in a 1 s window (the kernel may only allow 2 s windows
	// here; the watcher falls back and says so once).
	s.watcher, err = psi.NewWatcher(log, []psi.Trigger{{
		Path: filepath.Join(psi.SystemDir, "memory"), Kind: psi.KindSome,
		Stall: 100 * time.Millisecond, Window: time.Second,
	}})
	if err != nil {
		log.Warn("no PSI trigger: the safety tick alone drives snapshots", "err", err)
		s.watcher = nil
	}
	if f.metricsAddr != "" {
		if s.ln, err = net.Listen("tcp", f.metricsAddr); err != nil {
			return nil, fmt.Errorf("--metrics-addr %s: %w", f.metricsAddr, err)
		}
	}
	return s, nil
}

// Serve runs the snapshot loop, PSI triggers, the kernel
// event consumer and the metrics server until ctx is done or one of them
// fails, and returns only once all of them have returned: Close may follow
// at once. A failure of any ends the others, and Serve returns it.
func (s *sensing) Serve(ctx context.Context) error {
	g, ctx := group.New(ctx)
	g.Go("snapshot loop", func(ctx context.Context) error { s.sensor.Run(ctx); return nil })
	if s.watcher != nil {
		wakes := make(chan psi.Wake, 16)
		g.Go("psi triggers", func(ctx context.Context) error { return s.watcher.Run(ctx, wakes) })
		g.Go("psi wake-ups", func(ctx context.Context) error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case w := <-wakes:
					s.exporter.ObserveWakeup(w.Trigger.String())
					if s.flags.onWake != nil {
						s.flags.onWake(w)
					}
					s.sensor.Wake()
				}
			}
		})
	}
	if s.pipeline != nil {
		g.Go("kernel events", s.consumeEvents)
	}
	if s.ln != nil {
		g.Go("metrics server", s.serveHTTP)
	}
	<-ctx.Done()
	return g.Shutdown()
}

// serveHTTP serves /metrics, /healthz and, when asked, pprof until ctx
// ends; a listener that fails before is an error.
func (s *sensing) serveHTTP(ctx context.Context) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.exporter.Registry(), promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		// The loop's own snapshots, as the watchdog counts them: the
		// eviction manager's keep Sensor.Latest fresh without it.
		at := s.lastObserved()
		if at.IsZero() || time.Since(at) > 10*s.flags.tick {
			http.Error(w, "no fresh snapshot", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if s.flags.profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.log.Info("serving metrics", "addr", s.ln.Addr().String(), "profiling", s.flags.profiling, "cgroup_roots", s.flags.roots, "cgroups", s.snapper.Len())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(s.ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve metrics on %s: %w", s.ln.Addr(), err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	<-served // http.ErrServerClosed
	return nil
}

// consumeEvents counts kernel events and keeps the snapshotter's cgroup
// set current without waiting for a rescan, until ctx ends. The stream
// ending before is an error: the pipeline's readers are gone.
func (s *sensing) consumeEvents(ctx context.Context) error {
	defer s.readerDone.Store(true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-s.pipeline.Events():
			if !ok {
				return errors.New("the kernel event stream ended")
			}
			s.readerBusySince.Store(time.Now().UnixNano())
			s.handleEvent(ev)
			s.readerBusySince.Store(0)
		}
	}
}

func (s *sensing) handleEvent(ev event.Event) {
	s.exporter.ObserveEvent(ev)
	if s.flags.onEvent != nil {
		s.flags.onEvent(ev)
	}
	switch e := ev.(type) {
	case *event.Cgroup:
		if e.HierarchyID != s.layout.Memory.ID {
			return
		}
		if e.Kind == event.KindCgroupMkdir {
			s.sensor.Add(e.Path)
		} else {
			s.sensor.Remove(e.Path)
		}
	case *event.OOMKill:
		s.sensor.Wake()
	}
}

// Close frees what startSensing made; after Serve has returned.
func (s *sensing) Close() {
	if s.ln != nil {
		s.ln.Close()
	}
	if s.watcher != nil {
		s.watcher.Close()
	}
	if s.pipeline != nil {
		s.pipeline.Close()
	}
	if s.snapper != nil {
		s.snapper.Close()
	}
}

// SenseOptions is nodeguard metrics: sensing and the exporter alone, no
// pods and no eviction.
type SenseOptions struct {
	// MetricsAddr is where /metrics is served ("": not served).
	MetricsAddr string
	// Profiling serves net/http/pprof beside /metrics.
	Profiling bool
	// Roots are the cgroup subtrees monitored (relative: beneath
	// nodeguard's own cgroup).
	Roots []string
	// PodsRoot is the pod cgroup root of allocatableMemory.available
	// (default: the first of Roots).
	PodsRoot string
	// RootDir is on nodefs; ImageFS a path on the runtime's imagefs
	// (skipped when missing).
	RootDir, ImageFS string
	// Tick is the snapshot interval; FullEvery how long a scrape's full
	// statistics are reused (0: the defaults; negative: an error).
	Tick, FullEvery time.Duration
	// NoBPF senses without the eBPF pipeline.
	NoBPF bool
	// Version is nodeguard's, in nodeguard_build_info.
	Version string
}

// Sense runs sensing and the exporter until ctx ends or a part of them
// fails (nodeguard metrics).
func Sense(ctx context.Context, o SenseOptions, log *slog.Logger) error {
	s, err := startSensing(ctx, &senseFlags{version: o.Version, metricsAddr: o.MetricsAddr, profiling: o.Profiling,
		roots: o.Roots, podsRoot: o.PodsRoot, rootDir: o.RootDir, imageFS: o.ImageFS, tick: o.Tick,
		fullEvery: o.FullEvery, noBPF: o.NoBPF}, log)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Serve(ctx)
}

// Sensor is sensing opened without its loops (nodeguard top): snapshots
// taken on demand, and the kernel pipeline's aggregates.
type Sensor struct{ s *sensing }

// OpenSensor opens sensing as Sense would, and serves nothing.
func OpenSensor(ctx context.Context, o SenseOptions, log *slog.Logger) (*Sensor, error) {
	o.MetricsAddr = ""
	s, err := startSensing(ctx, &senseFlags{version: o.Version, roots: o.Roots, podsRoot: o.PodsRoot, rootDir: o.RootDir,
		imageFS: o.ImageFS, tick: o.Tick, fullEvery: o.FullEvery, noBPF: o.NoBPF}, log)
	if err != nil {
		return nil, err
	}
	return &Sensor{s: s}, nil
}

// Snapshot takes a snapshot now.
func (s *Sensor) Snapshot(ctx context.Context, now time.Time) *pressure.Snapshot {
	return s.s.snapper.Snapshot(ctx, now)
}

// Pipeline is the kernel pipeline; nil without eBPF.
func (s *Sensor) Pipeline() *loader.Pipeline { return s.s.pipeline }

// Close frees the sensor.
func (s *Sensor) Close() { s.s.Close() }
