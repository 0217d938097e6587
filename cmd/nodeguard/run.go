package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/internal/crienv"
	"github.com/nodeguard/nodeguard/internal/host"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/lifecycle/qos"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/mounts"
	"github.com/nodeguard/nodeguard/netplumb"
	"github.com/nodeguard/nodeguard/oom"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/pressure/psi"
)

// DefaultAPISocket is where the local API listens.
const DefaultAPISocket = api.DefaultSocket

func newRunCmd(g *globalFlags) *cobra.Command {
	var (
		configFlag     string
		flags          runConfig
		privateRuntime bool
		privateNet     bool
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent: pods from a manifest directory and the local API, pressure sensing and metrics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// SIGHUP reloads (see reloader); caught from the start, so that
			// one sent while the agent starts waits instead of killing it.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			log, err := g.logger()
			if err != nil {
				return err
			}
			// Before any child process starts: it takes systemd's
			// variables out of the environment.
			notify := newNotifier(log)
			fs := cmd.Flags()
			path, err := configPath(configFlag, fs.Changed("config"))
			if err != nil {
				return err
			}
			var env *crienv.Env
			// load is the configuration in force: the file, then the
			// flags, then the private runtime. At start and every SIGHUP.
			load := func() (runConfig, error) {
				cfg, err := loadRunConfig(path)
				if err != nil {
					return cfg, err
				}
				override := func(name string, dst *string, v string) {
					if fs.Changed(name) {
						*dst = v
					}
				}
				override("runtime-endpoint", &cfg.RuntimeEndpoint, flags.RuntimeEndpoint)
				override("root-dir", &cfg.RootDir, flags.RootDir)
				override("cgroup-driver", &cfg.CgroupDriver, flags.CgroupDriver)
				override("cgroup-root", &cfg.CgroupRoot, flags.CgroupRoot)
				override("pod-manifest-path", &cfg.PodManifestPath, flags.PodManifestPath)
				override("api-socket", &cfg.APISocket, flags.APISocket)
				override("metrics-addr", &cfg.MetricsAddr, flags.MetricsAddr)
				if fs.Changed("enable-profiling") {
					cfg.EnableProfiling = flags.EnableProfiling
				}
				override("log-level", &cfg.Logging.Level, g.logLevel)
				override("log-format", &cfg.Logging.Format, g.logFormat)
				if env != nil {
					cfg.RuntimeEndpoint = env.Endpoint()
					cfg.CgroupRoot = env.CgroupParent()
					// The env's containerd reads the conflist the env
					// rendered through netplumb; nodeguard checks and
					// collects it there.
					nc := env.NetworkConfig()
					cfg.Network = networkConfig{
						Manage: false, Name: nc.Name, Bridge: nc.Bridge, Subnet: nc.Subnet.String(), CNIBinDirs: nc.BinDirs,
						CNIConfDir: nc.ConfDir, IPAMDir: nc.IPAMDir, NodeNetNS: env.NetNS(), NetNSDirs: []string{env.NetNSDir()},
					}
				}
				return cfg, nil
			}
			cfg, err := load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if privateRuntime {
				if cfg.RuntimeEndpoint != "" {
					return errors.New("--private-runtime and --runtime-endpoint exclude each other")
				}
				notify.status("starting the private containerd")
				env, err = crienv.Start(ctx, crienv.Options{Log: log})
				if err != nil {
					return fmt.Errorf("start the private containerd: %w", err)
				}
				defer func() {
					// The private runtime takes every pod with it; their
					// volumes (tmpfs mounts among them) go too.
					env.Close()
					if vols, err := mounts.New(mounts.Config{RootDir: cfg.RootDir, Logger: log}); err == nil {
						if _, err := vols.GC(context.WithoutCancel(ctx), nil); err != nil {
							log.Warn("remove the volumes of the private runtime's pods", "err", err)
						}
					}
				}()
				if cfg, err = load(); err != nil {
					return err
				}
				privateNet = true
				fmt.Fprintf(cmd.ErrOrStderr(), "private containerd: %s (crictl --runtime-endpoint %s ps)\n", env.Endpoint(), env.Endpoint())
			}
			if err := cfg.Validate(); err != nil {
				if path != "" {
					return fmt.Errorf("config %s: %w", path, err)
				}
				return err
			}
			applyLogging(g.logs, cfg.Logging)
			if path != "" {
				log.Info("configuration loaded", "config", path)
			}
			return runDaemon(ctx, cfg, privateNet, log, daemonControl{
				notify: notify, hup: hup, logs: g.logs, path: path,
				reload: func() (runConfig, error) {
					cfg, err := load()
					if err == nil {
						err = cfg.Validate()
					}
					return cfg, err
				},
			})
		},
	}
	cmd.Flags().StringVar(&configFlag, "config", DefaultConfigPath, "configuration file (YAML; the default is read only if it exists); flags override it")
	cmd.Flags().StringVar(&flags.RuntimeEndpoint, "runtime-endpoint", "", "the CRI socket, e.g. unix:///run/containerd/containerd.sock")
	cmd.Flags().StringVar(&flags.RootDir, "root-dir", "/var/lib/nodeguard", "state directory (pod logs, API pods, volumes)")
	cmd.Flags().StringVar(&flags.CgroupDriver, "cgroup-driver", "cgroupfs", "cgroup driver: cgroupfs or systemd (the runtime's: containerd's SystemdCgroup)")
	cmd.Flags().StringVar(&flags.CgroupRoot, "cgroup-root", "/", "cgroup root for kubepods: / on a node (relative: beneath nodeguard's own cgroup, for a runtime that shares it)")
	cmd.Flags().StringVar(&flags.PodManifestPath, "pod-manifest-path", "", "directory of static pod manifests, watched")
	cmd.Flags().StringVar(&flags.APISocket, "api-socket", DefaultAPISocket, "local API socket (root only)")
	cmd.Flags().StringVar(&flags.MetricsAddr, "metrics-addr", DefaultMetricsAddr, "address to serve /metrics on (empty: off)")
	cmd.Flags().BoolVar(&flags.EnableProfiling, "enable-profiling", false, "serve Go's /debug/pprof/ on the metrics address")
	cmd.Flags().BoolVar(&privateRuntime, "private-runtime", false, "start a private containerd in its own network namespace (demo, tests)")
	return cmd
}

