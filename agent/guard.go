package agent

// nodeguard guard: nodeguard beside a kubelet. The kubelet runs the pods;
// nodeguard senses and decides exactly as nodeguard run does (the same
// eBPF pipeline, snapshots, tripwire, PSI rules, thresholds and ranking)
// and acts on the kubelet's pods through their cgroups and the API
// server (package guard).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/guard"
	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/metrics"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// guardSetup is what both the daemon and `guard pods` start from.
type guardSetup struct {
	layout *cgroups.Layout
	driver kubepods.Driver
	kube   string // the pod root, kubepods's name
	client *cri.Client
	kcs    kubernetes.Interface // nil: no API server
	rc     *rest.Config
	node   string
}

// setupGuard finds the kubelet's cgroups, dials the runtime and, when
// there is one, the API server.
func setupGuard(ctx context.Context, cfg config.Guard, version string, log *slog.Logger) (_ *guardSetup, retErr error) {
	s := &guardSetup{}
	var err error
	if s.layout, err = cgroups.Discover(); err != nil {
		return nil, fmt.Errorf("discover cgroups: %w", err)
	}
	if s.driver, err = guardDriver(s.layout, cfg); err != nil {
		return nil, err
	}
	if s.kube, err = kubepods.Name(s.driver, cfg.CgroupRoot); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	s.client, err = cri.Dial(dctx, cfg.RuntimeEndpoint, 10*time.Second)
	cancel()
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			s.client.Close()
		}
	}()
	if s.node, err = nodeName(config.Run{NodeName: cfg.NodeName}); err != nil {
		return nil, err
	}
	s.rc, err = guardRESTConfig(cfg.Kubeconfig, version)
	if err != nil {
		return nil, err
	}
	if s.rc != nil {
		if s.kcs, err = kubernetes.NewForConfig(s.rc); err != nil {
			return nil, fmt.Errorf("API server: %w", err)
		}
	} else {
		log.Warn("guard mode without an API server: priorities and Burstable pods' requests are unknown, soft thresholds cannot evict, hard ones kill the pod cgroup only (its kubelet restarts it)")
	}
	return s, nil
}

// guardRESTConfig is the API server's client configuration: the
// kubeconfig's, else the pod's service account, else none (nil).
func guardRESTConfig(kubeconfig, version string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	switch {
	case kubeconfig != "":
		if rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	case os.Getenv("KUBERNETES_SERVICE_HOST") != "":
		if rc, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster API server: %w", err)
		}
	default:
		return nil, nil
	}
	rc.UserAgent = "nodeguard-guard/" + version
	rc.QPS, rc.Burst = kubeAPIQPS, kubeAPIBurst
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	return rc, nil
}

