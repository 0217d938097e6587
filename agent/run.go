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
//
// The steps run in this order, each with what the ones before made
// (runAgent). The order matters beyond that: the group's cleanups are
// added in it (the runtime's client, the pod cgroups, the state store,
// the API server's event broadcaster, sensing, the tripwire) and run in
// the reverse at shutdown.
func Run(ctx context.Context, cfg config.Run, log *slog.Logger, opts Options) (retErr error) {
	d, ctx := startBase(ctx, "nodeguard", log, opts)
	defer d.shutdown(&retErr)
	r := &runAgent{base: d, cfg: cfg}
	for _, step := range []func(context.Context) error{
		r.placeSelf,
		r.openRuntime,
		r.preparePodCgroups,
		r.openState,
		r.enforceAllocatable,
		r.configureNetwork,
		r.connectCluster,
		r.startPods,
		r.startSources,
		r.startSensing,
		r.startEviction,
		r.startNodeMode,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return r.serveAPI(ctx)
}

// runAgent is nodeguard run's agent as Run assembles it: what each step
// makes for the steps after it.
type runAgent struct {
	*base
	cfg config.Run

	layout *cgroups.Layout
	client *cri.Client
	driver kubepods.Driver
	cgm    *kubepods.Cgroups
	// memTotal is the node's memory (MemTotal), its memory capacity.
	memTotal uint64
	// hasRes is whether the agent has CAP_SYS_RESOURCE; minAdj the
	// lowest oom_score_adj it may then set.
	hasRes bool
	minAdj int
	store  *statestore.Store
	// capacity is the node's cpu and memory.
	capacity corev1.ResourceList
	network  *lifecycle.Network // nil: nodeguard neither writes nor checks the pod network

	// Node mode (cfg.Kubeconfig): the API server is a pod source, the
	// source of the ConfigMaps, Secrets and tokens its pods use, and is
	// told of what happens to them. kubeCS is nil when standalone.
	kubeCS    kubernetes.Interface
	kubeRec   record.EventRecorder
	objects   *kubenode.Objects
	podSource atomic.Pointer[kubenode.PodSource]
	onRemoved func(*corev1.Pod)

	policy eviction.PolicyConfig
	node   cri.NodeInfo
	adm    *admitter
	relay  *decisionRelay
	// events is the agent's event log: pod events (probes, lifecycle
	// hooks) from the lifecycle manager, eviction decisions and OOM
	// kills from the eviction manager.
	events *api.EventLog
	mgr    *lifecycle.Manager
	disk   *diskGC
	// nodeCap and nodeAlloc are the Node's capacity and allocatable
	// (node mode).
	nodeCap, nodeAlloc corev1.ResourceList

	kube     string // the pod root, kubepods's name
	fwd      *eventForwarder
	sensing  *sensing
	am       metrics.AgentMetrics
	evictObs *evictionObserver // nil: eviction disabled
	srv      *api.Server
}

// placeSelf finds the cgroup hierarchies and, for a relative cgroupRoot,
// moves the agent into a leaf of its own cgroup.
func (r *runAgent) placeSelf(context.Context) error {
	cfg, log := r.cfg, r.log
	layout, err := cgroups.Discover()
	if err != nil {
		return fmt.Errorf("discover cgroups: %w", err)
	}
	r.layout = layout
	// (Not with the private runtime, Options.CheckNetwork: it was started in this
	// cgroup already, so nodeguard cannot be its only process; with it,
	// nodeguard needs a cgroup whose children may have controllers, such
	// as the root cgroup of the VM lane's guests.)
	if !path.IsAbs(cfg.CgroupRoot) && layout.Mode == cgroups.ModeV2 {
		if err := refuseRelativeRootInService(layout.Unified, cfg.CgroupRoot); err != nil {
			return err
		}
	}
	if !path.IsAbs(cfg.CgroupRoot) && layout.Mode == cgroups.ModeV2 && !r.opts.CheckNetwork {
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
	return nil
}

// openRuntime dials the container runtime.
func (r *runAgent) openRuntime(ctx context.Context) error {
	cfg := r.cfg
	var dialOpts []cri.Option
	if cfg.ImagePull {
		dialOpts = append(dialOpts, cri.WithImagePull())
	}
	r.n.Status("connecting to the runtime at %s", cfg.RuntimeEndpoint)
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	client, err := cri.Dial(dctx, cfg.RuntimeEndpoint, 10*time.Second, dialOpts...)
	dcancel()
	if err != nil {
		return err
	}
	r.client = client
	r.g.Cleanup(func() { client.Close() })
	r.log.Info("runtime connected", "endpoint", cfg.RuntimeEndpoint, "runtime", client.Runtime(), "pid", client.RuntimePID())
	return nil
}

// preparePodCgroups makes the pod cgroups (kubepods) with the runtime's
// driver, and checks that the runtime places its sandboxes beneath them.
func (r *runAgent) preparePodCgroups(ctx context.Context) error {
	driver, err := cgroupDriver(ctx, r.cfg, r.client, r.log)
	if err != nil {
		return err
	}
	r.driver = driver
	r.n.Status("preparing pod cgroups (%s driver)", driver)
	cgm, err := kubepods.New(ctx, r.layout, driver, r.cfg.CgroupRoot, kubepods.Options{Log: r.log})
	if err != nil {
		return err
	}
	r.cgm = cgm
	r.g.Cleanup(func() { cgm.Close() })
	return checkPlacement(ctx, r.client, cgm, r.log)
}

// openState reads the node's memory and the agent's capabilities, and
// opens the state store beneath the root dir.
func (r *runAgent) openState(context.Context) error {
	mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath)
	if err != nil {
		return err
	}
	r.memTotal = mi.MemTotal
	r.hasRes, _ = host.HasCapability(host.CapSysResource)
	r.minAdj = -1000
	if !r.hasRes {
		// Without CAP_SYS_RESOURCE a task may not go below the minimum it
		// already has; containerd's restrict_oom_score_adj uses its own.
		r.minAdj = OwnOOMScoreAdj()
	}
	if err := os.MkdirAll(r.cfg.RootDir, 0o750); err != nil {
		return fmt.Errorf("root dir: %w", err)
	}
	store, err := openStateStore(r.cfg.RootDir, r.log)
	if err != nil {
		return err
	}
	r.store = store
	r.g.Cleanup(store.Close)
	return nil
}

// enforceAllocatable limits kubepods to the node's allocatable: its
// capacity less systemReserved and kubeReserved.
func (r *runAgent) enforceAllocatable(ctx context.Context) error {
	r.capacity = corev1.ResourceList{
		corev1.ResourceMemory: *resource.NewQuantity(int64(r.memTotal), resource.BinarySI),
		corev1.ResourceCPU:    *resource.NewMilliQuantity(int64(runtime.NumCPU())*1000, resource.DecimalSI),
	}
	rc, err := r.cgm.EnforceAllocatable(ctx, r.capacity, r.cfg.SystemReserved, r.cfg.KubeReserved)
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
		r.log.Info("node allocatable enforced on kubepods", attrs...)
	}
	return nil
}

