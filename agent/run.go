package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/eviction/admission"
	"github.com/nodeguard/nodeguard/internal/group"
	"github.com/nodeguard/nodeguard/internal/host"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/kubenode"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/credentials"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/filesource"
	"github.com/nodeguard/nodeguard/lifecycle/imagegc"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/mounts"
	"github.com/nodeguard/nodeguard/netplumb"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

// probeNetNS is where probes dial pod IPs from when nodeguard does not
// manage the pod network: the configured nodeNetNS, else nodeguard's own
// namespace, from which the node routes its pods, as the kubelet probes.
func probeNetNS(n config.Network) string {
	if n.NodeNetNS != "" {
		return n.NodeNetNS
	}
	return "/proc/self/ns/net"
}

// Run runs nodeguard run's agent, standalone or in node mode, until ctx
// ends or a part of it fails.
//
// One group owns every goroutine it starts, and every resource those use
// is closed by the group's cleanups: shutdown cancels, waits for all of
// them, then closes the resources, newest first. Every goroutine runs
// until shutdown; one that fails or returns before (the metrics server
// among them: see sensing.Serve) ends the agent with its error, and
// systemd restarts it (the pods stay), rather than leave it running with
// a part dead.
func Run(ctx context.Context, cfg config.Run, log *slog.Logger, opts Options) (retErr error) {
	d, ctx := startBase(ctx, "nodeguard", log, opts)
	defer d.shutdown(&retErr)
	g, n := d.g, d.n
	layout, err := cgroups.Discover()
	if err != nil {
		return fmt.Errorf("discover cgroups: %w", err)
	}
	// (Not with the private runtime, Options.CheckNetwork: it was started in this
	// cgroup already, so nodeguard cannot be its only process; with it,
	// nodeguard needs a cgroup whose children may have controllers, such
	// as the root cgroup of the VM lane's guests.)
	if !path.IsAbs(cfg.CgroupRoot) && layout.Mode == cgroups.ModeV2 {
		if err := refuseRelativeRootInService(layout.Unified, cfg.CgroupRoot); err != nil {
			return err
		}
	}
	if !path.IsAbs(cfg.CgroupRoot) && layout.Mode == cgroups.ModeV2 && !opts.CheckNetwork {
		// A relative root hangs from nodeguard's own cgroup, which on
		// cgroup v2 must hold no process before controllers can be
		// enabled below it: under systemd (Delegate=yes) it holds
		// nodeguard itself.
		moved, err := cgroups.MoveSelfIntoLeaf(layout.Unified, cgroups.AgentLeaf)
		if err != nil {
			return err
		}
		if moved {
			log.Info("moved into a leaf of its own cgroup, so that pod cgroups can have controllers below it",
				"cgroup", path.Join(layout.Unified.Own, cgroups.AgentLeaf))
		}
	}
	var dialOpts []cri.Option
	if cfg.ImagePull {
		dialOpts = append(dialOpts, cri.WithImagePull())
	}
	n.Status("connecting to the runtime at %s", cfg.RuntimeEndpoint)
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	client, err := cri.Dial(dctx, cfg.RuntimeEndpoint, 10*time.Second, dialOpts...)
	dcancel()
	if err != nil {
		return err
	}
	g.Cleanup(func() { client.Close() })
	info := client.Runtime()
	log.Info("runtime connected", "endpoint", cfg.RuntimeEndpoint, "runtime", info, "pid", client.RuntimePID())
	driver, err := cgroupDriver(ctx, cfg, client, log)
	if err != nil {
		return err
	}
	n.Status("preparing pod cgroups (%s driver)", driver)
	cgm, err := kubepods.New(ctx, layout, driver, cfg.CgroupRoot, kubepods.Options{Log: log})
	if err != nil {
		return err
	}
	g.Cleanup(func() { cgm.Close() })
	if err := checkPlacement(ctx, client, cgm, log); err != nil {
		return err
	}

	mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath)
	if err != nil {
		return err
	}
	hasRes, _ := host.HasCapability(host.CapSysResource)
	minAdj := -1000
	if !hasRes {
		// Without CAP_SYS_RESOURCE a task may not go below the minimum it
		// already has; containerd's restrict_oom_score_adj uses its own.
		minAdj = OwnOOMScoreAdj()
	}
	if err := os.MkdirAll(cfg.RootDir, 0o750); err != nil {
		return fmt.Errorf("root dir: %w", err)
	}
	store, err := openStateStore(cfg.RootDir, log)
	if err != nil {
		return err
	}
	g.Cleanup(store.Close)
	capacity := corev1.ResourceList{
		corev1.ResourceMemory: *resource.NewQuantity(int64(mi.MemTotal), resource.BinarySI),
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(runtime.NumCPU())*1000, resource.DecimalSI),
	}
	rc, err := cgm.EnforceAllocatable(ctx, capacity, cfg.SystemReserved, cfg.KubeReserved)
	if err != nil {
		return err
	}
	if rc.Memory != nil {
		attrs := []any{"memory_bytes", *rc.Memory}
		if rc.CPUShares != nil {
			attrs = append(attrs, "cpu_shares", *rc.CPUShares)
		}
		if rc.CPUWeight != nil {
			attrs = append(attrs, "cpu_weight", *rc.CPUWeight)
		}
		log.Info("node allocatable enforced on kubepods", attrs...)
	}
	var network *lifecycle.Network
	if cfg.Network.Manage || opts.CheckNetwork {
		nc, err := cfg.Network.Netplumb(cfg.RootDir)
		if err != nil {
			return err
		}
		if cfg.Network.Manage {
			path, err := netplumb.Install(ctx, nc)
			var shadowed *netplumb.ShadowedError
			switch {
			case errors.As(err, &shadowed):
				// Written, but the runtime takes the first file: say so
				// loudly, and keep going (the operator's file may be on
				// purpose).
				log.Warn("pod network: another CNI config sorts first; the runtime will use it", "ours", path, "err", err)
			case err != nil:
				return err
			}
			log.Info("pod network configured", "conflist", path, "subnet", nc.Subnet, "bridge", nc.Bridge)
		}
		network = &lifecycle.Network{Config: nc, NodeNetNS: cfg.Network.NodeNetNS, NetNSDirs: cfg.Network.NetNSDirs,
			// Sandboxes other clients of the runtime are creating: their
			// leases and netns are not listed yet.
			GCMinAge: time.Minute}
	}
	// Node mode: the API server is a pod source, the source of the
	// ConfigMaps, Secrets and tokens its pods use, and is told of what
	// happens to them.
	var (
		kubeCS    kubernetes.Interface
		kubeRec   record.EventRecorder
		objects   *kubenode.Objects
		podSource atomic.Pointer[kubenode.PodSource]
		onRemoved func(*corev1.Pod)
	)
	if cfg.Kubeconfig != "" {
		name, err := nodeName(cfg)
		if err != nil {
			return err
		}
		cs, b, rec, err := kubeClient(cfg.Kubeconfig, name, opts.Version)
		if err != nil {
			return err
		}
		g.Cleanup(b.Shutdown)
		kubeCS, kubeRec = cs, rec
		objects = kubenode.NewObjects(cs, log.With("component", "objects"))
		g.Go("API server objects", objects.Run)
		onRemoved = func(p *corev1.Pod) {
			if s := podSource.Load(); s != nil {
				s.Removed(p)
			}
		}
	}
	var volObjects mounts.Objects
	if objects != nil {
		volObjects = objects
	}
	// The Kubernetes libraries log through klog (k8s.io/mount-utils: the
	// format and mount of local volumes; client-go; apimachinery's
	// streaming proxy): into the daemon's log with the rest.
	klog.SetSlogLogger(log.With("component", "k8s"))
	vols, err := mounts.New(mounts.Config{
		RootDir: cfg.RootDir, HostPathAllow: cfg.Volumes.HostPathAllow, SourceDir: cfg.Volumes.SourceDir,
		NodeMemory: int64(mi.MemTotal), Logger: log, Objects: volObjects,
		// NFS clients dial from the pod network's namespace, as probes do.
		NodeNetNS: cfg.Network.NodeNetNS,
	})
	if err != nil {
		return err
	}
	policy, err := cfg.Eviction.Policy()
	if err != nil {
		return err
	}
	appArmor, err := lifecycle.AppArmorEnabled(lifecycle.AppArmorEnabledPath)
	if err != nil {
		return err
	}
	// What the runtime says it implements decides the pod fields that
	// need it, as the kubelet's node status.features does.
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	features, err := client.Features(fctx)
	fcancel()
	if err != nil {
		return err
	}
	// No CRI feature says whether the runtime mounts image volumes:
	// its version does (cri.ImageVolumesOf).
	imageVolumes := cri.ImageVolumesOf(client.Runtime())
	log.Info("runtime features", "supplementalGroupsPolicy", features.GetSupplementalGroupsPolicy(),
		"imageVolumes", imageVolumes.Mount, "imageVolumeSubPath", imageVolumes.SubPath)
	node, err := nodeInfo(cfg.RootDir, int64(mi.MemTotal))
	if err != nil {
		return err
	}
	if cfg.NodeName != "" {
		node.Name = cfg.NodeName
	}
	if ips, _ := config.ParseNodeIPs(cfg.NodeIP); len(ips) > 0 {
		node.HostIPs = ips
	}
	if f := cfg.ImageCredentialsFile; f != "" {
		// Read at each pull; a file that is wrong from the start is an
		// error now rather than a warning at every pull.
		if _, err := credentials.ReadFile(f); err != nil {
			return fmt.Errorf("imageCredentialsFile: %w", err)
		}
	}
	nodeLabels, err := cfg.Labels()
	if err != nil {
		return err
	}
	adm := &admitter{}
	relay := &decisionRelay{}
	// The agent's event log: pod events (probes, lifecycle hooks) from the
	// lifecycle manager, eviction decisions and OOM kills from the eviction
	// manager.
	events := api.NewEventLog(4096)
	var podEvents lifecycle.EventRecorder = events
	if kubeRec != nil {
		podEvents = &kubeEvents{local: events, recorder: kubeRec}
	}
	mgr, err := lifecycle.New(lifecycle.Config{
		Volumes: vols, Network: network, ProbeNetNS: probeNetNS(cfg.Network), Admit: adm.admit, Node: node, Events: podEvents, OnRemoved: onRemoved,
		ImageCredentialsFile: cfg.ImageCredentialsFile, ClusterDomain: cfg.ClusterDomain, NodeLabels: nodeLabels,
		LocalStorage: lifecycle.LocalStorageConfig{Disabled: cfg.Eviction.Disabled, DryRun: cfg.Eviction.DryRun,
			Exempt: cfg.Eviction.Exempt, Observer: relay},
		Runtime: client, Cgroups: cgm, RootDir: cfg.RootDir, State: store, MemoryCapacity: int64(mi.MemTotal),
		DNS: lifecycle.NodeDNS(lifecycle.ResolvConf), PodOptions: podspec.Options{PriorityClasses: cfg.PriorityClasses, AllowPrivileged: cfg.AllowPrivileged, ImagePull: cfg.ImagePull,
			AllowedUnsafeSysctls: cfg.AllowedUnsafeSysctls, AppArmorEnabled: appArmor,
			SupplementalGroupsPolicy: features.GetSupplementalGroupsPolicy(),
			ImageVolumes:             imageVolumes.Mount, ImageVolumeSubPath: imageVolumes.SubPath, Runtime: imageVolumes.Runtime,
			ServiceAccountTokens: kubeCS != nil, ClusterPriorityClasses: kubeCS != nil, ReadinessGates: kubeCS != nil},
		CgroupV2: layout.Memory.V2(), Logger: log, HasCapSysResource: hasRes, MinOOMScoreAdj: minAdj,
		BackoffInitial: cfg.BackoffInitial.Duration, BackoffMax: cfg.BackoffMax.Duration, ContainerLogs: cfg.ContainerLogPolicy(),
	})
	if err != nil {
		return err
	}
	disk, err := newDiskGC(ctx, client, &imagegc.ImageFS{Runtime: client}, mgr, cfg, cfg.RootDir, log)
	if err != nil {
		return err
	}
	var nodeRes func() (corev1.ResourceList, corev1.ResourceList)
	// Nothing is torn down as an orphan until every source has loaded
	// once (the kubelet's sources ready): the persisted API pods (New),
	// the manifest directory (read once; a file that does not load is
	// unavailable, its pods' sandboxes kept), the API server's pods.
	var sourcesLoaded []<-chan struct{}
	if cfg.PodManifestPath != "" {
		files := filesource.New(filesource.Config{Dir: cfg.PodManifestPath, Pods: mgr, Log: log})
		if err := files.Sync(ctx); err != nil {
			log.Warn("manifest directory", "dir", cfg.PodManifestPath, "err", err)
		}
		g.Go("manifest directory", files.Run)
		sourcesLoaded = append(sourcesLoaded, files.Loaded())
	}
	if kubeCS != nil {
		nodeCap, nodeAlloc := nodeResources(capacity, node, cfg.Network.MaxPods, cfg, policy.Thresholds)
		adm.fit = func(p *corev1.Pod) error { return admission.Fit(p, mgr.List(), nodeAlloc) }
		ps := kubenode.NewPodSource(kubenode.PodsConfig{Client: kubeCS, NodeName: node.Name, HostIPs: node.HostIPs, Pods: mgr,
			Reject: rejectReason, Recorder: kubeRec, Log: log.With("component", "pod-source")})
		podSource.Store(ps)
		g.Go("API server pods", ps.Run)
		nodeRes = func() (corev1.ResourceList, corev1.ResourceList) { return nodeCap, nodeAlloc }
		// Sandboxes of the API server's pods are not orphans: nothing is
		// removed until its pods are listed.
		sourcesLoaded = append(sourcesLoaded, ps.Synced())
	}
	g.Go("sources ready", func(ctx context.Context) error {
		for _, loaded := range sourcesLoaded {
			select {
			case <-loaded:
			case <-ctx.Done():
				return nil
			}
		}
		mgr.SourcesReady()
		<-ctx.Done() // a part of the group runs until the end
		return nil
	})
	g.Go("pod lifecycle", func(ctx context.Context) error { mgr.Run(ctx); return nil })

	// Sensing always runs (the eviction manager confirms every wake-up on
	// a fresh snapshot); /metrics only with an address.
	kube, err := cgm.Kubepods()
	if err != nil {
		return err
	}
	storage := &storageSampler{mgr: mgr, every: 10 * time.Second, log: log}
	g.Go("storage sampler", func(ctx context.Context) error { storage.Run(ctx); return nil })
	fwd := newEventForwarder(1024, layout.Memory.ID)
	var evictMgr atomic.Pointer[eviction.Manager]
	// Set once the eviction manager exists, after sensing has started:
	// read by the sensor's observer goroutine.
	var wire atomic.Pointer[podRootTripwire]
	sf := &senseFlags{version: opts.Version, metricsAddr: cfg.MetricsAddr, profiling: cfg.EnableProfiling, roots: []string{kube}, rootDir: cfg.RootDir,
		noBPF: !cfg.Kernel.BPF, ringSize: cfg.Kernel.RingSizeBytes, queueSize: cfg.Kernel.QueueSize,
		tick: time.Second, fullEvery: pressure.DefaultFullEvery, resolver: newPodResolver(mgr, cgm, layout), storage: storage,
		onEvent: fwd.send, imageFSStats: disk.imageFS.FSStats,
	}
	sf.podCgroups(driver)
	sf.wakeEviction(&evictMgr, &wire)
	s, am, err := d.startSensing(ctx, sf, store, fwd, metrics.AgentSources{Eviction: !cfg.Eviction.Disabled, GC: true,
		Probes: func() []metrics.ProbeSeries {
			counts := mgr.ProbeCounts()
			out := make([]metrics.ProbeSeries, len(counts))
			for i, c := range counts {
				out[i] = metrics.ProbeSeries{ProbeType: c.ProbeType, Result: c.Result, Container: c.Container, Pod: c.Pod, Namespace: c.Namespace, Value: c.Value}
			}
			return out
		}})
	if err != nil {
		return err
	}
	disk.metrics.Store(am.GC)
	g.Go("image garbage collection", func(ctx context.Context) error { disk.images.Run(ctx); return nil })
	d.serveSensing(s)

	// Before anything raises: the oom_score_adj an agent that died left
	// raised, put back with or without eviction.
	evictionActor := mgr.EvictionActor(cfg.Eviction.Exempt)
	if rep, err := evictionActor.RepairOOMScoreAdj(store); err != nil {
		log.Warn("put back the oom_score_adj a previous agent raised", "repaired", rep, "err", err)
	} else if rep.Pods > 0 || len(rep.Lost) > 0 {
		log.Info("the oom_score_adj a previous agent raised put back", "pods", rep.Pods, "restored", rep.Restored,
			"forked", rep.Forked, "lost", len(rep.Lost))
	}
	var obs *evictionObserver
	if !cfg.Eviction.Disabled {
		var em *eviction.Manager
		em, obs, err = startEviction(g, evictionWiring{cfg: cfg.Eviction, policy: policy, actor: evictionActor,
			reclaim: disk.reclaim, sensing: s, metrics: am.Eviction, events: events, fwd: fwd, layout: layout, kube: kube, rootDir: cfg.RootDir, store: store,
			wire: &wire, beats: &d.beats, log: log})
		if err != nil {
			return err
		}
		if lost := relay.bind(obs); lost > 0 {
			log.Warn("local-storage evictions made before the metrics existed are not counted", "lost", lost)
		}
		adm.policy.Store(em.Policy())
		evictMgr.Store(em)
	}

	srv := api.NewServer(mgr.APIService(events), log, api.Options{})
	if kubeCS != nil {
		nodeCap, nodeAlloc := nodeRes()
		nm := nodeMode{version: opts.Version, cfg: cfg, node: node, capacity: nodeCap, allocatable: nodeAlloc, runtime: client,
			heartbeat: mgr.Heartbeat, endpoint: srv, log: log}
		if em := evictMgr.Load(); em != nil {
			nm.conditions = em.Policy().Conditions
		}
		agent, err := startNodeMode(g, kubeCS, nm)
		if err != nil {
			return err
		}
		if obs != nil {
			// A condition that changes is posted at once, not at the next
			// 10 s update: MemoryPressure taints the node for the
			// scheduler only once the API has it.
			kick := agent.Kick
			obs.onConditions.Store(&kick)
		}
		log.Info("node mode: joining the cluster", "kubeconfig", cfg.Kubeconfig, "node", node.Name)
	}

	if err := os.MkdirAll(filepath.Dir(cfg.APISocket), 0o755); err != nil {
		return fmt.Errorf("api socket dir: %w", err)
	}
	// Listening, the socket takes connections into its backlog: READY=1
	// may follow before Serve, and a client that connects at once is
	// answered.
	if err := srv.Listen(ctx, cfg.APISocket); err != nil {
		return err
	}
	status := func() string { return fmt.Sprintf("running: %d pods", len(mgr.List())) }
	d.beats = append(d.beats, heartbeat{name: "pod lifecycle", period: lifecycle.DefaultResync, last: mgr.Heartbeat})
	em := evictMgr.Load()
	if em != nil {
		d.beats = append(d.beats, evictionBeat(em, cfg.Eviction))
	}
	rl := &reloader{cur: cfg, load: opts.Reload, path: opts.ConfigPath, logs: opts.Logs, em: em, wire: wire.Load(), n: n, log: log, status: status}
	g.Go("api server", srv.Serve)
	return d.serve(ctx, status, "reloader", rl.onHUP, "api_socket", cfg.APISocket, "cgroup_root", cfg.CgroupRoot, "manifests", cfg.PodManifestPath,
		"systemd_notify", n.enabled(), "watchdog", n.watchdog)
}

