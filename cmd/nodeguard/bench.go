package main

// nodeguard bench: the subcommands' flags and their wiring to package
// bench, which runs the benchmarks (and, through bench/agentproc, the agent
// processes they measure).

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/agent"
	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
)

func newBenchCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that print their figures (events, churn, net, eviction, overhead)",
	}
	cmd.AddCommand(newBenchEventsCmd(g), newBenchChurnCmd(g), newBenchNetCmd(g), newBenchEvictionCmd(g), newBenchOverheadCmd(g))
	return cmd
}

func newBenchEventsCmd(g *globalFlags) *cobra.Command {
	cfg := bench.DefaultEventsConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Kernel-to-Go delivery latency, sustained events/s with zero loss, and decode cost",
		Long: `Loads bench.bpf.c next to the production programs and drives synthetic
records through the whole pipeline: BPF program -> ring buffer -> reader ->
Decode -> bounded queue -> consumer. Latency is the BPF timestamp
(bpf_ktime_get_ns, CLOCK_MONOTONIC) against CLOCK_MONOTONIC when the consumer
receives the event. --out DIR writes events-latency.csv and events-latency.png.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if cfg.LatencySamples <= 0 || cfg.ThroughputEvents <= 0 || cfg.Batch <= 0 || cfg.Window < cfg.Batch {
				return fmt.Errorf("--samples, --events and --batch must be positive and --window >= --batch")
			}
			return bench.EventsBench(cmd.Context(), bench.EventsOptions{Config: cfg, OutDir: out, Log: log,
				Report: cmd.OutOrStdout(), Progress: cmd.ErrOrStderr()})
		},
	}
	cmd.Flags().IntVar(&cfg.LatencySamples, "samples", cfg.LatencySamples, "latency samples")
	cmd.Flags().IntVar(&cfg.ThroughputEvents, "events", cfg.ThroughputEvents, "events in the throughput phase")
	cmd.Flags().IntVar(&cfg.Batch, "batch", cfg.Batch, "records per trigger in the throughput phase")
	cmd.Flags().IntVar(&cfg.Window, "window", cfg.Window, "most records in flight in the throughput phase")
	cmd.Flags().StringVar(&out, "out", "", "directory for the CSV and PNG")
	return cmd
}

func newBenchChurnCmd(g *globalFlags) *cobra.Command {
	cfg := bench.ChurnConfig{Pods: 50, Parallel: 8}
	var endpoint, out, cgroupRoot string
	cmd := &cobra.Command{
		Use:   "churn",
		Short: "Pod churn: apply N pods, wait Running, delete, wait gone; nodeguard against direct CRI calls",
		Long: `Runs the same pods twice on one runtime: once through nodeguard's pod manager
(apply -> Running, delete -> gone) and once as the bare CRI calls (pod cgroup,
RunPodSandbox, CreateContainer, StartContainer; StopContainer, StopPodSandbox,
RemovePodSandbox), the floor. Without --runtime-endpoint it starts the private
test containerd (its own network namespace, local images) and removes it after.

With --grace the pods have that terminationGracePeriodSeconds and a container
that ignores SIGTERM, so every deletion waits all of it out; nodeguard starts
N pods with nothing else going on (the floor), then deletes them all at once
and starts N more while they are in grace, and reports both side by side.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if cfg.Pods <= 0 || cfg.Parallel <= 0 {
				return fmt.Errorf("--pods and --parallel must be positive")
			}
			return bench.ChurnBench(cmd.Context(), bench.ChurnOptions{Config: cfg, Endpoint: endpoint, CgroupRoot: cgroupRoot, OutDir: out,
				MinOOMScoreAdj: agent.OwnOOMScoreAdj(), Log: log, Report: cmd.OutOrStdout(), Progress: cmd.ErrOrStderr()})
		},
	}
	cmd.Flags().IntVar(&cfg.Pods, "pods", cfg.Pods, "pods per strategy")
	cmd.Flags().IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "pods applied (and deleted) at a time")
	cmd.Flags().StringVar(&endpoint, "runtime-endpoint", "", "CRI socket; empty starts the private test containerd")
	cmd.Flags().StringVar(&cgroupRoot, "cgroup-root", "nodeguard-bench", "cgroup root for the pods (relative: beneath nodeguard's own cgroup)")
	cmd.Flags().StringVar(&out, "out", "", "directory for churn.csv")
	cmd.Flags().DurationVar(&cfg.Grace, "grace", 0, "the pods' grace period, waited out in full: start latency while deletions are in grace (e.g. 30s; whole seconds)")
	return cmd
}

