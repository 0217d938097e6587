package main

// nodeguard bench eviction --kubeconfig: the OOM race on a real node,
// its pods through the API server (bench.RunKubeEviction): the kubelet
// alone, the kubelet with nodeguard guard beside it, and nodeguard in
// node mode, same pods and hogs, in one run.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// Bounds of the race's owners and its guard, under TCG.
const (
	// ownerReadyTimeout: an owner started (the kubelet's unit, nodeguard
	// in node mode) registers its Node and goes Ready.
	ownerReadyTimeout = 3 * time.Minute
	// unitTimeout bounds one systemctl call.
	unitTimeout = 2 * time.Minute
	// guardReadyTimeout: nodeguard guard logs "nodeguard guard running"
	// (its BPF programs loaded, the kubelet's pods listed).
	guardReadyTimeout = 3 * time.Minute
	// guardStopTimeout bounds SIGTERM -> exit, then it is killed.
	guardStopTimeout = 30 * time.Second
	// guardLineBuffer: guard log lines waiting for the strategy; beyond
	// it lines are dropped (written to its log file still), never
	// blocking the guard.
	guardLineBuffer = 4096
	// sandboxRemoveTimeout bounds removing what an owner left in the
	// runtime.
	sandboxRemoveTimeout = 2 * time.Minute
)

// kubeRaceOptions are the race's node through the API server.
type kubeRaceOptions struct {
	// kubeconfig is an admin's (it creates the race's pods and
	// Deployments, and is the guard's); node the Node's name.
	kubeconfig, node string
	// kubeletUnit is the kubelet's systemd unit, kubeletLogDir its pod
	// log directory (--pod-logs-dir; /var/log/pods).
	kubeletUnit, kubeletLogDir string
	// nodeConfig is a nodeguard run configuration for node mode on this
	// node (kubeconfig, nodeName, nodeIP, port, serving certificate...),
	// over which the race writes its runtime, cgroups, node allocatable
	// and threshold; empty: no nodeguard-node strategy.
	nodeConfig string
}

