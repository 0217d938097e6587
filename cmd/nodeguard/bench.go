package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
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
			p, err := loader.Open(loader.Options{
				Logger:    log,
				Families:  []string{loader.FamilyBench},
				RingSizes: map[loader.Ring]int{loader.RingBench: 4 << 20},
				QueueSize: 2 * cfg.Window,
			})
			if err != nil {
				return err
			}
			defer p.Close()
			cfg.Progress = cmd.ErrOrStderr()
			res, err := bench.RunEvents(cmd.Context(), p, cfg)
			if err != nil {
				return err
			}
			bench.WriteEventsTable(cmd.OutOrStdout(), res)
			if out != "" {
				if err := writeEventsFiles(out, res); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", filepath.Join(out, "events-latency.csv"), filepath.Join(out, "events-latency.png"))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&cfg.LatencySamples, "samples", cfg.LatencySamples, "latency samples")
	cmd.Flags().IntVar(&cfg.ThroughputEvents, "events", cfg.ThroughputEvents, "events in the throughput phase")
	cmd.Flags().IntVar(&cfg.Batch, "batch", cfg.Batch, "records per trigger in the throughput phase")
	cmd.Flags().IntVar(&cfg.Window, "window", cfg.Window, "most records in flight in the throughput phase")
	cmd.Flags().StringVar(&out, "out", "", "directory for the CSV and PNG")
	return cmd
}

func writeEventsFiles(dir string, res bench.EventsResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, "events-latency.csv")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"sample", "latency_ns"})
	for i, d := range res.Samples {
		_ = w.Write([]string{strconv.Itoa(i), strconv.FormatInt(int64(d), 10)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return bench.LatencyHistogramPNG(filepath.Join(dir, "events-latency.png"), "nodeguard: kernel-to-Go event delivery", res.Samples)
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
			ctx := cmd.Context()
			cfg.Progress = cmd.ErrOrStderr()
			cfg.Image = images.BusyboxName
			if endpoint == "" {
				fmt.Fprintln(cfg.Progress, "starting the private containerd")
				env, err := crienv.Start(ctx, crienv.Options{Log: log})
				if err != nil {
					return err
				}
				defer env.Close()
				endpoint, cgroupRoot = env.Endpoint(), env.CgroupParent()
				cfg.Image = env.BusyboxImage()
			}
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			client, err := cri.Dial(dctx, endpoint, 10*time.Second)
			cancel()
			if err != nil {
				return err
			}
			defer client.Close()
			host, cleanup, err := newBenchHost(ctx, cgroupRoot, "nodeguard-churn-")
			if err != nil {
				return err
			}
			defer cleanup()
			layout, cg, root, mi := host.layout, host.cg, host.root, host.mi
			if cfg.Grace > 0 {
				return benchChurnGrace(cmd, cfg, client, host, log, out)
			}
			floor, err := bench.RunChurnFloor(ctx, client, cg, cfg)
			if err != nil {
				return fmt.Errorf("direct CRI: %w", err)
			}
			mgr, err := lifecycle.New(lifecycle.Config{Runtime: client, Cgroups: cg, RootDir: root, MemoryCapacity: int64(mi.MemTotal),
				CgroupV2: layout.Memory.V2(), Workers: cfg.Parallel, MinOOMScoreAdj: ownOOMScoreAdj(), Logger: log})
			if err != nil {
				return err
			}
			mgr.SourcesReady()
			mctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { mgr.Run(mctx); close(done) }()
			ng, err := bench.RunChurnNodeguard(ctx, mgr, cfg)
			stop()
			<-done
			if err != nil {
				return fmt.Errorf("nodeguard: %w", err)
			}
			rows := []bench.ChurnRow{ng, floor}
			fmt.Fprintf(cmd.OutOrStdout(), "\n%d pods, %d in parallel, runtime %s\n", cfg.Pods, cfg.Parallel, client.Runtime().Version)
			bench.WriteChurnTable(cmd.OutOrStdout(), rows)
			ratio := float64(ng.Startup.P99) / float64(floor.Startup.P99)
			fmt.Fprintf(cmd.OutOrStdout(), "startup p99 nodeguard / floor = %.2f (target <= 1.10)\n", ratio)
			if out != "" {
				if err := os.MkdirAll(out, 0o755); err != nil {
					return err
				}
				f, err := os.Create(filepath.Join(out, "churn.csv"))
				if err != nil {
					return err
				}
				w := csv.NewWriter(f)
				_ = w.Write([]string{"strategy", "pods", "parallel", "start_p50_ms", "start_p99_ms", "delete_p50_ms", "delete_p99_ms", "pods_per_s"})
				for _, r := range rows {
					_ = w.Write([]string{r.Name, strconv.Itoa(cfg.Pods), strconv.Itoa(cfg.Parallel),
						fmt.Sprintf("%.1f", float64(r.Startup.P50)/1e6), fmt.Sprintf("%.1f", float64(r.Startup.P99)/1e6),
						fmt.Sprintf("%.1f", float64(r.Deletion.P50)/1e6), fmt.Sprintf("%.1f", float64(r.Deletion.P99)/1e6),
						fmt.Sprintf("%.2f", r.PodsPerSec)})
				}
				w.Flush()
				if err := errors.Join(w.Error(), f.Close()); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", filepath.Join(out, "churn.csv"))
			}
			return nil
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

// benchHost is what a pod benchmark runs a lifecycle.Manager on: the
// cgroup layout, the pod cgroups beneath cgroupRoot, a temporary state
// directory and the node's memory.
type benchHost struct {
	layout *cgroups.Layout
	cg     *kubepods.Manager
	root   string
	mi     nodestats.Meminfo
}

// newBenchHost prepares a benchHost; cleanup removes its state directory.
func newBenchHost(ctx context.Context, cgroupRoot, prefix string) (_ *benchHost, cleanup func(), err error) {
	h := &benchHost{}
	if h.layout, err = cgroups.Discover(); err != nil {
		return nil, nil, err
	}
	if h.cg, err = kubepods.New(ctx, h.layout, kubepods.Cgroupfs, cgroupRoot, kubepods.Options{}); err != nil {
		return nil, nil, err
	}
	if h.mi, err = nodestats.ReadMeminfo(nodestats.MeminfoPath); err != nil {
		return nil, nil, err
	}
	if h.root, err = os.MkdirTemp("", prefix); err != nil {
		return nil, nil, err
	}
	return h, func() { os.RemoveAll(h.root) }, nil
}
