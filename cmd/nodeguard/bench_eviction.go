package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/internal/crienv"
	"github.com/nodeguard/nodeguard/internal/images"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// evictionStrategies is the strategies `bench eviction` knows: the
// baselines of package bench and nodeguard's own (bench_eviction_nodeguard.go),
// which needs the pod manager and the cgroup layout the command makes
// later: ng is filled in before the first trial.
func evictionStrategies(ng *nodeguardStrategy) *bench.EvictionStrategies {
	s := bench.NewEvictionStrategies()
	s.Register(bench.StrategyNodeguard, func() bench.EvictionStrategy { return ng })
	return s
}

func newBenchEvictionCmd(g *globalFlags) *cobra.Command {
	var (
		budget, threshold, rates, endpoint, cgroupRoot, out string
		strategies                                          []string
		trials                                              int
		quick                                               bool
		seed                                                uint64
	)
	cmd := &cobra.Command{
		Use:   "eviction",
		Short: "The OOM race: how soon each strategy detects a hog, and whether its eviction beats the kernel's OOM killer",
		Long: `Gives the pod cgroup root (kubepods) a hard memory limit, the budget (node
allocatable), runs background pods of every QoS class (idle, and busy ones
rewriting their memory), then for every rate, trial and strategy starts a
BestEffort hog that allocates at that rate and reports its progress in its
container log. The ground truth "crossed" is the first progress line where the
baseline working set plus the hog's allocation reaches budget - threshold.
Every strategy evicts through the same action: the kubelet's memory ranking,
SIGKILL through the pod cgroup, delete through the pod manager.

Strategies: nodeguard (registered by nodeguard's eviction manager), kubelet
(allocatableMemory.available polled every 10 s at a random phase), poll1s (the
same every second), psi (a memory PSI trigger, some 150ms/1s, 2 s windows
without CAP_SYS_RESOURCE).

Without --runtime-endpoint it starts the private test containerd (its own
network namespace, local images) and removes it after. The budget may not
exceed half of MemAvailable. --out DIR writes eviction.csv and eviction.png.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg := bench.EvictionConfig{Trials: trials, Strategies: strategies, Step: 1 << 20, Seed: seed, Log: log, Progress: cmd.ErrOrStderr()}
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
			ng := &nodeguardStrategy{}
			reg := evictionStrategies(ng)
			for _, s := range cfg.Strategies {
				if _, err := reg.New(s); err != nil {
					return err
				}
			}
			if err := bench.CheckBudget(nodestats.MeminfoPath, cfg.Budget); err != nil {
				return err
			}
			ctx := cmd.Context()
			cfg.HogImage, cfg.BusyboxImage = images.HogName, images.BusyboxName
			var client *cri.Client
			if endpoint == "" {
				fmt.Fprintln(cfg.Progress, "starting the private containerd")
				env, err := crienv.Start(ctx, crienv.Options{Log: log})
				if err != nil {
					return err
				}
				defer env.Close()
				endpoint, cgroupRoot = env.Endpoint(), env.CgroupParent()
				cfg.BusyboxImage = env.BusyboxImage()
				if client, err = dialCRI(ctx, endpoint); err != nil {
					return err
				}
				defer client.Close()
				set, err := images.Cached(ctx, images.DefaultCacheDir, log)
				if err != nil {
					return err
				}
				if err := bench.ImportImage(ctx, client, env.Socket(), set.Hog); err != nil {
					return err
				}
			} else {
				if client, err = dialCRI(ctx, endpoint); err != nil {
					return err
				}
				defer client.Close()
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := client.ImageStatus(sctx, cfg.HogImage)
				cancel()
				if err != nil {
					return fmt.Errorf("the runtime at %s has no %s (build it with go run ./internal/images/cmd/mkimages and import hog.tar with ctr -n k8s.io images import): %w",
						endpoint, cfg.HogImage, err)
				}
			}
			host, cleanup, err := newBenchHost(ctx, cgroupRoot, "nodeguard-eviction-")
			if err != nil {
				return err
			}
			defer cleanup()
			layout, cg, root, mi := host.layout, host.cg, host.root, host.mi
			mgr, err := lifecycle.New(lifecycle.Config{Runtime: client, Cgroups: cg, RootDir: root, MemoryCapacity: int64(mi.MemTotal),
				CgroupV2: layout.Memory.V2(), MinOOMScoreAdj: ownOOMScoreAdj(), Logger: log})
			if err != nil {
				return err
			}
			ng.mgr, ng.layout, ng.log = mgr, layout, log
			mgr.SourcesReady()
			// The pod manager outlives an interrupt: the cleanup after it deletes
			// the pods through it. stop ends it once RunEviction has returned.
			mctx, stop := context.WithCancel(context.WithoutCancel(ctx))
			done := make(chan struct{})
			go func() { mgr.Run(mctx); close(done) }()
			start := time.Now()
			trials, runErr := bench.RunEviction(ctx, bench.EvictionRuntime{Pods: mgr, Cgroups: cg, CgroupRoot: cgroupRoot, LogDir: filepath.Join(root, "logs")}, reg, cfg)
			stop()
			<-done
			if cmd.Flags().Changed("runtime-endpoint") {
				// Our cgroup root on someone else's runtime: remove it
				// (the private runtime's Close removes its own).
				if err := cg.RemoveRoot(ctx); err != nil {
					runErr = errors.Join(runErr, err)
				}
			}
			if len(trials) > 0 {
				writeEvictionReport(cmd, cfg, trials, time.Since(start))
				if out != "" {
					if err := writeEvictionFiles(out, trials); err != nil {
						runErr = errors.Join(runErr, err)
					} else {
						fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", filepath.Join(out, "eviction.csv"), filepath.Join(out, "eviction.png"))
					}
				}
			}
			return runErr
		},
	}
	cmd.Flags().StringVar(&budget, "budget", "1Gi", "the pod root's hard memory limit (node allocatable)")
	cmd.Flags().StringVar(&threshold, "threshold", bench.DefaultEvictionThreshold, "eviction threshold on allocatableMemory.available: a quantity (100Mi) or a percentage of the budget (10%)")
	cmd.Flags().StringVar(&rates, "rates", bench.DefaultEvictionRates, "hog allocation rates, comma-separated")
	cmd.Flags().IntVar(&trials, "trials", 3, "trials per rate and strategy")
	cmd.Flags().StringSliceVar(&strategies, "strategies", slices.Clone(bench.DefaultStrategyNames), "strategies to race: nodeguard, kubelet, poll1s, psi")
	cmd.Flags().BoolVar(&quick, "quick", false, "CI run: rates "+bench.QuickEvictionRates+", "+fmt.Sprint(bench.QuickEvictionTrials)+" trials (unless given)")
	cmd.Flags().Uint64Var(&seed, "seed", uint64(time.Now().UnixNano()), "seed of the pollers' random phases")
	cmd.Flags().StringVar(&endpoint, "runtime-endpoint", "", "CRI socket; empty starts the private test containerd")
	cmd.Flags().StringVar(&cgroupRoot, "cgroup-root", "nodeguard-bench-eviction", "cgroup root for the pods with --runtime-endpoint (relative: beneath nodeguard's own cgroup)")
	cmd.Flags().StringVar(&out, "out", "", "directory for eviction.csv and eviction.png")
	return cmd
}

func dialCRI(ctx context.Context, endpoint string) (*cri.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return cri.Dial(dctx, endpoint, 10*time.Second)
}

func writeEvictionReport(cmd *cobra.Command, cfg bench.EvictionConfig, trials []bench.EvictionTrial, took time.Duration) {
	w := cmd.OutOrStdout()
	rows := bench.SummarizeEviction(trials)
	fmt.Fprintf(w, "\nOOM race: budget %s, threshold %s, %d trials in %s\n", bench.FormatBytes(cfg.Budget), bench.FormatBytes(cfg.Threshold),
		len(trials), took.Round(time.Second))
	bench.WriteEvictionTable(w, rows)
	ratios := bench.DetectionRatio(rows, bench.StrategyKubelet, bench.StrategyNodeguard)
	for _, r := range cfg.Rates {
		if x, ok := ratios[r]; ok {
			fmt.Fprintf(w, "detection p50 kubelet / nodeguard at %s = %.0fx\n", bench.FormatRate(r), x)
		}
	}
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
