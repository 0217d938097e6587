package bench

// nodeguard bench eviction --kubeconfig: the OOM race on a real node, its
// pods through the API server (RunKubeEviction): the kubelet alone, the
// kubelet with nodeguard guard beside it, and nodeguard in node mode, same
// pods and hogs, in one run.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/bench/agentproc"
	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// Bounds of the race's owners, under TCG.
const (
	// ownerReadyTimeout: an owner started (the kubelet's unit, nodeguard
	// in node mode) registers its Node and goes Ready.
	ownerReadyTimeout = 3 * time.Minute
	// sandboxRemoveTimeout bounds removing what an owner left in the
	// runtime.
	sandboxRemoveTimeout = 2 * time.Minute
)

// KubeRaceOptions are the race's node through the API server.
type KubeRaceOptions struct {
	// Kubeconfig is an admin's (it creates the race's pods and
	// Deployments, and is the guard's); Node the Node's name.
	Kubeconfig, Node string
	// KubeletUnit is the kubelet's systemd unit, KubeletLogDir its pod
	// log directory (--pod-logs-dir; /var/log/pods).
	KubeletUnit, KubeletLogDir string
	// NodeConfig is a nodeguard run configuration for node mode on this
	// node (kubeconfig, nodeName, nodeIP, port, serving certificate...),
	// over which the race writes its runtime, cgroups, node allocatable
	// and threshold; empty: no nodeguard-node strategy.
	NodeConfig string
}