// guardDriver is the configured driver, or the one whose kubepods exists.
func guardDriver(layout *cgroups.Layout, cfg config.Guard) (kubepods.Driver, error) {
	if cfg.CgroupDriver != "" {
		return kubepods.ParseDriver(cfg.CgroupDriver)
	}
	var found []kubepods.Driver
	for _, d := range []kubepods.Driver{kubepods.Systemd, kubepods.Cgroupfs} {
		name, err := kubepods.Name(d, cfg.CgroupRoot)
		if err != nil {
			continue
		}
		dir, err := layout.Memory.Resolve(name)
		if err != nil {
			continue
		}
		if _, err := os.Stat(dir.Path); err == nil {
			found = append(found, d)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("cgroupDriver: neither kubepods.slice nor kubepods exists beneath cgroupRoot %q: is the kubelet running? (or set cgroupDriver)", cfg.CgroupRoot)
	}
	return "", fmt.Errorf("cgroupDriver: both kubepods.slice and kubepods exist beneath cgroupRoot %q: set cgroupDriver to the kubelet's", cfg.CgroupRoot)
}

// guardPolicy is guard mode's eviction policy: the configuration's, less
// the soft thresholds and PSI rules without an API server (withAPI).
func guardPolicy(cfg config.Guard, withAPI bool, log *slog.Logger) (eviction.PolicyConfig, error) {
	policy, err := cfg.Eviction.Policy()
	if err != nil {
		return policy, err
	}
	if !withAPI {
		// Soft decisions only ever ask the Eviction API: without one
		// they could only fail, every evaluation.
		var hard []eviction.Threshold
		for _, th := range policy.Thresholds {
			if th.Hard() {
				hard = append(hard, th)
			}
		}
		if dropped := len(policy.Thresholds) - len(hard) + len(policy.PSIRules); dropped > 0 {
			log.Warn("guard mode without an API server: soft thresholds and PSI rules evict through the Eviction API only, and are left out",
				"left_out", dropped)
		}
		policy.Thresholds, policy.PSIRules = hard, nil
	}
	return policy, nil
}

// startGuardActor makes guard mode's actor on the kubelet's pods (its
// events the kubelet's Evicted ones, through the API server when there is
// one), finds the pods, puts back the oom_score_adj a guard that died left
// raised, and runs the actor in the group. hard is the hard eviction's
// action.
func (d *base) startGuardActor(ctx context.Context, cfg config.Guard, st *guardSetup, store *statestore.Store) (*guard.Actor, guard.HardAction, error) {
	var rec record.EventRecorder
	if st.kcs != nil {
		b := record.NewBroadcaster()
		b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: st.kcs.CoreV1().Events("")})
		d.g.Cleanup(b.Shutdown)
		// The kubelet's source: the events are the kubelet's Evicted ones.
		rec = b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "nodeguard-guard", Host: st.node})
	}
	hard, _ := guard.ParseHardAction(cfg.Eviction.HardAction)
	// The node's memory: the kubelet's oom_score_adj of a Burstable pod
	// whose raise record was lost (guard.Actor.RepairOOMScoreAdj).
	var memCapacity int64
	if mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath); err == nil {
		memCapacity = int64(mi.MemTotal)
	} else {
		d.log.Warn("guard mode: the node's memory is unknown", "err", err)
	}
	// New resumes the evicted pods' holds and pending removals a guard
	// that died left in the store.
	actor, err := guard.New(guard.Config{
		Finder: &guard.Finder{Runtime: st.client, Layout: st.layout, Driver: st.driver, Root: cfg.CgroupRoot},
		Client: st.kcs, NodeName: st.node, Recorder: rec, Exempt: cfg.Eviction.Exempt, HardAction: hard,
		State: store, MemoryCapacity: memCapacity, Log: d.log.With("component", "guard"),
	})
	if err != nil {
		return nil, "", err
	}
	d.n.Status("finding the kubelet's pods")
	if err := actor.Sync(ctx); err != nil {
		return nil, "", err
	}
	if st.kcs != nil {
		// The pods' priorities first: until the API server has listed
		// them, a critical pod looks like any other. Bounded: memory
		// comes first, and an API server that does not answer delays
		// the guard by 30 s at most.
		d.n.Status("listing the node's pods from the API server")
		if err := actor.WaitAPI(ctx, 30*time.Second); err != nil {
			d.log.Warn("guard mode: guarding with the node's figures until the API server lists the pods", "err", err)
		}
	}
	d.log.Info("guard mode: the kubelet's pods found", "pods", len(actor.Found()))
	// Before anything raises: what a guard that died left raised.
	if rep, err := actor.RepairOOMScoreAdj(); err != nil {
		d.log.Warn("guard mode: put back the oom_score_adj a previous guard raised", "repaired", rep, "err", err)
	} else if rep.Pods > 0 || len(rep.Lost) > 0 {
		d.log.Info("guard mode: the oom_score_adj a previous guard raised put back", "pods", rep.Pods, "restored", rep.Restored,
			"forked", rep.Forked, "lost", len(rep.Lost))
	}
	d.g.Go("guard pods", actor.Run)
	return actor, hard, nil
}

