package bench

// nodeguard bench eviction: the OOM race on the real agent, `nodeguard
// run` from the nodeguard binary as a child process (bench/agentproc), on
// the private test containerd or a given runtime (RunEviction), or on a
// real node through the API server (eviction_kube_bench.go).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nodeguard/nodeguard/bench/agentproc"
	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// EvictionOptions is one run of `nodeguard bench eviction`.
type EvictionOptions struct {
	// Config is the scenario; its Log and Progress are set here.
	Config EvictionConfig
	// Bin is the nodeguard binary the agent (and the guard) start from;
	// empty is this process's executable.
	Bin string
	// Endpoint is the runtime's CRI socket; empty starts the private test
	// containerd. Driver and Root are its cgroup driver and the absolute
	// cgroup root of kubepods (with an Endpoint).
	Endpoint, Driver, Root string
	// OutDir, when set, gets eviction.csv, eviction.png and the agent's
	// log (eviction-agent.log; and eviction-guard.log through the API
	// server).
	OutDir string
	// Kube, with a Kubeconfig, races on a real node through the API
	// server instead.
	Kube KubeRaceOptions
	Log  *slog.Logger
	// Report gets the report and the files written; Progress a line per
	// step.
	Report, Progress io.Writer
}

// EvictionBench runs the OOM race and writes its report (also when the
// race ended in an error after some trials).
func EvictionBench(ctx context.Context, o EvictionOptions) error {
	ro := raceOptions{cfg: o.Config, bin: o.Bin, endpoint: o.Endpoint, driver: o.Driver, root: o.Root, log: o.Log, progress: o.Progress}
	ro.cfg.Log, ro.cfg.Progress = o.Log, o.Progress
	if ro.bin == "" {
		bin, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary: %w", err)
		}
		ro.bin = bin
	}
	if o.OutDir != "" {
		if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", o.OutDir, err)
		}
		ro.agentLog = filepath.Join(o.OutDir, "eviction-agent.log")
	}
	var (
		res    raceResult
		runErr error
	)
	kube := o.Kube.Kubeconfig != ""
	if kube {
		res, runErr = runKubeRace(ctx, ro, o.Kube)
	} else {
		res, runErr = runRace(ctx, ro)
	}
	if len(res.trials) == 0 {
		return runErr
	}
	if kube {
		writeKubeEvictionReport(o.Report, res)
	} else {
		writeEvictionReport(o.Report, res)
	}
	if o.OutDir != "" {
		if err := writeEvictionFiles(o.OutDir, res.trials); err != nil {
			runErr = errors.Join(runErr, err)
		} else {
			fmt.Fprintf(o.Report, "wrote %s, %s and %s\n", filepath.Join(o.OutDir, "eviction.csv"), filepath.Join(o.OutDir, "eviction.png"), ro.agentLog)
		}
	}
	return runErr
}

// raceOptions is one OOM race: the scenario, the binary whose agent races,
// and where its pods run.
type raceOptions struct {
	cfg EvictionConfig
	// bin is the nodeguard binary the agent is started from.
	bin string
	// endpoint is the runtime's CRI socket; empty starts the private
	// containerd. driver and root are its cgroup driver and the absolute
	// cgroup root (ignored without an endpoint).
	endpoint, driver, root string
	// agentLog is where the agent's output goes (empty: a temporary
	// file, removed).
	agentLog string
	log      *slog.Logger
	progress io.Writer
}

// raceResult is what a race measured, with what the report prints of its
// setting.
type raceResult struct {
	cfg     EvictionConfig
	trials  []EvictionTrial
	took    time.Duration
	runtime string // the runtime's name and version
	layout  string // the cgroup mode and driver
}