// runDaemon runs nodeguard. checkNetwork: verify and collect the pod
// network even when nodeguard does not write its conflist (the private
// runtime's is written by its environment).
func runDaemon(ctx context.Context, cfg runConfig, checkNetwork bool, log *slog.Logger, ctl daemonControl) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := ctl.notify
	go func() { <-ctx.Done(); n.stopping() }()
	setOwnOOMScoreAdj(log)
	layout, err := cgroups.Discover()
	if err != nil {
		return fmt.Errorf("discover cgroups: %w", err)
	}
	// (Not with the private runtime, checkNetwork: it was started in this
	// cgroup already, so nodeguard cannot be its only process; with it,
	// nodeguard needs a cgroup whose children may have controllers, such
	// as the root cgroup of the VM lane's guests.)
	if !path.IsAbs(cfg.CgroupRoot) && layout.Mode == cgroups.ModeV2 {
		if err := refuseRelativeRootInService(layout.Unified, cfg.CgroupRoot); err != nil {
			return err
		}
	}
	if !path.IsAbs(cfg.CgroupRoot) && layout.Mode == cgroups.ModeV2 && !checkNetwork {
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
	driver, err := kubepods.ParseDriver(cfg.CgroupDriver)
	if err != nil {
		return err
	}
	n.status("preparing pod cgroups (%s driver)", driver)
	cgm, err := kubepods.New(ctx, layout, driver, cfg.CgroupRoot, kubepods.Options{Log: log})
	if err != nil {
		return err
	}
	defer cgm.Close()
	var dialOpts []cri.Option
	if cfg.ImagePull {
		dialOpts = append(dialOpts, cri.WithImagePull())
	}
	n.status("connecting to the runtime at %s", cfg.RuntimeEndpoint)
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	client, err := cri.Dial(dctx, cfg.RuntimeEndpoint, 10*time.Second, dialOpts...)
	dcancel()
	if err != nil {
		return err
	}
	defer client.Close()
	info := client.Runtime()
	log.Info("runtime connected", "endpoint", cfg.RuntimeEndpoint, "runtime", info, "pid", client.RuntimePID())
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
		minAdj = ownOOMScoreAdj()
	}
	if err := os.MkdirAll(cfg.RootDir, 0o750); err != nil {
		return fmt.Errorf("root dir: %w", err)
	}
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
	if cfg.Network.Manage || checkNetwork {
		nc, err := cfg.Network.netplumb(cfg.RootDir)
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
	vols, err := mounts.New(mounts.Config{
		RootDir: cfg.RootDir, HostPathAllow: cfg.Volumes.HostPathAllow, SourceDir: cfg.Volumes.SourceDir,
		NodeMemory: int64(mi.MemTotal), Logger: log,
	})
	if err != nil {
		return err
	}
	policy, err := cfg.Eviction.policy()
	if err != nil {
		return err
	}
	adm := &admitter{}
	mgr, err := lifecycle.New(lifecycle.Config{
		Volumes: vols, Network: network, Admit: adm.admit,
		Runtime: client, Cgroups: cgm, RootDir: cfg.RootDir, MemoryCapacity: int64(mi.MemTotal),
		DNS: nodeDNS(), PodOptions: podspec.Options{PriorityClasses: cfg.PriorityClasses, AllowPrivileged: cfg.AllowPrivileged},
		CgroupV2: layout.Memory.V2(), Logger: log, HasCapSysResource: hasRes, MinOOMScoreAdj: minAdj,
		BackoffInitial: cfg.BackoffInitial.Duration, BackoffMax: cfg.BackoffMax.Duration,
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	if cfg.PodManifestPath != "" {
		if err := syncManifests(ctx, mgr, cfg.PodManifestPath, log); err != nil {
			log.Warn("manifest directory", "err", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			watchManifests(ctx, mgr, cfg.PodManifestPath, log)
		}()
	}
	mgr.SourcesReady()
	wg.Add(1)
	go func() { defer wg.Done(); mgr.Run(ctx) }()

	// Sensing always runs (the eviction manager confirms every wake-up on
	// a fresh snapshot); /metrics only with an address.
	kube, err := cgm.Kubepods()
	if err != nil {
		return err
	}
	storage := &storageSampler{mgr: mgr, every: 10 * time.Second, log: log}
	wg.Add(1)
	go func() { defer wg.Done(); storage.Run(ctx) }()
	fwd := newEventForwarder(1024, layout.Memory.ID)
	var evictMgr atomic.Pointer[oom.Manager]
	// Set once the eviction manager exists, after sensing has started:
	// read by the sensor's observer goroutine.
	var wire atomic.Pointer[podRootTripwire]
	sf := &senseFlags{metricsAddr: cfg.MetricsAddr, profiling: cfg.EnableProfiling, roots: []string{kube}, rootDir: cfg.RootDir,
		noBPF: !cfg.Kernel.BPF, ringSize: cfg.Kernel.RingSizeBytes, queueSize: cfg.Kernel.QueueSize,
		tick: time.Second, fullEvery: 15 * time.Second, resolver: newPodResolver(mgr, cgm, layout), storage: storage,
		onEvent: fwd.send,
		onWake: func(w psi.Wake) {
			if m := evictMgr.Load(); m != nil {
				m.Wake("psi:"+w.Trigger.String(), w.Time)
			}
		},
		onSnapshot: func(snap *pressure.Snapshot) {
			if w := wire.Load(); w != nil {
				w.rearm(snap)
			}
		},
	}
	n.status("starting sensing")
	s, err := startSensing(ctx, sf, log)
	if err != nil {
		return fmt.Errorf("start sensing: %w", err)
	}
	defer s.Close()
	if ctl.logs != nil {
		s.exporter.LogDropped(ctl.logs.Dropped)
	}
	s.exporter.EvictionEventsDropped(forwardedKinds(), fwd.Dropped)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.Serve(ctx); err != nil {
			log.Error("metrics", "err", err)
		}
	}()

	events := api.NewEventLog(4096)
	if !cfg.Eviction.Disabled {
		obs := &evictionObserver{m: s.exporter.Eviction(), events: events, log: log}
		em, err := oom.NewManager(oom.ManagerConfig{
			Policy: policy, Actor: mgr.EvictionActor(cfg.Eviction.Exempt),
			Snapshot: func(ctx context.Context) (*pressure.Snapshot, error) { return s.sensor.Fresh(ctx), nil },
			Watch:    s.sensor.Add,
			Tick:     cfg.Eviction.Tick.Duration, DryRun: cfg.Eviction.DryRun, Logger: log, Observer: obs,
		})
		if err != nil {
			return err
		}
		adm.policy.Store(em.Policy())
		evictMgr.Store(em)
		if d, err := layout.Memory.Resolve(kube); err == nil {
			if w, err := newPodRootTripwire(d, policy.Thresholds, filepath.Join(cfg.RootDir, "tripwire"), log); err != nil {
				log.Warn("no tripwire on the pod root: the safety tick and PSI triggers drive evictions", "err", err)
			} else {
				defer w.tw.Close()
				wire.Store(w)
				wg.Add(1)
				go func() { defer wg.Done(); w.run(ctx, em) }()
			}
		}
		wg.Add(2)
		go func() { defer wg.Done(); em.Events(ctx, fwd.ch) }()
		go func() {
			defer wg.Done()
			if err := em.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Error("eviction manager", "err", err)
			}
		}()
		log.Info("eviction manager running", "thresholds", len(policy.Thresholds), "psi_rules", len(policy.PSIRules), "dry_run", cfg.Eviction.DryRun)
	}

	if err := os.MkdirAll(filepath.Dir(cfg.APISocket), 0o755); err != nil {
		return fmt.Errorf("api socket dir: %w", err)
	}
	srv := api.NewServer(podService{m: mgr, EventLog: events}, log, api.Options{})
	// Listening, the socket takes connections into its backlog: READY=1
	// may follow before Serve, and a client that connects at once is
	// answered.
	if err := srv.Listen(ctx, cfg.APISocket); err != nil {
		return err
	}
	status := func() string { return fmt.Sprintf("running: %d pods", len(mgr.List())) }
	beats := []heartbeat{
		{name: "pod lifecycle", period: lifecycle.DefaultResync, last: mgr.Heartbeat},
		{name: "sensing", period: sf.tick, last: func() time.Time {
			if snap := s.sensor.Latest(); snap != nil {
				return snap.Time
			}
			return time.Time{}
		}},
	}
	em := evictMgr.Load()
	if em != nil {
		tick := cfg.Eviction.Tick.Duration
		if tick <= 0 {
			tick = oom.DefaultTick
		}
		beats = append(beats, heartbeat{name: "eviction", period: tick, last: counterBeat(em.Evaluations, time.Now)})
	}
	rl := &reloader{cur: cfg, load: ctl.reload, path: ctl.path, logs: ctl.logs, em: em, wire: wire.Load(), n: n, log: log, status: status}
	wg.Add(2)
	go func() { defer wg.Done(); n.runWatchdog(ctx, beats, status) }()
	go func() { defer wg.Done(); rl.run(ctx, ctl.hup) }()
	n.ready(status())
	log.Info("nodeguard running", "api_socket", cfg.APISocket, "cgroup_root", cfg.CgroupRoot, "manifests", cfg.PodManifestPath,
		"systemd_notify", n.enabled(), "watchdog", n.watchdog)
	if err := srv.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// refuseRelativeRootInService refuses a relative cgroup root beneath a
// systemd service's cgroup on cgroup v2: nodeguard would enable
// controllers in the service's cgroup (after moving itself into a leaf),
// and then systemd could not start the next agent there after a restart
// or crash (the kernel refuses to put a process into a cgroup whose
// controllers are enabled for its children), so the unit would fail to
// start for good while the pods live on.
func refuseRelativeRootInService(h *cgroups.Hierarchy, root string) error {
	if h == nil || !strings.HasSuffix(path.Base(h.Own), ".service") {
		return nil
	}
	return fmt.Errorf("cgroupRoot %q is relative, beneath the systemd service's cgroup %s: on cgroup v2 systemd could not start the agent there again after a restart once pod cgroups hang from it; use cgroupRoot: / (the default)", root, h.Own)
}

// checkPlacement makes sure the runtime will put containers into the
// cgroups nodeguard makes, before any pod runs: the runtime's cgroup
// driver, where it says (CRI RuntimeConfig), must be nodeguard's; and a
// runtime handed relative cgroup parents must share nodeguard's cgroup.
// Every sandbox is checked again once it runs (kubepods.CheckSandbox).
func checkPlacement(ctx context.Context, client *cri.Client, cgm *kubepods.Manager, log *slog.Logger) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, ok, err := client.CgroupDriver(cctx)
	switch {
	case err != nil:
		log.Warn("the runtime's cgroup driver is unknown; every sandbox's placement is checked instead", "err", err)
	case !ok:
		log.Info("the runtime does not report its cgroup driver (CRI RuntimeConfig); every sandbox's placement is checked instead",
			"cgroup_driver", cgm.Driver())
	default:
		if err := cgm.CheckRuntimeDriver(d); err != nil {
			return err
		}
		log.Info("cgroup driver matches the runtime's", "cgroup_driver", d)
	}
	switch pid := client.RuntimePID(); {
	case cgm.AbsoluteParents():
	case pid == 0:
		log.Warn("the runtime's pid is unknown (no SO_PEERCRED): cannot check that it shares nodeguard's cgroup, as a relative cgroup root needs; every sandbox's placement is checked instead")
	case pid == 1:
		log.Warn("the CRI socket is served by pid 1 (socket activation): cannot check the runtime's cgroup; every sandbox's placement is checked instead")
	default:
		return cgm.CheckRuntimeCgroup(pid)
	}
	return nil
}

// setOwnOOMScoreAdj gives nodeguard the kubelet's own -999, so that the OOM
// killer takes pods before the agent that guards them. Without
// CAP_SYS_RESOURCE the kernel refuses values below the current minimum:
// one log line says so and what stays in force.
func setOwnOOMScoreAdj(log *slog.Logger) {
	want := qos.NodeguardOOMScoreAdj
	err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(want)), 0)
	if err != nil {
		log.Warn("oom_score_adj of nodeguard not lowered (no CAP_SYS_RESOURCE?)", "wanted", want, "kept", ownOOMScoreAdj(), "err", err)
		return
	}
	log.Info("oom_score_adj of nodeguard set", "value", want)
}

