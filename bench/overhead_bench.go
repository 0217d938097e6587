package bench

// nodeguard bench overhead: the agent's CPU and RSS (and containerd's)
// with its pods idle, under churn and probed, measured on `nodeguard run`
// from the nodeguard binary as a child process (bench/agentproc) against
// the private test containerd (RunOverhead).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nodeguard/nodeguard/bench/agentproc"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

// overheadAgentName is the row of the agent in the overhead figures.
const overheadAgentName = "nodeguard"

// OverheadOptions is one run of `nodeguard bench overhead`.
type OverheadOptions struct {
	// Config is the scenario; its Image, Progress, Profile and
	// ProbeTotals are set here.
	Config OverheadConfig
	// Bin is the nodeguard binary the agent starts from; empty is this
	// process's executable.
	Bin string
	// OutDir, when set, gets overhead.csv, overhead-samples.csv and
	// overhead.png.
	OutDir string
	// ProfileDir, when set, gets the agent's CPU profile of each window
	// (the agent serves /debug/pprof/ on a loopback port).
	ProfileDir string
	// ScrapeEvery, when positive, has the agent's /metrics scraped that
	// often through every window, as a Prometheus server would.
	ScrapeEvery time.Duration
	Log         *slog.Logger
	// Report gets the table and the files written; Progress a line per
	// step.
	Report, Progress io.Writer
}

// OverheadBench starts the private test containerd and the agent on it,
// runs RunOverhead on the agent, containerd and its shims, and reports;
// the pods and the environment are removed at the end.
func OverheadBench(ctx context.Context, o OverheadOptions) (retErr error) {
	cfg := o.Config
	progress := o.Progress
	cfg.Progress = progress
	fmt.Fprintln(progress, "overhead: starting the private containerd")
	env, err := crienv.Start(ctx, crienv.Options{Log: o.Log})
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
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		if metricsAddr, err = agentproc.FreeLoopbackAddr(); err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		cfg.Profile = func(ctx context.Context, pods int, phase string, window time.Duration) error {
			path := filepath.Join(o.ProfileDir, fmt.Sprintf("%s-%d-%s.cpu.pprof", overheadAgentName, pods, phase))
			if err := fetchCPUProfile(ctx, metricsAddr, window, path); err != nil {
				return err
			}
			fmt.Fprintf(progress, "overhead: wrote %s (go tool pprof -top %s)\n", path, path)
			return nil
		}
	}
	if o.ScrapeEvery > 0 && metricsAddr == "" {
		if metricsAddr, err = agentproc.FreeLoopbackAddr(); err != nil {
			return fmt.Errorf("--scrape-every: %w", err)
		}
	}
	if len(cfg.Probes) > 0 {
		if metricsAddr == "" {
			if metricsAddr, err = agentproc.FreeLoopbackAddr(); err != nil {
				return fmt.Errorf("--probes: %w", err)
			}
		}
		cfg.ProbeTotals = func(ctx context.Context) (ProbeTotals, error) { return scrapeProbeTotals(ctx, metricsAddr) }
	}
	agent, err := startOverheadAgent(ctx, o.Bin, env, dir, metricsAddr, o.ProfileDir != "", progress)
	if err != nil {
		return err
	}
	defer func() { retErr = errors.Join(retErr, agent.Close()) }()
	client := agent.Client()
	pid := agent.PID()
	if o.ScrapeEvery > 0 {
		sctx, stop := context.WithCancel(ctx)
		done := make(chan scrapeCount, 1)
		go func() { done <- scrapeMetrics(sctx, metricsAddr, o.ScrapeEvery) }()
		defer func() {
			stop()
			n := <-done
			fmt.Fprintf(o.Report, "metrics scraped every %s: %d scrapes, %d failed, %.1f KiB each on average\n", o.ScrapeEvery, n.ok+n.failed, n.failed, n.kib())
			if n.ok == 0 {
				retErr = errors.Join(retErr, fmt.Errorf("--scrape-every: no scrape of the agent's metrics succeeded (%d failed)", n.failed))
			}
		}()
	}

	groups := []ProcGroup{
		{Name: overheadAgentName, PIDs: func() ([]int, error) { return []int{pid}, nil }},
		{Name: "containerd", PIDs: func() ([]int, error) {
			return FindProcs("/proc", func(argv []string) bool {
				return len(argv) > 0 && filepath.Base(argv[0]) == "containerd" && slices.Contains(argv, filepath.Join(env.Dir(), "config.toml"))
			})
		}},
		{Name: "containerd shims", PIDs: func() ([]int, error) {
			return FindProcs("/proc", func(argv []string) bool {
				return len(argv) > 0 && strings.HasPrefix(filepath.Base(argv[0]), "containerd-shim") && slices.Contains(argv, env.Socket())
			})
		}},
	}
	if pids, err := groups[1].PIDs(); err != nil || len(pids) != 1 {
		return fmt.Errorf("find the private containerd's process: %v (found %v)", err, pids)
	}
	rows, err := RunOverhead(ctx, client, groups, cfg)
	if err != nil {
		return err
	}
	w := o.Report
	fmt.Fprintf(w, "\nbusybox pods, %s windows sampled every 1 s, %d churn workers, agent pid %d\n", cfg.Window, cfg.Parallel, pid)
	if len(cfg.Probes) > 0 {
		fmt.Fprintf(w, "probed pods: readiness and liveness probes every %s, kinds %s in turn\n", cfg.ProbePeriod, strings.Join(cfg.Probes, ","))
	}
	WriteOverheadTable(w, rows, overheadAgentName)
	if o.OutDir != "" {
		files, err := WriteOverheadFiles(o.OutDir, rows, overheadAgentName, time.Second)
		for _, f := range files {
			fmt.Fprintf(w, "wrote %s\n", f)
		}
		if err != nil {
			return err
		}
	}
	return nil
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
func scrapeProbeTotals(ctx context.Context, addr string) (ProbeTotals, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return ProbeTotals{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ProbeTotals{}, fmt.Errorf("scrape the agent's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ProbeTotals{}, fmt.Errorf("scrape the agent's metrics: %s", resp.Status)
	}
	return ParseProbeTotals(resp.Body)
}

// startOverheadAgent starts "nodeguard run" from bin (empty: this
// process's executable) against env's containerd and network, with its
// state under dir, and waits until its API answers. A metricsAddr serves
// its metrics there, and its profiler too when profiling.
func startOverheadAgent(ctx context.Context, bin string, env *crienv.Env, dir, metricsAddr string, profiling bool, progress io.Writer) (*agentproc.Agent, error) {
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find this binary: %w", err)
		}
		bin = self
	}
	flags := []string{"--runtime-endpoint", env.Endpoint(), "--cgroup-root", env.CgroupParent() + "/ng",
		"--metrics-addr", metricsAddr, "--log-level", "warn"}
	if profiling {
		flags = append(flags, "--enable-profiling")
	}
	a, err := agentproc.New(bin, dir, "", flags)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "overhead: starting the agent; waiting for its API at %s\n", a.Socket())
	if err := a.Start(ctx, map[string]any{"network": agentproc.PrivateNetwork(env)}); err != nil {
		return nil, errors.Join(err, a.Close())
	}
	fmt.Fprintf(progress, "overhead: agent running (pid %d)\n", a.PID())
	return a, nil
}
