package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/internal/group"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/psi"
)

// base is what every mode of the agent shares: its group and the order
// it stops in, what it does for itself at start, the exporter and its
// registrations, the eviction manager's heartbeat, the watchdog, SIGHUP
// and the lines that say it runs and stopped. Run and RunGuard assemble
// their rooms between start and serve.
//
// One group owns every goroutine the daemon starts, and every resource
// those use is closed by the group's cleanups: shutdown cancels, waits for
// all of them, then closes the resources, newest first. Every goroutine
// runs until shutdown; one that fails or returns before (the metrics
// server among them: see sensing.Serve) ends the agent with its error.
type base struct {
	// name begins the daemon's own log lines ("nodeguard", "nodeguard guard").
	name string
	g    *group.Group
	n    *Notifier
	log  *slog.Logger
	opts Options
	// beats are the heartbeats the watchdog checks, in the order it
	// reports them.
	beats []heartbeat
	// em and wire are the eviction manager and its tripwire on the pod
	// root once they run (nil before, and without eviction): sensing
	// wakes them (senseFlags).
	em   atomic.Pointer[eviction.Manager]
	wire atomic.Pointer[podRootTripwire]
}

// startBase starts the group, STOPPING=1 once it ends, and the
// daemon's own settings (daemonSelf). The caller defers d.shutdown.
func startBase(ctx context.Context, name string, log *slog.Logger, opts Options) (*base, context.Context) {
	g, ctx := group.New(ctx)
	d := &base{name: name, g: g, n: opts.Notifier, log: log, opts: opts}
	daemonSelf(g, d.n, log)
	return d, ctx
}

// shutdown stops the group if serve did not; deferred with the daemon's
// named error. A part that failed is the cause of the end, and of a
// start-up step that then saw its context cancelled.
func (d *base) shutdown(retErr *error) {
	if err := d.g.Shutdown(); err != nil && !errors.Is(*retErr, err) {
		*retErr = errors.Join(err, *retErr)
	}
}

// sensingConfig is the part of a mode's configuration that sensing
// reads: config.Run's and config.Guard's keys of the same names.
type sensingConfig struct {
	metricsAddr string
	profiling   bool
	kernel      config.Kernel
	rootDir     string
}

// senseFlags are the sensing settings every mode shares: the exporter's
// address and profiling, the kernel pipeline, a tick of a second with
// full statistics every pressure.DefaultFullEvery, the pod root kube (of
// driver's hierarchy) read as podCgroups says, its series labelled by
// resolver, kernel events forwarded to fwd, and wake-ups and snapshots
// handed to the eviction manager and its tripwire once they run
// (wakeEviction). The mode adds what only it has.
func (d *base) senseFlags(c sensingConfig, kube string, driver kubepods.Driver, resolver metrics.Resolver, fwd *eventForwarder) *senseFlags {
	f := &senseFlags{version: d.opts.Version, metricsAddr: c.metricsAddr, profiling: c.profiling, roots: []string{kube}, rootDir: c.rootDir,
		noBPF: !c.kernel.BPF, ringSize: c.kernel.RingSizeBytes, queueSize: c.kernel.QueueSize,
		tick: time.Second, fullEvery: pressure.DefaultFullEvery, resolver: resolver, onEvent: fwd.send,
	}
	f.podCgroups(driver)
	f.wakeEviction(&d.em, &d.wire)
	return f
}

// startSensing starts sensing with sf, registers the mode's collectors
// (metrics.RegisterAgent, with the logger's drops and the state store's
// records that every mode serves) and serves it in the group.
func (d *base) startSensing(ctx context.Context, sf *senseFlags, store *statestore.Store, fwd *eventForwarder,
	src metrics.AgentSources) (*sensing, metrics.AgentMetrics, error) {
	d.n.Status("starting sensing")
	s, err := startSensing(ctx, sf, d.log)
	if err != nil {
		return nil, metrics.AgentMetrics{}, fmt.Errorf("start sensing: %w", err)
	}
	d.g.Cleanup(s.Close)
	if d.opts.Logs != nil {
		src.LogDropped = d.opts.Logs.Dropped
	}
	src.State = store.Collector()
	src.EventKinds, src.EventsDropped = forwardedKinds(), fwd.Dropped
	m, err := s.exporter.RegisterAgent(src)
	if err != nil {
		return nil, m, err
	}
	return s, m, nil
}

// serveSensing runs s in the group; its loops are the first heartbeats.
func (d *base) serveSensing(s *sensing) {
	d.g.Go("sensing", s.Serve)
	d.beats = s.heartbeats()
}

// evictionBeat is the eviction manager's heartbeat: its evaluations,
// one per tick at least.
func evictionBeat(em *eviction.Manager, c config.Eviction) heartbeat {
	tick := c.Tick.Duration
	if tick <= 0 {
		tick = eviction.DefaultTick
	}
	return heartbeat{name: "eviction", period: tick, last: counterBeat(em.Evaluations, time.Now)}
}

// serve starts the watchdog and the SIGHUP handler (hupName, onHUP),
// says READY=1 and the daemon's running line (with attrs), and runs until
// ctx ends or a part fails; then it stops the group and says how.
func (d *base) serve(ctx context.Context, status func() string, hupName string, onHUP func(), attrs ...any) error {
	n, beats := d.n, d.beats
	if n.enabled() {
		d.g.Go("watchdog", func(ctx context.Context) error { n.runWatchdog(ctx, beats, status); return nil })
	}
	hup := d.opts.HUP
	d.g.Go(hupName, func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				onHUP()
			}
		}
	})
	n.ready(status())
	d.log.Info(d.name+" running", attrs...)
	<-ctx.Done()
	if err := d.g.Shutdown(); err != nil {
		d.log.Error(d.name+" stops: a part of it failed", "err", err)
		return err
	}
	d.log.Info(d.name + " stopped")
	return nil
}

// podCgroups makes the pods and the cgroups above them hot (read every
// tick), the containers' read when a scrape asks (pressure.Config.Hot,
// Sensor.Scrape), and the pods' own calm: read only while memory is near
// a threshold (eviction.Policy.Calm); far from every one, the eviction
// manager's ticks read them every 5th second with the containers'.
func (f *senseFlags) podCgroups(driver kubepods.Driver) {
	f.hot = func(rel string) bool { return !kubepods.BeneathPod(driver, rel) }
	f.calm = func(rel string) bool { return kubepods.IsPod(driver, rel) }
}

// wakeEviction hands PSI trigger wake-ups to the eviction manager and
// every snapshot to the pod-root tripwire, once they exist.
func (f *senseFlags) wakeEviction(em *atomic.Pointer[eviction.Manager], wire *atomic.Pointer[podRootTripwire]) {
	f.onWake = func(w psi.Wake) {
		if m := em.Load(); m != nil {
			m.Wake("psi:"+w.Trigger.String(), w.Time)
		}
	}
	f.onSnapshot = func(snap *pressure.Snapshot) {
		if w := wire.Load(); w != nil {
			w.rearm(snap)
		}
	}
}