// ownOOMScoreAdj reads this process's oom_score_adj: the floor without
// CAP_SYS_RESOURCE.
func ownOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	var v int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &v); err != nil {
		return 0
	}
	return v
}

// nodeDNS is the node's resolver config from /etc/resolv.conf, handed to
// sandboxes (dnsPolicy Default and ClusterFirst).
func nodeDNS() *runtimeapi.DNSConfig {
	b, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		return nil
	}
	var d runtimeapi.DNSConfig
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			d.Servers = append(d.Servers, f[1])
		case "search":
			d.Searches = append(d.Searches, f[1:]...)
		case "options":
			d.Options = append(d.Options, f[1:]...)
		}
	}
	return &d
}

const sourceFile = "file"

// syncManifests applies every manifest in dir and forgets pods whose file
// went away. A broken file is reported and its pods left as they were.
func syncManifests(ctx context.Context, mgr *lifecycle.Manager, dir string, log *slog.Logger) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read manifest dir: %w", err)
	}
	keep := map[types.UID]bool{}
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || strings.HasSuffix(name, ".json")) {
			continue
		}
		path := filepath.Join(dir, name)
		pods, err := podspec.Load(path)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		applied, err := mgr.Apply(ctx, pods, sourceFile+":"+path)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			continue
		}
		for _, p := range applied {
			keep[p.UID] = true
		}
	}
	if len(errs) > 0 {
		// Keep what the broken files had: nothing already running is lost.
		for _, p := range mgr.List() {
			if strings.HasPrefix(p.Annotations[lifecycle.AnnotationSource], sourceFile+":") {
				keep[p.UID] = keep[p.UID] || fileBroken(errs, p.Annotations[lifecycle.AnnotationSource])
			}
		}
	}
	for _, p := range mgr.List() {
		src := p.Annotations[lifecycle.AnnotationSource]
		if strings.HasPrefix(src, sourceFile+":") {
			mgr.Forget(src, keep)
		}
	}
	return errors.Join(errs...)
}