// runRace prepares the runtime (the private containerd, or checks the
// given one), the pod cgroups' names, and the agent, and runs the race.
func runRace(ctx context.Context, o raceOptions) (res raceResult, retErr error) {
	cfg := o.cfg
	res.cfg = cfg
	layout, err := cgroups.Discover()
	if err != nil {
		return res, err
	}
	if len(cfg.Strategies) == 0 {
		cfg.Strategies = DefaultStrategies(layout.Memory.V2())
	}
	reg := NewEvictionStrategies()
	for _, s := range cfg.Strategies {
		if _, err := reg.New(s); err != nil {
			return res, err
		}
		if s == StrategyKubeletMemcg && layout.Memory.V2() {
			return res, fmt.Errorf("strategy %s: %w", s, ErrMemcgNotifierV2)
		}
	}
	res.cfg = cfg
	if err := CheckBudget(nodestats.MeminfoPath, cfg.Budget); err != nil {
		return res, err
	}
	mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath)
	if err != nil {
		return res, err
	}
	if cfg.Budget >= mi.MemTotal {
		return res, fmt.Errorf("budget %s is not below MemTotal (%s)", FormatBytes(cfg.Budget), FormatBytes(mi.MemTotal))
	}
	cfg.HogImage, cfg.BusyboxImage = images.HogName, images.BusyboxName

	endpoint, driver, root := o.endpoint, o.driver, o.root
	var (
		env    *crienv.Env
		client *cri.Client
	)
	if endpoint == "" {
		fmt.Fprintln(o.progress, "starting the private containerd")
		if env, err = crienv.Start(ctx, crienv.Options{Log: o.log}); err != nil {
			return res, err
		}
		defer func() { retErr = errors.Join(retErr, env.Close()) }()
		endpoint, driver, root = env.Endpoint(), string(kubepods.Cgroupfs), env.CgroupParent()
		cfg.BusyboxImage = env.BusyboxImage()
		if client, err = dialCRI(ctx, endpoint); err != nil {
			return res, err
		}
		defer client.Close()
		set, err := images.Cached(ctx, images.CacheDir(), o.log)
		if err != nil {
			return res, err
		}
		if err := ImportImage(ctx, client, env.Socket(), set.Hog); err != nil {
			return res, err
		}
	} else {
		if !path.IsAbs(root) {
			return res, fmt.Errorf("--cgroup-root %q: with --runtime-endpoint the root must be absolute (the runtime resolves a relative one against its own cgroup)", root)
		}
		if client, err = dialCRI(ctx, endpoint); err != nil {
			return res, err
		}
		defer client.Close()
		if err := checkRaceRuntime(ctx, client, endpoint, cfg.HogImage, cfg.BusyboxImage); err != nil {
			return res, err
		}
	}
	res.runtime = fmt.Sprintf("%s %s", client.Runtime().Name, client.Runtime().Version)
	d, err := kubepods.ParseDriver(driver)
	if err != nil {
		return res, err
	}
	res.layout = fmt.Sprintf("cgroups %s (memory on %s), %s driver, root %s", layout.Mode, memoryVersion(layout), d, root)
	// The agent makes and limits the pod cgroups; this Manager only names,
	// reads and kills them.
	cg, err := kubepods.New(ctx, layout, d, root, kubepods.Options{Log: o.log})
	if err != nil {
		return res, err
	}
	defer cg.Close()

	dir, err := os.MkdirTemp("", "nodeguard-race-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	metricsAddr, err := agentproc.FreeLoopbackAddr()
	if err != nil {
		return res, err
	}
	ag, err := agentproc.New(o.bin, dir, o.agentLog, []string{"--runtime-endpoint", endpoint,
		"--cgroup-driver", string(d), "--cgroup-root", root, "--metrics-addr", metricsAddr})
	if err != nil {
		return res, err
	}
	defer func() { retErr = errors.Join(retErr, ag.Close()) }()
	agent := &raceAgent{p: ag, conf: func(evicting bool) map[string]any {
		c := RaceAgentConfig(mi.MemTotal, cfg.Budget, cfg.Threshold, !evicting)
		if env != nil {
			c["network"] = agentproc.PrivateNetwork(env)
		}
		return c
	}}
	fmt.Fprintf(o.progress, "agent: %s run, state under %s, log %s\n", o.bin, dir, ag.LogPath())
	start := time.Now()
	rt := EvictionRuntime{
		Pods:    APIPods{Client: func() PodClient { return ag.Client() }},
		Cgroups: cg, LogDir: filepath.Join(dir, "state", "logs"), Agent: agent,
	}
	res.trials, err = RunEviction(ctx, rt, reg, cfg)
	res.took = time.Since(start)
	res.cfg = cfg
	if o.endpoint != "" {
		// Our cgroup root on someone else's runtime: remove it once the
		// agent is gone (the private runtime's Close removes its own).
		if serr := ag.Stop(); serr != nil {
			err = errors.Join(err, serr)
		} else if rerr := cg.RemoveRoot(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return res, err
}

// RaceAgentConfig is the agent's configuration for the race: the shipped
// defaults, except node allocatable (systemReserved memory so that
// capacity - reserved is the budget) and the hard memory threshold (the
// default evictionHard with memory.available at the race's threshold,
// which enforceNodeAllocatable copies to allocatableMemory.available);
// eviction.disabled for the baselines.
func RaceAgentConfig(memTotal, budget, threshold uint64, evictionDisabled bool) map[string]any {
	hard := eviction.DefaultEvictionHard()
	hard[string(nodestats.SignalMemoryAvailable)] = strconv.FormatUint(threshold, 10)
	return map[string]any{
		"systemReserved": map[string]string{"memory": strconv.FormatUint(memTotal-budget, 10)},
		"eviction":       map[string]any{"evictionHard": hard, "disabled": evictionDisabled},
	}
}

// raceAgent is the race's EvictionAgent: the agent process, started with
// eviction on or off.
type raceAgent struct {
	p    *agentproc.Agent
	conf func(evicting bool) map[string]any
}

func (a *raceAgent) Restart(ctx context.Context, evicting bool) error {
	if err := a.p.Stop(); err != nil {
		return err
	}
	return a.p.Start(ctx, a.conf(evicting))
}

func (a *raceAgent) Events(ctx context.Context, since uint64, wait time.Duration) ([]api.Event, error) {
	return a.p.Client().Events(ctx, since, wait)
}

// checkRaceRuntime makes sure a runtime the race did not start has the
// images and runs no pod: the race's agent takes over the pod root, and
// would remove sandboxes it does not know (another nodeguard's) or limit a
// kubelet's pods to the budget.
func checkRaceRuntime(ctx context.Context, client *cri.Client, endpoint string, refs ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, ref := range refs {
		if _, err := client.ImageStatus(ctx, ref); err != nil {
			return fmt.Errorf("the runtime at %s has no %s (build the images with go run ./lab/images/cmd/mkimages and import them with ctr -n k8s.io images import): %w",
				endpoint, ref, err)
		}
	}
	sbs, err := client.ListAllPodSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("list the pod sandboxes at %s: %w", endpoint, err)
	}
	if len(sbs) > 0 {
		var names []string
		for _, sb := range sbs {
			if m := sb.GetMetadata(); m != nil {
				names = append(names, m.GetNamespace()+"/"+m.GetName())
			}
		}
		slices.Sort(names)
		return fmt.Errorf("the runtime at %s runs %d pod sandboxes (%s): the race needs a node of its own, its agent takes over the pod cgroups (stop the kubelet or nodeguard and remove them first)",
			endpoint, len(sbs), strings.Join(names, ", "))
	}
	return nil
}

func memoryVersion(l *cgroups.Layout) string {
	if l.Memory.V2() {
		return "v2"
	}
	return "v1"
}

// loadAverage is /proc/loadavg's first three figures, for the report.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func writeEvictionReport(w io.Writer, res raceResult) {
	cfg := res.cfg
	rows := SummarizeEviction(res.trials)
	fmt.Fprintf(w, "\nOOM race: budget %s, threshold %s, %d trials in %s; %s; %s; load average %s\n",
		FormatBytes(cfg.Budget), FormatBytes(cfg.Threshold), len(res.trials), res.took.Round(time.Second),
		res.runtime, res.layout, loadAverage())
	WriteEvictionTable(w, rows)
	ratios := DetectionRatio(rows, StrategyKubelet, StrategyNodeguard)
	for _, r := range cfg.Rates {
		if x, ok := ratios[r]; ok {
			fmt.Fprintf(w, "detection p50 kubelet / nodeguard at %s = %.0fx\n", FormatRate(r), x)
		}
	}
	WriteEvictionTargets(w, rows, StrategyNodeguard)
	fmt.Fprintf(w, "latencies: detection after the ground-truth crossing, kill after detection, release after kill (strategies: %s)\n", strings.Join(cfg.Strategies, ", "))
}

func writeEvictionFiles(dir string, trials []EvictionTrial) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, "eviction.csv")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := errors.Join(WriteEvictionCSV(f, trials), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return EvictionPNG(filepath.Join(dir, "eviction.png"), trials)
}