// runKubeRace prepares the node's owners and the guard, and runs
// RunKubeEviction.
func runKubeRace(ctx context.Context, o raceOptions, k KubeRaceOptions) (res raceResult, retErr error) {
	cfg := o.cfg
	if len(cfg.Strategies) == 0 {
		cfg.Strategies = DefaultKubeStrategies
		if k.NodeConfig == "" {
			cfg.Strategies = cfg.Strategies[:2]
		}
	}
	res.cfg = cfg
	if k.Node == "" {
		return res, errors.New("--node-name is required with --kubeconfig")
	}
	if o.endpoint == "" {
		return res, errors.New("--runtime-endpoint is required with --kubeconfig: the node's runtime")
	}
	layout, err := cgroups.Discover()
	if err != nil {
		return res, err
	}
	if err := CheckBudget(nodestats.MeminfoPath, cfg.Budget); err != nil {
		return res, err
	}
	mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath)
	if err != nil {
		return res, err
	}
	cfg.HogImage, cfg.BusyboxImage = images.HogName, images.BusyboxName
	client, err := dialCRI(ctx, o.endpoint)
	if err != nil {
		return res, err
	}
	defer client.Close()
	for _, ref := range []string{cfg.HogImage, cfg.BusyboxImage} {
		ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := client.ImageStatus(ictx, ref)
		cancel()
		if err != nil {
			return res, fmt.Errorf("the runtime at %s has no %s (the race pulls nothing): %w", o.endpoint, ref, err)
		}
	}
	res.runtime = fmt.Sprintf("%s %s", client.Runtime().Name, client.Runtime().Version)
	d, err := kubepods.ParseDriver(o.driver)
	if err != nil {
		return res, err
	}
	res.layout = fmt.Sprintf("cgroups %s (memory on %s), %s driver, root %s, node %s", layout.Mode, memoryVersion(layout), d, o.root, k.Node)
	cg, err := kubepods.New(ctx, layout, d, o.root, kubepods.Options{Log: o.log})
	if err != nil {
		return res, err
	}
	defer cg.Close()
	rc, err := clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	if err != nil {
		return res, fmt.Errorf("kubeconfig %s: %w", k.Kubeconfig, err)
	}
	kcs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return res, fmt.Errorf("API server: %w", err)
	}
	kp := &KubePods{Client: kcs, Node: k.Node}

	dir, err := os.MkdirTemp("", "nodeguard-kube-race-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	logDir := dir
	if o.agentLog != "" {
		logDir = filepath.Dir(o.agentLog)
	}
	owners := map[string]KubeOwner{
		OwnerKubelet: &kubeletOwner{unit: k.KubeletUnit, logDir: k.KubeletLogDir, pods: kp, runtime: client},
	}
	if k.NodeConfig != "" {
		base, err := os.ReadFile(k.NodeConfig)
		if err != nil {
			return res, fmt.Errorf("--node-config: %w", err)
		}
		conf, err := nodeModeRaceConfig(base, RaceAgentConfig(mi.MemTotal, cfg.Budget, cfg.Threshold, false), o.endpoint, string(d), o.root)
		if err != nil {
			return res, fmt.Errorf("--node-config %s: %w", k.NodeConfig, err)
		}
		metricsAddr, err := agentproc.FreeLoopbackAddr()
		if err != nil {
			return res, err
		}
		ag, err := agentproc.New(o.bin, dir, o.agentLog, []string{"--metrics-addr", metricsAddr})
		if err != nil {
			return res, err
		}
		defer func() { retErr = errors.Join(retErr, ag.Close()) }()
		owners[OwnerNodeguard] = &nodeAgentOwner{p: ag, conf: conf, logDir: filepath.Join(dir, "state", "logs"), pods: kp, runtime: client}
	}
	g := &agentproc.Guard{Bin: o.bin, Dir: dir, LogPath: filepath.Join(logDir, "eviction-guard.log"), Conf: map[string]any{
		"runtimeEndpoint": o.endpoint, "cgroupDriver": string(d), "cgroupRoot": o.root,
		"kubeconfig": k.Kubeconfig, "nodeName": k.Node, "rootDir": filepath.Join(dir, "guard-state"),
		"eviction": map[string]any{
			"evictionHard": map[string]string{string(nodestats.SignalMemoryAvailable): strconv.FormatUint(cfg.Threshold, 10)},
			"hardAction":   "delete",
		},
		"logging": map[string]any{"format": "json", "level": "info"},
	}}
	deps := KubeStrategyDeps{KubeletLog: agentproc.FollowJournal(k.KubeletUnit), StartGuard: g.Start}
	reg := NewKubeEvictionStrategies(deps)
	fmt.Fprintf(o.progress, "race through the API server on node %s: kubelet unit %s (pod logs %s), guard log %s, node mode %v\n",
		k.Node, k.KubeletUnit, k.KubeletLogDir, g.LogPath, k.NodeConfig != "")
	start := time.Now()
	res.trials, err = RunKubeEviction(ctx, KubeRuntime{Pods: kp, Cgroups: cg, Owners: owners}, reg, cfg)
	res.took = time.Since(start)
	res.cfg = cfg
	return res, err
}

// nodeModeRaceConfig is the node-mode configuration base with the race's
// runtime, cgroups and the race's settings (systemReserved, eviction)
// written over it; the base's other eviction keys stay.
func nodeModeRaceConfig(base []byte, race map[string]any, endpoint, driver, root string) (map[string]any, error) {
	var conf map[string]any
	if err := yaml.Unmarshal(base, &conf); err != nil {
		return nil, err
	}
	if conf == nil {
		conf = map[string]any{}
	}
	if _, ok := conf["kubeconfig"]; !ok {
		return nil, errors.New("no kubeconfig: not a node-mode configuration")
	}
	conf["runtimeEndpoint"], conf["cgroupDriver"], conf["cgroupRoot"] = endpoint, driver, root
	conf["systemReserved"] = race["systemReserved"]
	ev, _ := conf["eviction"].(map[string]any)
	if ev == nil {
		ev = map[string]any{}
	}
	for k, v := range race["eviction"].(map[string]any) {
		ev[k] = v
	}
	conf["eviction"] = ev
	return conf, nil
}

// kubeletOwner is the kubelet as the node's owner: its systemd unit,
// started if it is not running (a unit the race can start), stopped when
// node mode takes over.
type kubeletOwner struct {
	unit, logDir string
	pods         *KubePods
	runtime      *cri.Client
}