func fileBroken(errs []error, source string) bool {
	path := strings.TrimPrefix(source, sourceFile+":")
	for _, e := range errs {
		if strings.Contains(e.Error(), path) {
			return true
		}
	}
	return false
}

// watchManifests rescans the directory every 2 s (the kubelet's file
// source polls every 20 s; inotify would need a dependency for little).
func watchManifests(ctx context.Context, mgr *lifecycle.Manager, dir string, log *slog.Logger) {
	var last string
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := syncManifests(ctx, mgr, dir, log); err != nil && err.Error() != last {
			log.Warn("manifest directory", "err", err)
			last = err.Error()
		} else if err == nil {
			last = ""
		}
	}
}

// podService adapts the Manager to the local API.
type podService struct {
	m *lifecycle.Manager
	*api.EventLog
}

// mapErr gives a lifecycle error the API's kind (which picks the status
// code) and keeps its text as it is: "pod not found: default/x", not
// "not found: pod not found: default/x".
func mapErr(err error) error {
	switch {
	case errors.Is(err, lifecycle.ErrNotFound):
		return apiError{kind: api.ErrNotFound, err: err}
	case errors.Is(err, lifecycle.ErrInvalid):
		return apiError{kind: api.ErrInvalid, err: err}
	case errors.Is(err, lifecycle.ErrRejected):
		// Admission under node pressure: transient, try again later.
		return apiError{kind: api.ErrBusy, err: err}
	}
	return err
}

