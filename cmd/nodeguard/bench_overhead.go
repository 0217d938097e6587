package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// overheadAgentName is the row of the agent in the overhead figures.
const overheadAgentName = "nodeguard"

func newBenchOverheadCmd(g *globalFlags) *cobra.Command {
	cfg := bench.OverheadConfig{Window: 60 * time.Second, Parallel: 4}
	var out, profileDir, probes string
	var scrapeEvery time.Duration
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
the environment removed at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (retErr error) {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if len(pods) == 0 || !slices.IsSorted(pods) || pods[0] <= 0 || cfg.Window <= 0 || cfg.Parallel <= 0 {
				return fmt.Errorf("--pods must be positive and ascending, --window and --parallel positive")
			}
			cfg.Pods = pods
			if cfg.Probes, err = bench.ParseProbeMix(probes); err != nil {
				return fmt.Errorf("--probes: %w", err)
			}
			if cfg.ProbePeriod < time.Second {
				return fmt.Errorf("--probe-period %s: probes run every whole second at most (periodSeconds)", cfg.ProbePeriod)
			}
			ctx := cmd.Context()
			progress := cmd.ErrOrStderr()
			cfg.Progress = progress
			fmt.Fprintln(progress, "overhead: starting the private containerd")
			env, err := crienv.Start(ctx, crienv.Options{Log: log})
			if err != nil {
				return err
			}
			defer func() { retErr = errors.Join(retErr, env.Close()) }()
			cfg.Image = env.BusyboxImage()

			dir, err := os.MkdirTemp("", "ngoverhead")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			metricsAddr := ""
			if profileDir != "" {
				if err := os.MkdirAll(profileDir, 0o755); err != nil {
					return fmt.Errorf("--cpu-profile: %w", err)
				}
				if metricsAddr, err = freeLoopbackAddr(); err != nil {
					return fmt.Errorf("--cpu-profile: %w", err)
				}
				cfg.Profile = func(ctx context.Context, pods int, phase string, window time.Duration) error {
					path := filepath.Join(profileDir, fmt.Sprintf("%s-%d-%s.cpu.pprof", overheadAgentName, pods, phase))
					if err := fetchCPUProfile(ctx, metricsAddr, window, path); err != nil {
						return err
					}
					fmt.Fprintf(progress, "overhead: wrote %s (go tool pprof -top %s)\n", path, path)
					return nil
				}
			}
			if scrapeEvery < 0 {
				return fmt.Errorf("--scrape-every %s: must not be negative", scrapeEvery)
			}
			if scrapeEvery > 0 && metricsAddr == "" {
				if metricsAddr, err = freeLoopbackAddr(); err != nil {
					return fmt.Errorf("--scrape-every: %w", err)
				}
			}
			if len(cfg.Probes) > 0 {
				if metricsAddr == "" {
					if metricsAddr, err = freeLoopbackAddr(); err != nil {
						return fmt.Errorf("--probes: %w", err)
					}
				}
				cfg.ProbeTotals = func(ctx context.Context) (bench.ProbeTotals, error) { return scrapeProbeTotals(ctx, metricsAddr) }
			}
			agent, err := startOverheadAgent(ctx, env, dir, metricsAddr, profileDir != "", progress)
			if err != nil {
				return err
			}
			defer func() { retErr = errors.Join(retErr, agent.close()) }()
			client := agent.Client()
			pid := agent.pid()
			if scrapeEvery > 0 {
				sctx, stop := context.WithCancel(ctx)
				done := make(chan scrapeCount, 1)
				go func() { done <- scrapeMetrics(sctx, metricsAddr, scrapeEvery) }()
				defer func() {
					stop()
					n := <-done
					fmt.Fprintf(cmd.OutOrStdout(), "metrics scraped every %s: %d scrapes, %d failed, %.1f KiB each on average\n", scrapeEvery, n.ok+n.failed, n.failed, n.kib())
					if n.ok == 0 {
						retErr = errors.Join(retErr, fmt.Errorf("--scrape-every: no scrape of the agent's metrics succeeded (%d failed)", n.failed))
					}
				}()
			}

			groups := []bench.ProcGroup{
				{Name: overheadAgentName, PIDs: func() ([]int, error) { return []int{pid}, nil }},
				{Name: "containerd", PIDs: func() ([]int, error) {
					return bench.FindProcs("/proc", func(argv []string) bool {
						return len(argv) > 0 && filepath.Base(argv[0]) == "containerd" && slices.Contains(argv, filepath.Join(env.Dir(), "config.toml"))
					})
				}},
				{Name: "containerd shims", PIDs: func() ([]int, error) {
					return bench.FindProcs("/proc", func(argv []string) bool {
						return len(argv) > 0 && strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") && slices.Contains(argv, env.Socket())
					})
				}},
			}
			if pids, err := groups[1].PIDs(); err != nil || len(pids) != 1 {
				return fmt.Errorf("find the private containerd's process: %v (found %v)", err, pids)
			}
			rows, err := bench.RunOverhead(ctx, client, groups, cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "\nbusybox pods, %s windows sampled every 1 s, %d churn workers, agent pid %d\n", cfg.Window, cfg.Parallel, pid)
			if len(cfg.Probes) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "probed pods: readiness and liveness probes every %s, kinds %s in turn\n", cfg.ProbePeriod, strings.Join(cfg.Probes, ","))
			}
			bench.WriteOverheadTable(cmd.OutOrStdout(), rows, overheadAgentName)
			if out != "" {
				files, err := bench.WriteOverheadFiles(out, rows, overheadAgentName, time.Second)
				for _, f := range files {
					fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", f)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().IntSliceVar(&pods, "pods", pods, "running pod counts to measure at, ascending (e.g. 110,250)")
	cmd.Flags().DurationVar(&cfg.Window, "window", cfg.Window, "length of each phase (idle, churn)")
	cmd.Flags().IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "applies in flight while filling, and churn workers")
	cmd.Flags().StringVar(&out, "out", "", "directory for overhead.csv, overhead-samples.csv and overhead.png")
	cmd.Flags().StringVar(&profileDir, "cpu-profile", "", "directory for the agent's CPU profile of each window (serves its /debug/pprof/ on loopback)")
	cmd.Flags().StringVar(&probes, "probes", "", "add a window with probed pods: probe kinds given to them in turn, from "+strings.Join(bench.ProbeKinds, ",")+" (e.g. exec,http,tcp)")
	cmd.Flags().DurationVar(&cfg.ProbePeriod, "probe-period", 10*time.Second, "periodSeconds of the probed pods' probes (with --probes)")
	cmd.Flags().DurationVar(&scrapeEvery, "scrape-every", 0, "scrape the agent's /metrics this often through every window, as Prometheus would (0: never)")
	return cmd
}