// configureNetwork writes the pod network's CNI configuration when
// nodeguard manages it, and keeps what the lifecycle needs to check and
// collect it.
func (r *runAgent) configureNetwork(ctx context.Context) error {
	cfg, log := r.cfg, r.log
	if !cfg.Network.Manage && !r.opts.CheckNetwork {
		return nil
	}
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
	r.network = &lifecycle.Network{Config: nc, NodeNetNS: cfg.Network.NodeNetNS, NetNSDirs: cfg.Network.NetNSDirs,
		// Sandboxes other clients of the runtime are creating: their
		// leases and netns are not listed yet.
		GCMinAge: time.Minute}
	return nil
}

// connectCluster, in node mode, makes the API server's client and event
// recorder and starts watching the objects the pods use.
func (r *runAgent) connectCluster(context.Context) error {
	if r.cfg.Kubeconfig == "" {
		return nil
	}
	name, err := nodeName(r.cfg)
	if err != nil {
		return err
	}
	cs, b, rec, err := kubeClient(r.cfg.Kubeconfig, name, r.opts.Version)
	if err != nil {
		return err
	}
	r.g.Cleanup(b.Shutdown)
	r.kubeCS, r.kubeRec = cs, rec
	r.objects = kubenode.NewObjects(cs, r.log.With("component", "objects"))
	r.g.Go("API server objects", r.objects.Run)
	r.onRemoved = func(p *corev1.Pod) {
		if s := r.podSource.Load(); s != nil {
			s.Removed(p)
		}
	}
	return nil
}