func (o *kubeletOwner) LogDir() string { return o.logDir }

func (o *kubeletOwner) Take(ctx context.Context) error {
	if out, err := agentproc.Systemctl(ctx, "is-active", o.unit); err != nil || strings.TrimSpace(out) != "active" {
		if out, err := agentproc.Systemctl(ctx, "start", o.unit); err != nil {
			return fmt.Errorf("systemctl start %s: %w: %s", o.unit, err, out)
		}
	}
	_, err := o.pods.NodeReady(ctx, ownerReadyTimeout)
	return err
}

func (o *kubeletOwner) Release(ctx context.Context) error {
	if out, err := agentproc.Systemctl(ctx, "stop", o.unit); err != nil {
		return fmt.Errorf("systemctl stop %s: %w: %s", o.unit, err, out)
	}
	return errors.Join(removeSandboxes(ctx, o.runtime), o.pods.ForgetNode(ctx))
}

// nodeAgentOwner is nodeguard in node mode as the node's owner: `nodeguard
// run` from the nodeguard binary, a child process with conf, its event log
// the nodeguard-node strategy's.
type nodeAgentOwner struct {
	p       *agentproc.Agent
	conf    map[string]any
	logDir  string
	pods    *KubePods
	runtime *cri.Client
}

func (o *nodeAgentOwner) LogDir() string { return o.logDir }

func (o *nodeAgentOwner) Take(ctx context.Context) error {
	if err := o.p.Start(ctx, o.conf); err != nil {
		return err
	}
	_, err := o.pods.NodeReady(ctx, ownerReadyTimeout)
	return err
}

func (o *nodeAgentOwner) Release(ctx context.Context) error {
	return errors.Join(o.p.Stop(), removeSandboxes(ctx, o.runtime), o.pods.ForgetNode(ctx))
}

func (o *nodeAgentOwner) Events(ctx context.Context, since uint64, wait time.Duration) ([]api.Event, error) {
	c := o.p.Client()
	if c == nil {
		return nil, errors.New("nodeguard in node mode is not running")
	}
	return c.Events(ctx, since, wait)
}

// removeSandboxes stops and removes every sandbox the runtime still has:
// what the last owner left (the kubelet leaves its stopped sandboxes to
// its garbage collector), so that the next starts clean.
func removeSandboxes(ctx context.Context, c *cri.Client) error {
	ctx, cancel := context.WithTimeout(ctx, sandboxRemoveTimeout)
	defer cancel()
	sbs, err := c.ListAllPodSandboxes(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, sb := range sbs {
		if err := c.StopPodSandbox(ctx, sb.GetId()); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := c.RemovePodSandbox(ctx, sb.GetId()); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeKubeEvictionReport is writeEvictionReport for the race through the
// API server: the detection ratios and targets of the kubelet's two
// companions.
func writeKubeEvictionReport(w io.Writer, res raceResult) {
	cfg := res.cfg
	rows := SummarizeEviction(res.trials)
	fmt.Fprintf(w, "\nOOM race through the API server: budget %s, threshold %s, %d trials in %s; %s; %s; load average %s\n",
		FormatBytes(cfg.Budget), FormatBytes(cfg.Threshold), len(res.trials), res.took.Round(time.Second),
		res.runtime, res.layout, loadAverage())
	WriteEvictionTable(w, rows)
	for _, s := range []string{StrategyKubeletGuard, StrategyNodeguardNode} {
		ratios := DetectionRatio(rows, StrategyKubeletReal, s)
		for _, r := range cfg.Rates {
			if x, ok := ratios[r]; ok {
				fmt.Fprintf(w, "detection p50 kubelet / %s at %s = %.0fx\n", s, FormatRate(r), x)
			}
		}
		WriteEvictionTargets(w, rows, s)
	}
	fmt.Fprintf(w, "latencies: detection after the ground-truth crossing, kill after detection (the kubelet's: the hog container's end), release after kill; replaced: the hog Deployment's new pod ran (strategies: %s)\n", strings.Join(cfg.Strategies, ", "))
}