// evictionWiring is what the eviction manager is started with, in
// nodeguard run and nodeguard guard alike: the same policy, snapshots,
// tripwire and events, acting through the mode's actor.
type evictionWiring struct {
	cfg     config.Eviction
	policy  eviction.PolicyConfig
	actor   eviction.Actor
	reclaim eviction.NodeReclaimer // nil: no node-level reclaim (guard mode: the kubelet's images)
	sensing *sensing
	// metrics are the eviction series (metrics.AgentSources.Eviction).
	metrics *metrics.Eviction
	events  *api.EventLog
	fwd     *eventForwarder
	layout  *cgroups.Layout
	// kube is the pod root (kubepods) the tripwire arms on.
	kube    string
	rootDir string
	// store is the agent's state store: the tripwire's records.
	store *statestore.Store
	// wire and beats receive the tripwire and the heartbeats it adds.
	wire  *atomic.Pointer[podRootTripwire]
	beats *[]heartbeat
	log   *slog.Logger
}

// startEviction starts the eviction manager in g: its loop, its kernel
// events and the tripwire on the pod root. The manager's observer counts
// decisions in the metrics and the event log.
func startEviction(g *group.Group, w evictionWiring) (*eviction.Manager, *evictionObserver, error) {
	log, s := w.log, w.sensing
	obs := &evictionObserver{m: w.metrics, events: w.events, log: log}
	em, err := eviction.NewManager(eviction.ManagerConfig{
		Policy: w.policy, Actor: w.actor,
		Snapshot:     func(ctx context.Context) (*pressure.Snapshot, error) { return s.sensor.Fresh(ctx), nil },
		SnapshotCalm: func(ctx context.Context) (*pressure.Snapshot, error) { return s.sensor.FreshCalm(ctx), nil },
		Watch:        s.sensor.Add,
		Reclaim:      w.reclaim,
		Tick:         w.cfg.Tick.Duration, DryRun: w.cfg.DryRun, Logger: log, Observer: obs,
	})
	if err != nil {
		return nil, nil, err
	}
	if d, err := w.layout.Memory.Resolve(w.kube); err == nil {
		var capacity uint64
		if mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath); err != nil {
			log.Warn("tripwire: no node capacity: an unreadable tripwire record leaves memory.high as found", "err", err)
		} else {
			capacity = mi.MemTotal
		}
		// <rootDir>/tripwire held the tripwire's state before the store.
		if tw, err := newPodRootTripwire(d, w.policy.Thresholds, w.store, filepath.Join(w.rootDir, "tripwire"), capacity, log); err != nil {
			log.Warn("no tripwire on the pod root: the safety tick and PSI triggers drive evictions", "err", err)
		} else {
			g.Cleanup(func() {
				if err := tw.tw.Close(); err != nil {
					log.Error("tripwire: close (memory.high of the pod root may not be restored; the next start repairs it)", "err", err)
				}
			})
			w.wire.Store(tw)
			*w.beats = append(*w.beats, tw.heartbeat())
			g.Go("tripwire", func(ctx context.Context) error { return tw.run(ctx, em) })
		}
	}
	g.Go("eviction events", func(ctx context.Context) error { em.Events(ctx, w.fwd.ch); return nil })
	g.Go("eviction manager", em.Run)
	log.Info("eviction manager running", "thresholds", len(w.policy.Thresholds), "psi_rules", len(w.policy.PSIRules), "dry_run", w.cfg.DryRun)
	return em, obs, nil
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