// startPods makes the pod lifecycle manager, with its volumes, the
// runtime's features, the node's identity, the admission hook and the
// event log, and the disk's garbage collection beside it.
func (r *runAgent) startPods(ctx context.Context) error {
	cfg, log := r.cfg, r.log
	var volObjects mounts.Objects
	if r.objects != nil {
		volObjects = r.objects
	}
	// The Kubernetes libraries log through klog (k8s.io/mount-utils: the
	// format and mount of local volumes; client-go; apimachinery's
	// streaming proxy): into the daemon's log with the rest.
	klog.SetSlogLogger(log.With("component", "k8s"))
	vols, err := mounts.New(mounts.Config{
		RootDir: cfg.RootDir, HostPathAllow: cfg.Volumes.HostPathAllow, SourceDir: cfg.Volumes.SourceDir,
		NodeMemory: int64(r.memTotal), Logger: log, Objects: volObjects,
		// NFS clients dial from the pod network's namespace, as probes do.
		NodeNetNS: cfg.Network.NodeNetNS,
	})
	if err != nil {
		return err
	}
	if r.policy, err = cfg.Eviction.Policy(); err != nil {
		return err
	}
	podOpts, err := r.podOptions(ctx)
	if err != nil {
		return err
	}
	if err := r.identifyNode(); err != nil {
		return err
	}
	nodeLabels, err := cfg.Labels()
	if err != nil {
		return err
	}
	r.adm, r.relay = &admitter{}, &decisionRelay{}
	r.events = api.NewEventLog(4096)
	var podEvents lifecycle.EventRecorder = r.events
	if r.kubeRec != nil {
		podEvents = &kubeEvents{local: r.events, recorder: r.kubeRec}
	}
	r.mgr, err = lifecycle.New(lifecycle.Config{
		Volumes: vols, Network: r.network, ProbeNetNS: probeNetNS(cfg.Network), Admit: r.adm.admit, Node: r.node, Events: podEvents, OnRemoved: r.onRemoved,
		ImageCredentialsFile: cfg.ImageCredentialsFile, ClusterDomain: cfg.ClusterDomain, NodeLabels: nodeLabels,
		LocalStorage: lifecycle.LocalStorageConfig{Disabled: cfg.Eviction.Disabled, DryRun: cfg.Eviction.DryRun,
			Exempt: cfg.Eviction.Exempt, Observer: r.relay},
		Runtime: r.client, Cgroups: r.cgm, RootDir: cfg.RootDir, State: r.store, MemoryCapacity: int64(r.memTotal),
		DNS: lifecycle.NodeDNS(lifecycle.ResolvConf), PodOptions: podOpts,
		CgroupV2: r.layout.Memory.V2(), Logger: log, HasCapSysResource: r.hasRes, MinOOMScoreAdj: r.minAdj,
		BackoffInitial: cfg.BackoffInitial.Duration, BackoffMax: cfg.BackoffMax.Duration, ContainerLogs: cfg.ContainerLogPolicy(),
	})
	if err != nil {
		return err
	}
	r.disk, err = newDiskGC(ctx, r.client, &imagegc.ImageFS{Runtime: r.client}, r.mgr, cfg, cfg.RootDir, log)
	return err
}

// podOptions are the pod fields the node supports: the configuration's,
// AppArmor's, and what the runtime says it implements, which decides the
// pod fields that need it, as the kubelet's node status.features does.
func (r *runAgent) podOptions(ctx context.Context) (podspec.Options, error) {
	cfg := r.cfg
	appArmor, err := lifecycle.AppArmorEnabled(lifecycle.AppArmorEnabledPath)
	if err != nil {
		return podspec.Options{}, err
	}
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	features, err := r.client.Features(fctx)
	fcancel()
	if err != nil {
		return podspec.Options{}, err
	}
	// No CRI feature says whether the runtime mounts image volumes:
	// its version does (cri.ImageVolumesOf).
	imageVolumes := cri.ImageVolumesOf(r.client.Runtime())
	r.log.Info("runtime features", "supplementalGroupsPolicy", features.GetSupplementalGroupsPolicy(),
		"imageVolumes", imageVolumes.Mount, "imageVolumeSubPath", imageVolumes.SubPath)
	inCluster := r.kubeCS != nil
	return podspec.Options{PriorityClasses: cfg.PriorityClasses, AllowPrivileged: cfg.AllowPrivileged, ImagePull: cfg.ImagePull,
		AllowedUnsafeSysctls: cfg.AllowedUnsafeSysctls, AppArmorEnabled: appArmor,
		SupplementalGroupsPolicy: features.GetSupplementalGroupsPolicy(),
		ImageVolumes:             imageVolumes.Mount, ImageVolumeSubPath: imageVolumes.SubPath, Runtime: imageVolumes.Runtime,
		ServiceAccountTokens: inCluster, ClusterPriorityClasses: inCluster, ReadinessGates: inCluster}, nil
}