func newBenchNetCmd(g *globalFlags) *cobra.Command {
	cfg := bench.NetConfig{Pods: 50, Parallel: 1}
	cmd := &cobra.Command{
		Use:   "net",
		Short: "Pod network ADD and DEL latency through netplumb (bridge, host-local, portmap, bandwidth)",
		Long: `Creates a node network namespace of its own (never touching the machine's),
attaches --pods pods to nodeguard's CNI chain with netplumb.Direct (a netns
per pod, then ADD of bridge + host-local + portmap + bandwidth, run inside
the node namespace), verifies each pod's veth, address and route through
netlink, and detaches them (DEL, netns removed). Prints p50/p99/max per
operation. --out DIR writes net.csv, net-add.png and net-del.png. Needs
root and the CNI plugins (/opt/cni/bin or /usr/lib/cni).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(); err != nil {
				return err
			}
			if cfg.Pods <= 0 || cfg.Parallel <= 0 {
				return fmt.Errorf("--pods and --parallel must be positive")
			}
			return bench.NetBench(cmd.Context(), bench.NetOptions{Config: cfg, Report: cmd.OutOrStdout(), Progress: cmd.ErrOrStderr()})
		},
	}
	cmd.Flags().IntVar(&cfg.Pods, "pods", cfg.Pods, "pods to attach and detach")
	cmd.Flags().IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "ADDs (and DELs) in flight at once")
	cmd.Flags().StringVar(&cfg.Out, "out", "", "directory for net.csv and the PNG histograms")
	return cmd
}

func newBenchEvictionCmd(g *globalFlags) *cobra.Command {
	var (
		budget, threshold, rates, out string
		opts                          bench.EvictionOptions
		strategies                    []string
		trials                        int
		quick                         bool
		seed                          uint64
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
			cfg := bench.EvictionConfig{Trials: trials, Strategies: strategies, Step: 1 << 20, Seed: seed}
			if quick {
				if !cmd.Flags().Changed("rates") {
					rates = bench.QuickEvictionRates
				}
				if !cmd.Flags().Changed("trials") {
					cfg.Trials = bench.QuickEvictionTrials
				}
			}
			if cfg.Budget, err = bench.ParseBytes(budget); err != nil {
				return fmt.Errorf("--budget: %w", err)
			}
			if cfg.Threshold, err = bench.ParseThreshold(threshold, cfg.Budget); err != nil {
				return fmt.Errorf("--threshold: %w", err)
			}
			if cfg.Rates, err = bench.ParseRates(rates); err != nil {
				return fmt.Errorf("--rates: %w", err)
			}
			if cfg.Trials <= 0 {
				return errors.New("--trials must be positive")
			}
			opts.Config, opts.OutDir, opts.Log = cfg, out, log
			opts.Report, opts.Progress = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return bench.EvictionBench(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&budget, "budget", "1Gi", "node allocatable: the pod root's hard memory limit (systemReserved is MemTotal minus it)")
	cmd.Flags().StringVar(&threshold, "threshold", bench.DefaultEvictionThreshold, "eviction threshold on allocatableMemory.available: a quantity (100Mi) or a percentage of the budget (10%)")
	cmd.Flags().StringVar(&rates, "rates", bench.DefaultEvictionRates, "hog allocation rates, comma-separated")
	cmd.Flags().IntVar(&trials, "trials", 3, "trials per rate and strategy")
	cmd.Flags().StringSliceVar(&strategies, "strategies", nil, "strategies to race (default "+strings.Join(bench.DefaultStrategyNames, ",")+"; kubelet-memcg only where memory is on cgroup v1)")
	cmd.Flags().BoolVar(&quick, "quick", false, "CI run: rates "+bench.QuickEvictionRates+", "+fmt.Sprint(bench.QuickEvictionTrials)+" trials (unless given)")
	cmd.Flags().Uint64Var(&seed, "seed", uint64(time.Now().UnixNano()), "seed of the pollers' random phases")
	cmd.Flags().StringVar(&opts.Endpoint, "runtime-endpoint", "", "CRI socket of the runtime to race on; empty starts the private test containerd")
	cmd.Flags().StringVar(&opts.Driver, "cgroup-driver", string(kubepods.Cgroupfs), "the runtime's cgroup driver, cgroupfs or systemd (with --runtime-endpoint)")
	cmd.Flags().StringVar(&opts.Root, "cgroup-root", "/", "absolute cgroup root of kubepods (with --runtime-endpoint)")
	cmd.Flags().StringVar(&out, "out", "", "directory for eviction.csv, eviction.png and eviction-agent.log")
	cmd.Flags().StringVar(&opts.Kube.Kubeconfig, "kubeconfig", "", "race on a real node through the API server with this (admin) kubeconfig")
	cmd.Flags().StringVar(&opts.Kube.Node, "node-name", "", "the node's name (with --kubeconfig)")
	cmd.Flags().StringVar(&opts.Kube.KubeletUnit, "kubelet-unit", "kubelet.service", "the kubelet's systemd unit (with --kubeconfig)")
	cmd.Flags().StringVar(&opts.Kube.KubeletLogDir, "kubelet-log-dir", "/var/log/pods", "the kubelet's pod log directory (with --kubeconfig)")
	cmd.Flags().StringVar(&opts.Kube.NodeConfig, "node-config", "", "nodeguard run configuration for node mode on this node: races nodeguard-node (with --kubeconfig)")
	return cmd
}

func newBenchOverheadCmd(g *globalFlags) *cobra.Command {
	opts := bench.OverheadOptions{Config: bench.OverheadConfig{Window: 60 * time.Second, Parallel: 4}}
	cfg := &opts.Config
	var probes, kubelet string
	runs := 1
	pods := []int{110}
	cmd := &cobra.Command{
		Use:   "overhead",
		Short: "CPU and RSS of the agent (and of containerd) with 110 and 250 pods, idle, under churn and probed",
		Long: `Starts the private test containerd (its own network namespace, local
images), then the real agent as a child process ("nodeguard run" from this
binary, pointed at that containerd and its network, with its own state
directory, API socket and cgroup root; metrics on a loopback port only
when --probes, --cpu-profile or --scrape-every need them), and applies
busybox "sleep 3600" pods through the agent's API until --pods of them run.
It then samples, every second for --window, the CPU (deltas of utime, stime
and the reaped children's cutime and cstime in /proc/<pid>/stat; a process
born between two samples counts whole) and RSS (VmRSS) of the agent, of
containerd, and of the containerd shims together: first idle, then while --parallel workers apply a
fresh pod, wait for it to run, delete it and wait until it is gone, over and
over. With several --pods counts (ascending) it fills up to each in turn.
Prints mean cores and max RSS per process and phase, with the agent's
target (<= 0.05 core idle and <= 80 MiB RSS at 110 pods; the kubelet's
budget is 0.35 core / 300 MiB). --out DIR writes overhead.csv,
overhead-samples.csv and overhead.png. --cpu-profile DIR also serves the
agent's /debug/pprof/ on a loopback port and writes its CPU profile of each
window to DIR (nodeguard-<pods>-<phase>.cpu.pprof, for "go tool pprof");
the profiler's own cost is then in the figures. --probes KINDS adds a third
window at every count, "probed": the pods are swapped for as many that each
carry a readiness and a liveness probe every --probe-period (10 s, as most
real specs), of the kinds given in turn (exec, http: httpGet readiness and
tcpSocket liveness on busybox httpd, tcp, grpc), and once all are ready the
agent's CPU is sampled beside the probe-less idle window, with the probe
rate achieved (from the agent's prober_probe_total, read from its metrics on
a loopback port before and after the window). --scrape-every D has the
agent's /metrics scraped every D through every window, as a Prometheus
server would, so that the figures include what serving its metrics costs
(the full cgroup statistics are read at a scrape). Every pod is deleted and
the environment removed at the end.

--kubelet BIN (or auto) measures the real kubelet beside nodeguard: each
agent in turn (--runs turns each, the order reversed every other run) on
a fresh private containerd, both given the same pods through a static pod
manifest directory and read back from the runtime (Running is the
container started as containerd stamps it; readiness two probe periods
after Running), maxPods sized for the largest count plus the churn
workers. The kubelet runs standalone in a private mount namespace, with
the cgroupfs driver, its cgroup root beneath this process's cgroup and
its defaults otherwise. Prints both side by side with nodeguard/kubelet
ratios against issue 33's targets and the growth of idle CPU per pod;
--out DIR writes sidebyside.csv, sidebyside-samples.csv, sidebyside.png
and each turn's agent log. With --kubelet the churn window is an open loop
of --churn-rate pods per second (1 unless given), so that both agents
start pods under the same load. The kubelet runs in this machine's network
namespace, where pod addresses are not routed to the private runtime's
bridge: with --kubelet only exec probes are allowed (--probes exec).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if len(pods) == 0 || !slices.IsSorted(pods) || pods[0] <= 0 || cfg.Window <= 0 || cfg.Parallel <= 0 {
				return fmt.Errorf("--pods must be positive and ascending, --window and --parallel positive")
			}
			cfg.Pods = pods
			if cfg.ChurnRate < 0 {
				return fmt.Errorf("--churn-rate %g: must not be negative", cfg.ChurnRate)
			}
			if cfg.Probes, err = bench.ParseProbeMix(probes); err != nil {
				return fmt.Errorf("--probes: %w", err)
			}
			if cfg.ProbePeriod < time.Second {
				return fmt.Errorf("--probe-period %s: probes run every whole second at most (periodSeconds)", cfg.ProbePeriod)
			}
			if opts.ScrapeEvery < 0 {
				return fmt.Errorf("--scrape-every %s: must not be negative", opts.ScrapeEvery)
			}
			opts.Log, opts.Report, opts.Progress = log, cmd.OutOrStdout(), cmd.ErrOrStderr()
			if kubelet == "" {
				return bench.OverheadBench(cmd.Context(), opts)
			}
			if opts.ProfileDir != "" || opts.ScrapeEvery != 0 {
				return fmt.Errorf("--kubelet: --cpu-profile and --scrape-every measure nodeguard alone; run them without --kubelet")
			}
			if runs < 1 {
				return fmt.Errorf("--runs %d: want at least 1", runs)
			}
			if !cmd.Flags().Changed("churn-rate") {
				// Under the same load: closed-loop workers would give the
				// agent that deletes faster more pods to start.
				cfg.ChurnRate = 1
			}
			if kubelet == "auto" {
				if kubelet, err = bench.FindKubelet(); err != nil {
					return fmt.Errorf("--kubelet auto: %w", err)
				}
			} else if fi, err := os.Stat(kubelet); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
				// Before nodeguard's turn, not after it.
				return fmt.Errorf("--kubelet %s: not an executable file (%v); auto takes $NODEGUARD_KUBELET_BIN or the one scripts/controlplane.sh built", kubelet, err)
			}
			_, err = bench.SideBySide(cmd.Context(), bench.SideBySideOptions{
				Config:      *cfg,
				Competitors: []bench.Competitor{bench.NodeguardCompetitor(opts.Bin), bench.KubeletCompetitor(kubelet)},
				Runs:        runs, OutDir: opts.OutDir, Log: log, Report: opts.Report, Progress: opts.Progress,
			})
			return err
		},
	}
	cmd.Flags().StringVar(&kubelet, "kubelet", "", `run the real kubelet too, taking turns with nodeguard on the same pods (each on a fresh containerd, both fed through a manifest directory and read back from the runtime): its binary, or "auto" for $NODEGUARD_KUBELET_BIN or the one scripts/controlplane.sh built`)
	cmd.Flags().IntVar(&runs, "runs", 1, "with --kubelet: turns each agent takes, the first going first in odd runs")
	cmd.Flags().Float64Var(&cfg.ChurnRate, "churn-rate", 0, "churn in an open loop: pods applied per second whatever the agent's pace, at most twice --parallel in flight (0: --parallel workers in a closed loop; 1 with --kubelet)")
	cmd.Flags().IntSliceVar(&pods, "pods", pods, "running pod counts to measure at, ascending (e.g. 110,250)")
	cmd.Flags().DurationVar(&cfg.Window, "window", cfg.Window, "length of each phase (idle, churn)")
	cmd.Flags().IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "applies in flight while filling, and churn workers")
	cmd.Flags().StringVar(&opts.OutDir, "out", "", "directory for overhead.csv, overhead-samples.csv and overhead.png")
	cmd.Flags().StringVar(&opts.ProfileDir, "cpu-profile", "", "directory for the agent's CPU profile of each window (serves its /debug/pprof/ on loopback)")
	cmd.Flags().StringVar(&probes, "probes", "", "add a window with probed pods: probe kinds given to them in turn, from "+strings.Join(bench.ProbeKinds, ",")+" (e.g. exec,http,tcp)")
	cmd.Flags().DurationVar(&cfg.ProbePeriod, "probe-period", 10*time.Second, "periodSeconds of the probed pods' probes (with --probes)")
	cmd.Flags().DurationVar(&opts.ScrapeEvery, "scrape-every", 0, "scrape the agent's /metrics this often through every window, as Prometheus would (0: never)")
	return cmd
}