// RunGuard is nodeguard guard's daemon: it runs until ctx ends or a part
// of it fails.
func RunGuard(ctx context.Context, cfg config.Guard, log *slog.Logger, opts Options) (retErr error) {
	d, ctx := startBase(ctx, "nodeguard guard", log, opts)
	defer d.shutdown(&retErr)
	g, n := d.g, d.n
	lockMemory(log)
	klog.SetSlogLogger(log.With("component", "k8s"))
	n.Status("connecting to the runtime at %s", cfg.RuntimeEndpoint)
	st, err := setupGuard(ctx, cfg, opts.Version, log)
	if err != nil {
		return err
	}
	g.Cleanup(func() { st.client.Close() })
	log.Info("guard mode: runtime connected", "endpoint", cfg.RuntimeEndpoint, "runtime", st.client.Runtime(),
		"cgroup_driver", st.driver, "kubepods", st.kube, "api_server", st.rc != nil, "node", st.node)
	if err := os.MkdirAll(cfg.RootDir, 0o750); err != nil {
		return fmt.Errorf("root dir: %w", err)
	}
	store, err := openStateStore(cfg.RootDir, log)
	if err != nil {
		return err
	}
	g.Cleanup(store.Close)
	policy, err := guardPolicy(cfg, st.kcs != nil, log)
	if err != nil {
		return err
	}
	actor, hard, err := d.startGuardActor(ctx, cfg, st, store)
	if err != nil {
		return err
	}

	fwd := newEventForwarder(1024, st.layout.Memory.ID)
	sf := d.senseFlags(sensingConfig{metricsAddr: cfg.MetricsAddr, profiling: cfg.EnableProfiling, kernel: cfg.Kernel, rootDir: cfg.RootDir},
		st.kube, st.driver, actor, fwd)
	sf.imageFS = "/var/lib/containerd"
	s, am, err := d.startSensing(ctx, sf, store, fwd, metrics.AgentSources{Eviction: !cfg.Eviction.Disabled,
		Guard: func() metrics.GuardCounts {
			c := actor.Counts()
			return metrics.GuardCounts{Pods: len(actor.Found()), Kills: c.Killed, Evictions: c.Evictions, Deletes: c.Deletes,
				Refused: c.Refused, APIErrors: c.APIErrors, KubeletEv: c.KubeletEvicting, Pending: c.Pending}
		}})
	if err != nil {
		return err
	}
	d.serveSensing(s)
	events := api.NewEventLog(4096)
	if !cfg.Eviction.Disabled {
		em, _, err := startEviction(g, evictionWiring{cfg: cfg.Eviction.Eviction, policy: policy, actor: actor,
			sensing: s, metrics: am.Eviction, events: events, fwd: fwd, layout: st.layout, kube: st.kube, rootDir: cfg.RootDir, store: store,
			wire: &d.wire, beats: &d.beats, log: log})
		if err != nil {
			return err
		}
		d.em.Store(em)
		d.beats = append(d.beats, evictionBeat(em, cfg.Eviction.Eviction))
	}
	status := func() string {
		c := actor.Counts()
		return fmt.Sprintf("guarding %d pods of the kubelet; %d killed, %d refused by budgets", len(actor.Found()), c.Killed, c.Refused)
	}
	onHUP := func() { log.Warn("SIGHUP: guard mode does not reload its configuration; restart it to apply a change") }
	return d.serve(ctx, status, "SIGHUP", onHUP, "kubepods", st.kube, "bpf", cfg.Kernel.BPF, "hard_action", hard,
		"thresholds", len(policy.Thresholds), "systemd_notify", n.enabled())
}

// guardPod is a line of `nodeguard guard pods`.
type guardPod struct {
	Namespace     string `json:"namespace"`
	Name          string `json:"name"`
	UID           string `json:"uid"`
	QOS           string `json:"qos"`
	Priority      int32  `json:"priority"`
	Critical      bool   `json:"critical"`
	MemoryRequest int64  `json:"memoryRequest"`
	PIDs          *int64 `json:"pids,omitempty"`
	// Source is where the figures came from: "api", or "node" (no API
	// server, or the pod is not listed there).
	Source string `json:"source"`
	Cgroup string `json:"cgroup"`
}

// GuardPods prints the kubelet's pods as guard mode finds them
// (`nodeguard guard pods`): a table, or JSON.
func GuardPods(ctx context.Context, cfg config.Guard, version string, log *slog.Logger, out io.Writer, asJSON bool) error {
	st, err := setupGuard(ctx, cfg, version, log)
	if err != nil {
		return err
	}
	defer st.client.Close()
	actor, err := guard.New(guard.Config{
		Finder: &guard.Finder{Runtime: st.client, Layout: st.layout, Driver: st.driver, Root: cfg.CgroupRoot},
		Client: st.kcs, NodeName: st.node, Exempt: cfg.Eviction.Exempt, Log: log,
	})
	if err != nil {
		return err
	}
	if err := actor.Sync(ctx); err != nil {
		return err
	}
	if st.kcs != nil {
		if err := actor.WaitAPI(ctx, 30*time.Second); err != nil {
			return err
		}
	}
	var rows []guardPod
	for _, r := range actor.Pods(false) {
		src := "node"
		if st.kcs != nil && actor.Listed(r.UID) {
			src = "api"
		}
		g := guardPod{Namespace: r.Namespace, Name: r.Name, UID: string(r.UID), QOS: string(r.QOS), Priority: r.Priority,
			Critical: r.Critical, MemoryRequest: r.MemoryRequest, Source: src, Cgroup: r.CgroupRel}
		if !r.PIDsUnknown {
			g.PIDs = &r.PIDs
		}
		rows = append(rows, g)
	}
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if rows == nil {
			rows = []guardPod{}
		}
		return enc.Encode(rows)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tUID\tQOS\tPRIORITY\tCRITICAL\tMEMORY REQUEST\tPIDS\tSOURCE\tCGROUP")
	for _, g := range rows {
		pids := "-"
		if g.PIDs != nil {
			pids = fmt.Sprint(*g.PIDs)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%v\t%d\t%s\t%s\t%s\n", g.Namespace, g.Name, g.UID, g.QOS, g.Priority, g.Critical,
			g.MemoryRequest, pids, g.Source, g.Cgroup)
	}
	return tw.Flush()
}