// runKubeRace prepares the node's owners and the guard, and runs
// RunKubeEviction.
func runKubeRace(ctx context.Context, o raceOptions, k kubeRaceOptions) (res raceResult, retErr error) {
	cfg := o.cfg
	if len(cfg.Strategies) == 0 {
		cfg.Strategies = bench.DefaultKubeStrategies
		if k.nodeConfig == "" {
			cfg.Strategies = cfg.Strategies[:2]
		}
	}
	res.cfg = cfg
	if k.node == "" {
		return res, errors.New("--node-name is required with --kubeconfig")
	}
	if o.endpoint == "" {
		return res, errors.New("--runtime-endpoint is required with --kubeconfig: the node's runtime")
	}
	layout, err := cgroups.Discover()
	if err != nil {
		return res, err
	}
	if err := bench.CheckBudget(nodestats.MeminfoPath, cfg.Budget); err != nil {
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
	res.layout = fmt.Sprintf("cgroups %s (memory on %s), %s driver, root %s, node %s", layout.Mode, memoryVersion(layout), d, o.root, k.node)
	cg, err := kubepods.New(ctx, layout, d, o.root, kubepods.Options{Log: o.log})
	if err != nil {
		return res, err
	}
	defer cg.Close()
	rc, err := clientcmd.BuildConfigFromFlags("", k.kubeconfig)
	if err != nil {
		return res, fmt.Errorf("kubeconfig %s: %w", k.kubeconfig, err)
	}
	kcs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return res, fmt.Errorf("API server: %w", err)
	}
	kp := &bench.KubePods{Client: kcs, Node: k.node}

	dir, err := os.MkdirTemp("", "nodeguard-kube-race-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	logDir := dir
	if o.agentLog != "" {
		logDir = filepath.Dir(o.agentLog)
	}
	owners := map[string]bench.KubeOwner{
		bench.OwnerKubelet: &kubeletOwner{unit: k.kubeletUnit, logDir: k.kubeletLogDir, pods: kp, runtime: client},
	}
	if k.nodeConfig != "" {
		base, err := os.ReadFile(k.nodeConfig)
		if err != nil {
			return res, fmt.Errorf("--node-config: %w", err)
		}
		conf, err := nodeModeRaceConfig(base, raceAgentConfig(mi.MemTotal, cfg.Budget, cfg.Threshold, false), o.endpoint, string(d), o.root)
		if err != nil {
			return res, fmt.Errorf("--node-config %s: %w", k.nodeConfig, err)
		}
		metricsAddr, err := freeLoopbackAddr()
		if err != nil {
			return res, err
		}
		ag, err := newAgentProcess(o.bin, dir, o.agentLog, []string{"--metrics-addr", metricsAddr})
		if err != nil {
			return res, err
		}
		defer func() { retErr = errors.Join(retErr, ag.close()) }()
		owners[bench.OwnerNodeguard] = &nodeAgentOwner{p: ag, conf: conf, logDir: filepath.Join(dir, "state", "logs"), pods: kp, runtime: client}
	}
	g := &guardDaemon{bin: o.bin, dir: dir, logPath: filepath.Join(logDir, "eviction-guard.log"), conf: map[string]any{
		"runtimeEndpoint": o.endpoint, "cgroupDriver": string(d), "cgroupRoot": o.root,
		"kubeconfig": k.kubeconfig, "nodeName": k.node, "rootDir": filepath.Join(dir, "guard-state"),
		"eviction": map[string]any{
			"evictionHard": map[string]string{string(nodestats.SignalMemoryAvailable): strconv.FormatUint(cfg.Threshold, 10)},
			"hardAction":   "delete",
		},
		"logging": map[string]any{"format": "json", "level": "info"},
	}}
	deps := bench.KubeStrategyDeps{KubeletLog: journalFollower(k.kubeletUnit), StartGuard: g.start}
	reg := bench.NewKubeEvictionStrategies(deps)
	fmt.Fprintf(o.progress, "race through the API server on node %s: kubelet unit %s (pod logs %s), guard log %s, node mode %v\n",
		k.node, k.kubeletUnit, k.kubeletLogDir, g.logPath, k.nodeConfig != "")
	start := time.Now()
	res.trials, err = bench.RunKubeEviction(ctx, bench.KubeRuntime{Pods: kp, Cgroups: cg, Owners: owners}, reg, cfg)
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
	pods         *bench.KubePods
	runtime      *cri.Client
}

func (o *kubeletOwner) LogDir() string { return o.logDir }

func (o *kubeletOwner) Take(ctx context.Context) error {
	if out, err := systemctlRun(ctx, "is-active", o.unit); err != nil || strings.TrimSpace(out) != "active" {
		if out, err := systemctlRun(ctx, "start", o.unit); err != nil {
			return fmt.Errorf("systemctl start %s: %w: %s", o.unit, err, out)
		}
	}
	_, err := o.pods.NodeReady(ctx, ownerReadyTimeout)
	return err
}

func (o *kubeletOwner) Release(ctx context.Context) error {
	if out, err := systemctlRun(ctx, "stop", o.unit); err != nil {
		return fmt.Errorf("systemctl stop %s: %w: %s", o.unit, err, out)
	}
	return errors.Join(removeSandboxes(ctx, o.runtime), o.pods.ForgetNode(ctx))
}

// nodeAgentOwner is nodeguard in node mode as the node's owner: `nodeguard
// run` from this binary, a child process with conf, its event log the
// nodeguard-node strategy's.
type nodeAgentOwner struct {
	p       *agentProcess
	conf    map[string]any
	logDir  string
	pods    *bench.KubePods
	runtime *cri.Client
}

func (o *nodeAgentOwner) LogDir() string { return o.logDir }

func (o *nodeAgentOwner) Take(ctx context.Context) error {
	if err := o.p.start(ctx, o.conf); err != nil {
		return err
	}
	_, err := o.pods.NodeReady(ctx, ownerReadyTimeout)
	return err
}

func (o *nodeAgentOwner) Release(ctx context.Context) error {
	return errors.Join(o.p.stop(), removeSandboxes(ctx, o.runtime), o.pods.ForgetNode(ctx))
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

func systemctlRun(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, unitTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	return string(out), err
}

// journalFollower follows unit's journal from since (a second before,
// whole seconds), its messages only: the kubelet's klog lines.
func journalFollower(unit string) bench.KubeletLog {
	return func(ctx context.Context, since time.Time) (io.ReadCloser, error) {
		cmd := exec.CommandContext(ctx, "journalctl", "-u", unit, "-f", "-o", "cat", "--no-pager",
			"--since", "@"+strconv.FormatInt(since.Unix()-1, 10))
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("journalctl: %w", err)
		}
		return &procReader{r: out, cmd: cmd}, nil
	}
}

// procReader is a child's stdout; Close ends the child (by its pid) and
// waits for it.
type procReader struct {
	r    io.Reader
	cmd  *exec.Cmd
	once sync.Once
}

func (p *procReader) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *procReader) Close() error {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	})
	return nil
}