// apiError is err, of the API's kind.
type apiError struct{ kind, err error }

func (e apiError) Error() string   { return e.err.Error() }
func (e apiError) Unwrap() []error { return []error{e.kind, e.err} }

func (s podService) Apply(ctx context.Context, pods []*corev1.Pod, _ string) ([]*corev1.Pod, error) {
	out, err := s.m.Apply(ctx, pods, lifecycle.SourceAPI)
	return out, mapErr(err)
}
func (s podService) Delete(ctx context.Context, ns, name string) error {
	return mapErr(s.m.Delete(ctx, ns, name))
}
func (s podService) List() []*corev1.Pod                     { return s.m.List() }
func (s podService) Get(ns, name string) (*corev1.Pod, bool) { return s.m.Get(ns, name) }
func (s podService) Logs(ctx context.Context, ns, name, c string, tail int, w io.Writer) error {
	return mapErr(s.m.Logs(ctx, ns, name, c, tail, w))
}
func (s podService) Exec(ctx context.Context, ns, name, c string, cmd []string, timeout time.Duration) (api.ExecResult, error) {
	r, err := s.m.Exec(ctx, ns, name, c, cmd, timeout)
	return api.ExecResult{Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode}, mapErr(err)
}

// podResolver labels cgroup series with their pod.
type podResolver struct {
	mgr    *lifecycle.Manager
	cgm    *kubepods.Manager
	layout *cgroups.Layout

	mu    sync.Mutex
	at    time.Time
	byKey map[pressure.CgroupKey]metrics.PodLabels
}

func newPodResolver(mgr *lifecycle.Manager, cgm *kubepods.Manager, layout *cgroups.Layout) *podResolver {
	return &podResolver{mgr: mgr, cgm: cgm, layout: layout}
}

func (r *podResolver) Resolve(k pressure.CgroupKey) (metrics.PodLabels, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) > 2*time.Second {
		r.byKey = map[pressure.CgroupKey]metrics.PodLabels{}
		for _, p := range r.mgr.List() {
			parent, err := r.cgm.Parent(p)
			if err != nil {
				continue
			}
			dirs, err := r.cgm.Dirs(parent)
			if err != nil {
				continue
			}
			for _, d := range dirs {
				if d.Hierarchy.ID != r.layout.Memory.ID {
					continue
				}
				if id, err := cgroups.ID(d.Path); err == nil {
					r.byKey[pressure.CgroupKey{ID: id, HierarchyID: d.Hierarchy.ID}] = metrics.PodLabels{
						Namespace: p.Namespace, Pod: p.Name, UID: string(p.UID), QOS: string(p.Status.QOSClass)}
				}
			}
		}
		r.at = time.Now()
	}
	l, ok := r.byKey[k]
	return l, ok
}
