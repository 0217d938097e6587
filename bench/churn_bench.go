package bench

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// ChurnOptions is one run of `nodeguard bench churn`.
type ChurnOptions struct {
	// Config is the scenario; its Image and Progress are set here.
	Config ChurnConfig
	// Endpoint is the runtime's CRI socket; empty starts the private test
	// containerd, removed after. CgroupRoot is the pods' cgroup root on a
	// given runtime (relative: beneath this process's cgroup).
	Endpoint, CgroupRoot string
	// OutDir, when set, gets churn.csv (churn-grace.csv with a grace).
	OutDir string
	// MinOOMScoreAdj is the lowest oom_score_adj the pod manager may give:
	// this process's own (the kernel refuses lower without
	// CAP_SYS_RESOURCE).
	MinOOMScoreAdj int
	Log            *slog.Logger
	// Report gets the table and the files written; Progress a line per
	// step.
	Report, Progress io.Writer
}

// ChurnBench runs the same pods twice on one runtime, through nodeguard's
// pod manager and as the bare CRI calls (the floor), and reports both;
// with Config.Grace it runs the grace scenario instead (churnGraceBench).
func ChurnBench(ctx context.Context, o ChurnOptions) error {
	cfg, endpoint, cgroupRoot := o.Config, o.Endpoint, o.CgroupRoot
	cfg.Progress = o.Progress
	cfg.Image = images.BusyboxName
	if endpoint == "" {
		fmt.Fprintln(cfg.Progress, "starting the private containerd")
		env, err := crienv.Start(ctx, crienv.Options{Log: o.Log})
		if err != nil {
			return err
		}
		defer env.Close()
		endpoint, cgroupRoot = env.Endpoint(), env.CgroupParent()
		cfg.Image = env.BusyboxImage()
	}
	client, err := dialCRI(ctx, endpoint)
	if err != nil {
		return err
	}
	defer client.Close()
	host, cleanup, err := newChurnHost(ctx, cgroupRoot, "nodeguard-churn-")
	if err != nil {
		return err
	}
	defer cleanup()
	if cfg.Grace > 0 {
		return churnGraceBench(ctx, o, cfg, client, host)
	}
	floor, err := RunChurnFloor(ctx, client, host.cg, cfg)
	if err != nil {
		return fmt.Errorf("direct CRI: %w", err)
	}
	mgr, stop, err := startChurnManager(ctx, o, cfg, client, host)
	if err != nil {
		return err
	}
	ng, err := RunChurnNodeguard(ctx, mgr, cfg)
	stop()
	if err != nil {
		return fmt.Errorf("nodeguard: %w", err)
	}
	rows := []ChurnRow{ng, floor}
	w := o.Report
	fmt.Fprintf(w, "\n%d pods, %d in parallel, runtime %s\n", cfg.Pods, cfg.Parallel, client.Runtime().Version)
	WriteChurnTable(w, rows)
	ratio := float64(ng.Startup.P99) / float64(floor.Startup.P99)
	fmt.Fprintf(w, "startup p99 nodeguard / floor = %.2f (target <= 1.10)\n", ratio)
	if o.OutDir == "" {
		return nil
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(o.OutDir, "churn.csv")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	_ = cw.Write([]string{"strategy", "pods", "parallel", "start_p50_ms", "start_p99_ms", "delete_p50_ms", "delete_p99_ms", "pods_per_s"})
	for _, r := range rows {
		_ = cw.Write([]string{r.Name, strconv.Itoa(cfg.Pods), strconv.Itoa(cfg.Parallel),
			fmt.Sprintf("%.1f", float64(r.Startup.P50)/1e6), fmt.Sprintf("%.1f", float64(r.Startup.P99)/1e6),
			fmt.Sprintf("%.1f", float64(r.Deletion.P50)/1e6), fmt.Sprintf("%.1f", float64(r.Deletion.P99)/1e6),
			fmt.Sprintf("%.2f", r.PodsPerSec)})
	}
	cw.Flush()
	if err := errors.Join(cw.Error(), f.Close()); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s\n", path)
	return nil
}

// startChurnManager starts a pod manager of its own on host; stop ends it
// and waits for it.
func startChurnManager(ctx context.Context, o ChurnOptions, cfg ChurnConfig, client *cri.Client, host *churnHost) (_ *lifecycle.Manager, stop func(), err error) {
	mgr, err := lifecycle.New(lifecycle.Config{Runtime: client, Cgroups: host.cg, RootDir: host.root, MemoryCapacity: int64(host.mi.MemTotal),
		CgroupV2: host.layout.Memory.V2(), Workers: cfg.Parallel, MinOOMScoreAdj: o.MinOOMScoreAdj, Logger: o.Log})
	if err != nil {
		return nil, nil, err
	}
	mgr.SourcesReady()
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { mgr.Run(mctx); close(done) }()
	return mgr, func() { cancel(); <-done }, nil
}

// churnGraceBench is `bench churn --grace`: the start latency of pods
// started while deletions wait out their grace period, next to that of
// pods started beside as many running pods (the floor: the same number
// of pods on the node, none deleting) and on an empty node, on one
// manager in one run.
func churnGraceBench(ctx context.Context, o ChurnOptions, cfg ChurnConfig, client *cri.Client, host *churnHost) error {
	mgr, stop, err := startChurnManager(ctx, o, cfg, client, host)
	if err != nil {
		return err
	}
	rows, err := RunChurnGrace(ctx, mgr, cfg)
	stop()
	if err != nil {
		return fmt.Errorf("nodeguard: %w", err)
	}
	w := o.Report
	fmt.Fprintf(w, "\n%d pods, %d in parallel, grace %v (waited out in full), runtime %s\n", cfg.Pods, cfg.Parallel, cfg.Grace, client.Runtime().Version)
	WriteChurnGraceTable(w, rows)
	quiet, floor, during := rows[0], rows[1], rows[2]
	fmt.Fprintf(w, "startup p99 while %d deletions are in grace / beside %d running pods (the floor) = %.2f (target <= 1.20); / on an empty node = %.2f\n",
		cfg.Pods, cfg.Pods, float64(during.Startup.P99)/float64(floor.Startup.P99), float64(during.Startup.P99)/float64(quiet.Startup.P99))
	if o.OutDir == "" {
		return nil
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(o.OutDir, "churn-grace.csv")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	_ = cw.Write([]string{"starts", "pods", "parallel", "grace_s", "n", "start_p50_ms", "start_p99_ms", "start_max_ms", "delete_p50_ms", "delete_p99_ms", "min_in_grace"})
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }
	for _, r := range rows {
		_ = cw.Write([]string{r.Name, strconv.Itoa(cfg.Pods), strconv.Itoa(cfg.Parallel), strconv.Itoa(int(cfg.Grace.Seconds())), strconv.Itoa(r.Startup.N),
			ms(r.Startup.P50), ms(r.Startup.P99), ms(r.Startup.Max), ms(r.Deletion.P50), ms(r.Deletion.P99), strconv.Itoa(r.InFlight)})
	}
	cw.Flush()
	if err := errors.Join(cw.Error(), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Fprintf(w, "wrote %s\n", path)
	return nil
}

// churnHost is what a pod benchmark runs a lifecycle.Manager on: the
// cgroup layout, the pod cgroups beneath cgroupRoot, a temporary state
// directory and the node's memory.
type churnHost struct {
	layout *cgroups.Layout
	cg     *kubepods.Cgroups
	root   string
	mi     nodestats.Meminfo
}

// newChurnHost prepares a churnHost; cleanup removes its state directory.
func newChurnHost(ctx context.Context, cgroupRoot, prefix string) (_ *churnHost, cleanup func(), err error) {
	h := &churnHost{}
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

// dialCRI dials a runtime's CRI socket, bounded.
func dialCRI(ctx context.Context, endpoint string) (*cri.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return cri.Dial(dctx, endpoint, 10*time.Second)
}