// guardDaemon starts `nodeguard guard` from this binary for a trial: its
// configuration written to dir, its output appended to logPath and
// handed to the strategy line by line.
type guardDaemon struct {
	bin, dir, logPath string
	conf              map[string]any
}

// start implements bench.GuardStarter.
func (g *guardDaemon) start(ctx context.Context) (<-chan string, func() error, error) {
	metricsAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, nil, err
	}
	g.conf["metricsAddr"] = metricsAddr
	b, err := yaml.Marshal(g.conf)
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(g.dir, "guard.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, nil, err
	}
	logf, err := os.OpenFile(g.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("guard log: %w", err)
	}
	args := []string{"guard", "--config", path}
	fmt.Fprintf(logf, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), g.bin, strings.Join(args, " "))
	cmd := exec.Command(g.bin, args...)
	// Not journald's stream: the guard would leave out its lines' times.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "JOURNAL_STREAM=") && !strings.HasPrefix(e, "NOTIFY_SOCKET=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		// The death signal is the starting thread's: locked for the
		// child's life (see agentProcess.start).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(exited)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		pr.Close()
		pw.Close()
		logf.Close()
		return nil, nil, fmt.Errorf("start nodeguard guard: %w", err)
	}
	pw.Close()
	lines := make(chan string, guardLineBuffer)
	running := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			l := sc.Text()
			fmt.Fprintln(logf, l)
			if !seen && strings.Contains(l, `"msg":"nodeguard guard running"`) {
				seen = true
				close(running)
			}
			select {
			case lines <- l:
			default: // never block the guard; the line is in its log
			}
		}
	}()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case <-exited:
		case <-time.After(guardStopTimeout):
			_ = cmd.Process.Kill()
			<-exited
			err = fmt.Errorf("nodeguard guard did not stop within %v of SIGTERM; killed", guardStopTimeout)
		}
		<-readDone
		pr.Close()
		logf.Close()
		return err
	}
	select {
	case <-running:
		return lines, stop, nil
	case <-exited:
		err = fmt.Errorf("nodeguard guard exited before it ran (%s); see %s", cmd.ProcessState, g.logPath)
	case <-time.After(guardReadyTimeout):
		err = fmt.Errorf("nodeguard guard not running after %v; see %s", guardReadyTimeout, g.logPath)
	case <-ctx.Done():
		err = ctx.Err()
	}
	return nil, nil, errors.Join(err, stop())
}

// writeKubeEvictionReport is writeEvictionReport for the race through the
// API server: the detection ratios and targets of the kubelet's two
// companions.
func writeKubeEvictionReport(w io.Writer, res raceResult) {
	cfg := res.cfg
	rows := bench.SummarizeEviction(res.trials)
	fmt.Fprintf(w, "\nOOM race through the API server: budget %s, threshold %s, %d trials in %s; %s; %s; load average %s\n",
		bench.FormatBytes(cfg.Budget), bench.FormatBytes(cfg.Threshold), len(res.trials), res.took.Round(time.Second),
		res.runtime, res.layout, loadAverage())
	bench.WriteEvictionTable(w, rows)
	for _, s := range []string{bench.StrategyKubeletGuard, bench.StrategyNodeguardNode} {
		ratios := bench.DetectionRatio(rows, bench.StrategyKubeletReal, s)
		for _, r := range cfg.Rates {
			if x, ok := ratios[r]; ok {
				fmt.Fprintf(w, "detection p50 kubelet / %s at %s = %.0fx\n", s, bench.FormatRate(r), x)
			}
		}
		bench.WriteEvictionTargets(w, rows, s)
	}
	fmt.Fprintf(w, "latencies: detection after the ground-truth crossing, kill after detection (the kubelet's: the hog container's end), release after kill; replaced: the hog Deployment's new pod ran (strategies: %s)\n", strings.Join(cfg.Strategies, ", "))
}