// identifyNode is the node as its pods see it (name, addresses,
// allocatable), and checks the image credentials file.
func (r *runAgent) identifyNode() error {
	cfg := r.cfg
	node, err := nodeInfo(cfg.RootDir, int64(r.memTotal))
	if err != nil {
		return err
	}
	if cfg.NodeName != "" {
		node.Name = cfg.NodeName
	}
	if ips, _ := config.ParseNodeIPs(cfg.NodeIP); len(ips) > 0 {
		node.HostIPs = ips
	}
	r.node = node
	if f := cfg.ImageCredentialsFile; f != "" {
		// Read at each pull; a file that is wrong from the start is an
		// error now rather than a warning at every pull.
		if _, err := credentials.ReadFile(f); err != nil {
			return fmt.Errorf("imageCredentialsFile: %w", err)
		}
	}
	return nil
}

// startSources starts the pod sources (the manifest directory; the API
// server's pods in node mode, with the node's allocatable admission) and
// the pod lifecycle.
func (r *runAgent) startSources(ctx context.Context) error {
	cfg, log, g, mgr := r.cfg, r.log, r.g, r.mgr
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
	if r.kubeCS != nil {
		r.nodeCap, r.nodeAlloc = nodeResources(r.capacity, r.node, cfg.Network.MaxPods, cfg, r.policy.Thresholds)
		nodeAlloc := r.nodeAlloc
		r.adm.fit = func(p *corev1.Pod) error { return admission.Fit(p, mgr.List(), nodeAlloc) }
		ps := kubenode.NewPodSource(kubenode.PodsConfig{Client: r.kubeCS, NodeName: r.node.Name, HostIPs: r.node.HostIPs, Pods: mgr,
			Reject: rejectReason, Recorder: r.kubeRec, Log: log.With("component", "pod-source")})
		r.podSource.Store(ps)
		g.Go("API server pods", ps.Run)
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
	return nil
}

// startSensing starts sensing on the pod root, with the pods' labels and
// storage and the runtime's image filesystem, and the image garbage
// collection, which its metrics count. Sensing always runs (the eviction
// manager confirms every wake-up on a fresh snapshot); /metrics only with
// an address.
func (r *runAgent) startSensing(ctx context.Context) error {
	kube, err := r.cgm.Kubepods()
	if err != nil {
		return err
	}
	r.kube = kube
	mgr := r.mgr
	storage := &storageSampler{mgr: mgr, every: 10 * time.Second, log: r.log}
	r.g.Go("storage sampler", func(ctx context.Context) error { storage.Run(ctx); return nil })
	r.fwd = newEventForwarder(1024, r.layout.Memory.ID)
	sf := r.senseFlags(sensingConfig{metricsAddr: r.cfg.MetricsAddr, profiling: r.cfg.EnableProfiling, kernel: r.cfg.Kernel, rootDir: r.cfg.RootDir},
		kube, r.driver, newPodResolver(mgr, r.cgm, r.layout), r.fwd)
	sf.storage, sf.imageFSStats = storage, r.disk.imageFS.FSStats
	s, am, err := r.base.startSensing(ctx, sf, r.store, r.fwd, metrics.AgentSources{Eviction: !r.cfg.Eviction.Disabled, GC: true,
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
	r.sensing, r.am = s, am
	r.disk.metrics.Store(am.GC)
	r.g.Go("image garbage collection", func(ctx context.Context) error { r.disk.images.Run(ctx); return nil })
	r.serveSensing(s)
	return nil
}

// startEviction puts back the oom_score_adj a previous agent left raised
// and, unless eviction is disabled, starts the eviction manager and binds
// the admission hook and the local-storage decisions to it.
func (r *runAgent) startEviction(context.Context) error {
	cfg, log := r.cfg, r.log
	// Before anything raises: the oom_score_adj an agent that died left
	// raised, put back with or without eviction.
	evictionActor := r.mgr.EvictionActor(cfg.Eviction.Exempt)
	if rep, err := evictionActor.RepairOOMScoreAdj(r.store); err != nil {
		log.Warn("put back the oom_score_adj a previous agent raised", "repaired", rep, "err", err)
	} else if rep.Pods > 0 || len(rep.Lost) > 0 {
		log.Info("the oom_score_adj a previous agent raised put back", "pods", rep.Pods, "restored", rep.Restored,
			"forked", rep.Forked, "lost", len(rep.Lost))
	}
	if cfg.Eviction.Disabled {
		return nil
	}
	em, obs, err := startEviction(r.g, evictionWiring{cfg: cfg.Eviction, policy: r.policy, actor: evictionActor,
		reclaim: r.disk.reclaim, sensing: r.sensing, metrics: r.am.Eviction, events: r.events, fwd: r.fwd, layout: r.layout, kube: r.kube,
		rootDir: cfg.RootDir, store: r.store, wire: &r.wire, beats: &r.beats, log: log})
	if err != nil {
		return err
	}
	r.evictObs = obs
	if lost := r.relay.bind(obs); lost > 0 {
		log.Warn("local-storage evictions made before the metrics existed are not counted", "lost", lost)
	}
	r.adm.policy.Store(em.Policy())
	r.em.Store(em)
	return nil
}

// startNodeMode makes the local API's server and, in node mode, joins the
// cluster: the Node, its status and Lease, and its HTTPS endpoint (the
// local API's kubelet routes).
func (r *runAgent) startNodeMode(context.Context) error {
	r.srv = api.NewServer(r.mgr.APIService(r.events), r.log, api.Options{})
	if r.kubeCS == nil {
		return nil
	}
	nm := nodeMode{version: r.opts.Version, cfg: r.cfg, node: r.node, capacity: r.nodeCap, allocatable: r.nodeAlloc, runtime: r.client,
		heartbeat: r.mgr.Heartbeat, endpoint: r.srv, log: r.log}
	if em := r.em.Load(); em != nil {
		nm.conditions = em.Policy().Conditions
	}
	agent, err := startNodeMode(r.g, r.kubeCS, nm)
	if err != nil {
		return err
	}
	if r.evictObs != nil {
		// A condition that changes is posted at once, not at the next
		// 10 s update: MemoryPressure taints the node for the
		// scheduler only once the API has it.
		kick := agent.Kick
		r.evictObs.onConditions.Store(&kick)
	}
	r.log.Info("node mode: joining the cluster", "kubeconfig", r.cfg.Kubeconfig, "node", r.node.Name)
	return nil
}

// serveAPI listens on the local API's socket, then serves it, the
// watchdog and SIGHUP reloads until ctx ends or a part fails (base.serve).
func (r *runAgent) serveAPI(ctx context.Context) error {
	cfg, n, mgr := r.cfg, r.n, r.mgr
	if err := os.MkdirAll(filepath.Dir(cfg.APISocket), 0o755); err != nil {
		return fmt.Errorf("api socket dir: %w", err)
	}
	// Listening, the socket takes connections into its backlog: READY=1
	// may follow before Serve, and a client that connects at once is
	// answered.
	if err := r.srv.Listen(ctx, cfg.APISocket); err != nil {
		return err
	}
	status := func() string { return fmt.Sprintf("running: %d pods", len(mgr.List())) }
	r.beats = append(r.beats, heartbeat{name: "pod lifecycle", period: lifecycle.DefaultResync, last: mgr.Heartbeat})
	em := r.em.Load()
	if em != nil {
		r.beats = append(r.beats, evictionBeat(em, cfg.Eviction))
	}
	rl := &reloader{cur: cfg, load: r.opts.Reload, path: r.opts.ConfigPath, logs: r.opts.Logs, em: em, wire: r.wire.Load(), n: n, log: r.log, status: status}
	r.g.Go("api server", r.srv.Serve)
	return r.serve(ctx, status, "reloader", rl.onHUP, "api_socket", cfg.APISocket, "cgroup_root", cfg.CgroupRoot, "manifests", cfg.PodManifestPath,
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