// scrapeCount is what scrapeMetrics did.
type scrapeCount struct {
	ok, failed int
	bytes      int64
}

func (n scrapeCount) kib() float64 {
	if n.ok == 0 {
		return 0
	}
	return float64(n.bytes) / float64(n.ok) / 1024
}

// scrapeMetrics reads the agent's /metrics at addr every every until ctx
// is done, each scrape bounded by the interval, as a Prometheus server's
// scrape timeout is.
func scrapeMetrics(ctx context.Context, addr string, every time.Duration) scrapeCount {
	var n scrapeCount
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, every)
		b, err := scrapeOnce(sctx, addr)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return n
			}
			n.failed++
			continue
		}
		n.ok++
		n.bytes += b
	}
}

func scrapeOnce(ctx context.Context, addr string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s", resp.Status)
	}
	return b, err
}

// fetchCPUProfile takes the CPU profile of the agent serving /debug/pprof/
// at addr over window (whole seconds, at least one) and writes it to path.
func fetchCPUProfile(ctx context.Context, addr string, window time.Duration, path string) error {
	secs := max(int(window/time.Second), 1)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("CPU profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("CPU profile: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("CPU profile: %w", err)
	}
	return f.Close()
}

// scrapeProbeTotals reads the agent's prober_probe_total from its metrics
// at addr.
func scrapeProbeTotals(ctx context.Context, addr string) (bench.ProbeTotals, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return bench.ProbeTotals{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return bench.ProbeTotals{}, fmt.Errorf("scrape the agent's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return bench.ProbeTotals{}, fmt.Errorf("scrape the agent's metrics: %s", resp.Status)
	}
	return bench.ParseProbeTotals(resp.Body)
}

// startOverheadAgent starts "nodeguard run" from this binary against env's
// containerd and network, with its state under dir, and waits until its API
// answers. A metricsAddr serves its metrics there, and its profiler too
// when profiling.
func startOverheadAgent(ctx context.Context, env *crienv.Env, dir, metricsAddr string, profiling bool, progress io.Writer) (*agentProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this binary: %w", err)
	}
	flags := []string{"--runtime-endpoint", env.Endpoint(), "--cgroup-root", env.CgroupParent() + "/ng",
		"--metrics-addr", metricsAddr, "--log-level", "warn"}
	if profiling {
		flags = append(flags, "--enable-profiling")
	}
	a, err := newAgentProcess(self, dir, "", flags)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "overhead: starting the agent; waiting for its API at %s\n", a.sock)
	if err := a.start(ctx, map[string]any{"network": privateNetwork(env)}); err != nil {
		return nil, errors.Join(err, a.close())
	}
	fmt.Fprintf(progress, "overhead: agent running (pid %d)\n", a.pid())
	return a, nil
}
