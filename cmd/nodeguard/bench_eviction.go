package main

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

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/oom"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

func newBenchEvictionCmd(g *globalFlags) *cobra.Command {
	var (
		budget, threshold, rates, out string
		o                             raceOptions
		strategies                    []string
		trials                        int
		quick                         bool
		seed                          uint64
		kube                          kubeRaceOptions
	)
	cmd := &cobra.Command{
		Use:   "eviction",
		Short: "The OOM race: how soon each strategy detects a hog, and whether its eviction beats the kernel's OOM killer",
		Long: `Starts the real agent, "nodeguard run" from this binary, as a child process
with the shipped defaults changed only where the race needs it: its runtime
endpoint, root dir, API socket, metrics address (a free loopback port),
cgroup driver and root; systemReserved memory = MemTotal - budget, so that node
allocatable, enforced on kubepods, is the budget; evictionHard with
memory.available at the threshold (copied to allocatableMemory.available by
enforceNodeAllocatable: pods), the other defaults kept. The pods run on that
agent, applied through its API: background pods of every QoS class (idle,
and busy ones rewriting their memory), then for every rate, trial and
strategy a BestEffort hog that allocates at that rate and reports its
progress in its container log. The ground truth "crossed" is the first
progress line where the baseline working set plus the hog's allocation
reaches budget - threshold.

Strategies: nodeguard (the agent's own eviction manager: its tripwire, sensor,
eBPF pipeline, policy and pod manager decide and kill; detection is the
observation its decision was confirmed on, read from its event log), and,
on the same agent with eviction.disabled (restarted between the two modes;
it adopts the running pods), the baselines, which kill the kubelet's memory
ranking's first pod through its pod cgroup and delete it through the
agent's API: kubelet (allocatableMemory.available polled every 10 s at a
random phase), kubelet-memcg (cgroup v1 only: the kubelet with
--kernel-memcg-notification, a memcg usage threshold on kubepods at
capacity - threshold + inactive_file, re-set by a synchronize at most every
10 s, each notification a synchronize on fresh statistics), poll1s (the
same poll every second), psi (a memory PSI trigger, some 150ms/1s, 2 s
windows without CAP_SYS_RESOURCE).

Without --runtime-endpoint it starts the private test containerd (its own
network namespace, local images) and removes it after; the pods' cgroup
root is then relative (beneath this process's cgroup, which the runtime
shares). With --runtime-endpoint (a node's containerd, e.g. in a VM) give
the runtime's --cgroup-driver and an absolute --cgroup-root (default /):
the runtime must have the hog and busybox images (go run
./lab/images/cmd/mkimages, then ctr -n k8s.io images import) and run
no pod sandbox, since the race's agent takes over <root>/kubepods. The
budget may not exceed half of MemAvailable. --out DIR writes eviction.csv,
eviction.png and the agent's log (eviction-agent.log).

With --kubeconfig (an admin's) and --node-name, the race runs on a real
node through the API server instead (run it on that node): the same
background pods, bound to the node, and each trial's hog a Deployment of one
replica, run by the node's owner. Strategies: kubelet (the kubelet's unit,
--kubelet-unit, alone: detection is its eviction manager's "attempting to
reclaim" memory line, the kill the hog container's end), kubelet+guard
(nodeguard guard from this binary started beside it for each trial, its
threshold the race's; whichever acts first), nodeguard-node (with
--node-config, a node-mode configuration of nodeguard run: the kubelet is
stopped, the Node forgotten, and nodeguard runs the node from this binary
as a child). The kubelet must already run with systemReserved memory =
MemTotal - budget and evictionHard memory.available at the threshold (the
race checks kubepods' limit); the race removes its pods after each owner,
and keeps node mode last. Ground truth is the hog's CRI log on the node.
--out also gets eviction-guard.log.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			o.log, o.progress = log, cmd.ErrOrStderr()
			o.cfg = bench.EvictionConfig{Trials: trials, Strategies: strategies, Step: 1 << 20, Seed: seed, Log: log, Progress: o.progress}
			if quick {
				if !cmd.Flags().Changed("rates") {
					rates = bench.QuickEvictionRates
				}
				if !cmd.Flags().Changed("trials") {
					o.cfg.Trials = bench.QuickEvictionTrials
				}
			}
			if o.cfg.Budget, err = bench.ParseBytes(budget); err != nil {
				return fmt.Errorf("--budget: %w", err)
			}
			if o.cfg.Threshold, err = bench.ParseThreshold(threshold, o.cfg.Budget); err != nil {
				return fmt.Errorf("--threshold: %w", err)
			}
			if o.cfg.Rates, err = bench.ParseRates(rates); err != nil {
				return fmt.Errorf("--rates: %w", err)
			}
			if o.cfg.Trials <= 0 {
				return errors.New("--trials must be positive")
			}
			if o.bin, err = os.Executable(); err != nil {
				return fmt.Errorf("find this binary: %w", err)
			}
			if out != "" {
				if err := os.MkdirAll(out, 0o755); err != nil {
					return fmt.Errorf("create %s: %w", out, err)
				}
				o.agentLog = filepath.Join(out, "eviction-agent.log")
			}
			var (
				res    raceResult
				runErr error
			)
			if kube.kubeconfig != "" {
				res, runErr = runKubeRace(cmd.Context(), o, kube)
			} else {
				res, runErr = runRace(cmd.Context(), o)
			}
			if len(res.trials) > 0 {
				if kube.kubeconfig != "" {
					writeKubeEvictionReport(cmd.OutOrStdout(), res)
				} else {
					writeEvictionReport(cmd.OutOrStdout(), res)
				}
				if out != "" {
					if err := writeEvictionFiles(out, res.trials); err != nil {
						runErr = errors.Join(runErr, err)
					} else {
						fmt.Fprintf(cmd.OutOrStdout(), "wrote %s, %s and %s\n", filepath.Join(out, "eviction.csv"), filepath.Join(out, "eviction.png"), o.agentLog)
					}
				}
			}
			return runErr
		},
	}
	cmd.Flags().StringVar(&budget, "budget", "1Gi", "node allocatable: the pod root's hard memory limit (systemReserved is MemTotal minus it)")
	cmd.Flags().StringVar(&threshold, "threshold", bench.DefaultEvictionThreshold, "eviction threshold on allocatableMemory.available: a quantity (100Mi) or a percentage of the budget (10%)")
	cmd.Flags().StringVar(&rates, "rates", bench.DefaultEvictionRates, "hog allocation rates, comma-separated")
	cmd.Flags().IntVar(&trials, "trials", 3, "trials per rate and strategy")
	cmd.Flags().StringSliceVar(&strategies, "strategies", nil, "strategies to race (default "+strings.Join(bench.DefaultStrategyNames, ",")+"; kubelet-memcg only where memory is on cgroup v1)")
	cmd.Flags().BoolVar(&quick, "quick", false, "CI run: rates "+bench.QuickEvictionRates+", "+fmt.Sprint(bench.QuickEvictionTrials)+" trials (unless given)")
	cmd.Flags().Uint64Var(&seed, "seed", uint64(time.Now().UnixNano()), "seed of the pollers' random phases")
	cmd.Flags().StringVar(&o.endpoint, "runtime-endpoint", "", "CRI socket of the runtime to race on; empty starts the private test containerd")
	cmd.Flags().StringVar(&o.driver, "cgroup-driver", string(kubepods.Cgroupfs), "the runtime's cgroup driver, cgroupfs or systemd (with --runtime-endpoint)")
	cmd.Flags().StringVar(&o.root, "cgroup-root", "/", "absolute cgroup root of kubepods (with --runtime-endpoint)")
	cmd.Flags().StringVar(&out, "out", "", "directory for eviction.csv, eviction.png and eviction-agent.log")
	cmd.Flags().StringVar(&kube.kubeconfig, "kubeconfig", "", "race on a real node through the API server with this (admin) kubeconfig")
	cmd.Flags().StringVar(&kube.node, "node-name", "", "the node's name (with --kubeconfig)")
	cmd.Flags().StringVar(&kube.kubeletUnit, "kubelet-unit", "kubelet.service", "the kubelet's systemd unit (with --kubeconfig)")
	cmd.Flags().StringVar(&kube.kubeletLogDir, "kubelet-log-dir", "/var/log/pods", "the kubelet's pod log directory (with --kubeconfig)")
	cmd.Flags().StringVar(&kube.nodeConfig, "node-config", "", "nodeguard run configuration for node mode on this node: races nodeguard-node (with --kubeconfig)")
	return cmd
}

// raceOptions is one OOM race: the scenario, the binary whose agent races,
// and where its pods run.
type raceOptions struct {
	cfg bench.EvictionConfig
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
	cfg     bench.EvictionConfig
	trials  []bench.EvictionTrial
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
		cfg.Strategies = bench.DefaultStrategies(layout.Memory.V2())
	}
	reg := bench.NewEvictionStrategies()
	for _, s := range cfg.Strategies {
		if _, err := reg.New(s); err != nil {
			return res, err
		}
		if s == bench.StrategyKubeletMemcg && layout.Memory.V2() {
			return res, fmt.Errorf("strategy %s: %w", s, bench.ErrMemcgNotifierV2)
		}
	}
	res.cfg = cfg
	if err := bench.CheckBudget(nodestats.MeminfoPath, cfg.Budget); err != nil {
		return res, err
	}
	mi, err := nodestats.ReadMeminfo(nodestats.MeminfoPath)
	if err != nil {
		return res, err
	}
	if cfg.Budget >= mi.MemTotal {
		return res, fmt.Errorf("budget %s is not below MemTotal (%s)", bench.FormatBytes(cfg.Budget), bench.FormatBytes(mi.MemTotal))
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
		if err := bench.ImportImage(ctx, client, env.Socket(), set.Hog); err != nil {
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
	metricsAddr, err := freeLoopbackAddr()
	if err != nil {
		return res, err
	}
	ag, err := newAgentProcess(o.bin, dir, o.agentLog, []string{"--runtime-endpoint", endpoint,
		"--cgroup-driver", string(d), "--cgroup-root", root, "--metrics-addr", metricsAddr})
	if err != nil {
		return res, err
	}
	defer func() { retErr = errors.Join(retErr, ag.close()) }()
	agent := &raceAgent{p: ag, conf: func(evicting bool) map[string]any {
		c := raceAgentConfig(mi.MemTotal, cfg.Budget, cfg.Threshold, !evicting)
		if env != nil {
			c["network"] = privateNetwork(env)
		}
		return c
	}}
	fmt.Fprintf(o.progress, "agent: %s run, state under %s, log %s\n", o.bin, dir, ag.LogPath())
	start := time.Now()
	rt := bench.EvictionRuntime{
		Pods:    bench.APIPods{Client: func() bench.PodClient { return ag.Client() }},
		Cgroups: cg, LogDir: filepath.Join(dir, "state", "logs"), Agent: agent,
	}
	res.trials, err = bench.RunEviction(ctx, rt, reg, cfg)
	res.took = time.Since(start)
	res.cfg = cfg
	if o.endpoint != "" {
		// Our cgroup root on someone else's runtime: remove it once the
		// agent is gone (the private runtime's Close removes its own).
		if serr := ag.stop(); serr != nil {
			err = errors.Join(err, serr)
		} else if rerr := cg.RemoveRoot(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return res, err
}

// raceAgentConfig is the agent's configuration for the race: the shipped
// defaults, except node allocatable (systemReserved memory so that
// capacity - reserved is the budget) and the hard memory threshold (the
// default evictionHard with memory.available at the race's threshold,
// which enforceNodeAllocatable copies to allocatableMemory.available);
// eviction.disabled for the baselines.
func raceAgentConfig(memTotal, budget, threshold uint64, evictionDisabled bool) map[string]any {
	hard := oom.DefaultEvictionHard()
	hard[string(nodestats.SignalMemoryAvailable)] = strconv.FormatUint(threshold, 10)
	return map[string]any{
		"systemReserved": map[string]string{"memory": strconv.FormatUint(memTotal-budget, 10)},
		"eviction":       map[string]any{"evictionHard": hard, "disabled": evictionDisabled},
	}
}

// raceAgent is the race's bench.EvictionAgent: the agent process, started
// with eviction on or off.
type raceAgent struct {
	p    *agentProcess
	conf func(evicting bool) map[string]any
}

func (a *raceAgent) Restart(ctx context.Context, evicting bool) error {
	if err := a.p.stop(); err != nil {
		return err
	}
	return a.p.start(ctx, a.conf(evicting))
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

func dialCRI(ctx context.Context, endpoint string) (*cri.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return cri.Dial(dctx, endpoint, 10*time.Second)
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
	rows := bench.SummarizeEviction(res.trials)
	fmt.Fprintf(w, "\nOOM race: budget %s, threshold %s, %d trials in %s; %s; %s; load average %s\n",
		bench.FormatBytes(cfg.Budget), bench.FormatBytes(cfg.Threshold), len(res.trials), res.took.Round(time.Second),
		res.runtime, res.layout, loadAverage())
	bench.WriteEvictionTable(w, rows)
	ratios := bench.DetectionRatio(rows, bench.StrategyKubelet, bench.StrategyNodeguard)
	for _, r := range cfg.Rates {
		if x, ok := ratios[r]; ok {
			fmt.Fprintf(w, "detection p50 kubelet / nodeguard at %s = %.0fx\n", bench.FormatRate(r), x)
		}
	}
	bench.WriteEvictionTargets(w, rows, bench.StrategyNodeguard)
	fmt.Fprintf(w, "latencies: detection after the ground-truth crossing, kill after detection, release after kill (strategies: %s)\n", strings.Join(cfg.Strategies, ", "))
}

func writeEvictionFiles(dir string, trials []bench.EvictionTrial) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, "eviction.csv")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := errors.Join(bench.WriteEvictionCSV(f, trials), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return bench.EvictionPNG(filepath.Join(dir, "eviction.png"), trials)
}
