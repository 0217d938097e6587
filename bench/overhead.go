package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle/api"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture (the kernel exports it as a constant to
// user space whatever its internal HZ).
const clockTicks = 100

// The budget the overhead benchmark prints next to nodeguard's figures, and
// the kubelet's for comparison (its default system-reserved share on a
// small node, as cloud providers size it).
const (
	TargetIdleCores = 0.05
	TargetRSSBytes  = 80 << 20
	KubeletCores    = 0.35
	KubeletRSSBytes = 300 << 20
)

// ProcUsage is one reading of a process: its CPU time so far, its
// resident set and when it started.
type ProcUsage struct {
	// CPU: user + system time of the process and of the children it has
	// waited for (runc under a shim, CNI plugins under containerd): they
	// ran for it, and the kubelet's budget counts its cgroup, children
	// included.
	CPU   time.Duration
	RSS   uint64        // bytes
	Start time.Duration // after boot
}

// ParseStat returns utime + stime + cutime + cstime and starttime from the
// content of /proc/<pid>/stat. The command name (field 2) may hold spaces
// and parentheses, so the fields are counted after its LAST ')'.
func ParseStat(b []byte) (cpu, start time.Duration, err error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, errors.New("parse stat: no ')' after the command name")
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state is field 3 (f[0]), utime, stime, cutime and
	// cstime fields 14-17, starttime field 22.
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("parse stat: %d fields after the command name, want at least 20", len(f))
	}
	var ticks [5]uint64
	for j, k := range []int{11, 12, 13, 14, 19} {
		v, err := strconv.ParseUint(f[k], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse stat: field %d: %w", k+3, err)
		}
		ticks[j] = v
	}
	const tick = time.Second / clockTicks
	return time.Duration(ticks[0]+ticks[1]+ticks[2]+ticks[3]) * tick, time.Duration(ticks[4]) * tick, nil
}

// ParseUptime returns the first figure of /proc/uptime: the time since
// boot, on the clock of a process's starttime.
func ParseUptime(b []byte) (time.Duration, error) {
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("parse uptime: empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("parse uptime: %q: want seconds since boot", f[0])
	}
	return time.Duration(v * float64(time.Second)), nil
}

// ParseStatusRSS returns VmRSS in bytes from the content of
// /proc/<pid>/status. A kernel thread or a zombie has no VmRSS line: that
// is ok == false, not 0.
func ParseStatusRSS(b []byte) (rss uint64, ok bool, err error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		rest, found := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !found {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) != 2 || f[1] != "kB" {
			return 0, false, fmt.Errorf("parse status: VmRSS line %q", line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("parse status: VmRSS: %w", err)
		}
		return kb << 10, true, nil
	}
	return 0, false, nil
}

// ReadProcUsage reads the usage of process pid from procDir (/proc). A
// process that is gone gives an error matching os.ErrNotExist, also when
// it exits between the open and the read of a file (ESRCH: a shim of a
// churned pod does, now and then).
func ReadProcUsage(procDir string, pid int) (ProcUsage, error) {
	base := filepath.Join(procDir, strconv.Itoa(pid))
	stat, err := readProcFile(filepath.Join(base, "stat"))
	if err != nil {
		return ProcUsage{}, err
	}
	cpu, start, err := ParseStat(stat)
	if err != nil {
		return ProcUsage{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	status, err := readProcFile(filepath.Join(base, "status"))
	if err != nil {
		return ProcUsage{}, err
	}
	rss, _, err := ParseStatusRSS(status)
	if err != nil {
		return ProcUsage{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return ProcUsage{CPU: cpu, RSS: rss, Start: start}, nil
}

// readProcFile reads a file of a process's /proc directory; the process
// gone while it is read (ESRCH) is os.ErrNotExist, as gone before.
func readProcFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, syscall.ESRCH) {
		return nil, fmt.Errorf("%w: %w", os.ErrNotExist, err)
	}
	return b, err
}

// FindProcs returns the pids in procDir whose argv (cmdline split on NUL)
// satisfies match. Processes that vanish while it looks are skipped.
func FindProcs(procDir string, match func(argv []string) bool) ([]int, error) {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", procDir, err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(procDir, e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// ProcGroup is a set of processes measured as one row, e.g. "containerd
// shims". PIDs is asked again at every sample, since shims come and go.
type ProcGroup struct {
	Name string
	PIDs func() ([]int, error)
}

// GroupSeries is what sampling one group over a window gave.
type GroupSeries struct {
	Name  string
	Cores []float64 // per interval: CPU seconds used / wall seconds
	RSS   []uint64  // per sample: the group's summed resident set
	Procs []int     // per sample: processes in the group
}

// MeanCores is the mean CPU use over the window, in cores.
func (s GroupSeries) MeanCores() float64 {
	if len(s.Cores) == 0 {
		return 0
	}
	var sum float64
	for _, c := range s.Cores {
		sum += c
	}
	return sum / float64(len(s.Cores))
}

// MaxRSS is the largest resident set sampled.
func (s GroupSeries) MaxRSS() uint64 {
	var m uint64
	for _, r := range s.RSS {
		m = max(m, r)
	}
	return m
}

// Sample reads every group each interval for window and returns one
// series per group. The CPU of an interval is the sum, over the group's
// processes, of their CPU time difference; a process that started within
// the interval (its starttime after the last reading, by /proc/uptime)
// counts whole. A process that exits within an interval loses its last
// partial interval (small against a 1 s interval for the agent and
// containerd; the shims of churned pods, which live a few seconds, lose
// their teardown). Clock time is measured, not assumed, so a late tick
// does not inflate the rate.
func Sample(ctx context.Context, procDir string, groups []ProcGroup, window, interval time.Duration) ([]GroupSeries, error) {
	out := make([]GroupSeries, len(groups))
	prev := make([]map[int]time.Duration, len(groups))
	// prevUp: uptime at the previous reading; 0 when unknown (then a new
	// process counts from its first reading only).
	var prevUp time.Duration
	read := func() (time.Time, error) {
		now := time.Now()
		var up time.Duration
		if b, err := os.ReadFile(filepath.Join(procDir, "uptime")); err == nil {
			if up, err = ParseUptime(b); err != nil {
				return now, err
			}
		}
		for i, g := range groups {
			pids, err := g.PIDs()
			if err != nil {
				return now, fmt.Errorf("sample %s: %w", g.Name, err)
			}
			cur := make(map[int]time.Duration, len(pids))
			var rss uint64
			var born time.Duration // CPU of processes started since the last reading
			for _, pid := range pids {
				u, err := ReadProcUsage(procDir, pid)
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				if err != nil {
					return now, fmt.Errorf("sample %s: %w", g.Name, err)
				}
				cur[pid] = u.CPU
				rss += u.RSS
				if _, seen := prev[i][pid]; !seen && prevUp > 0 && u.Start >= prevUp {
					born += u.CPU
				}
			}
			out[i].Name = g.Name
			out[i].RSS = append(out[i].RSS, rss)
			out[i].Procs = append(out[i].Procs, len(cur))
			if prev[i] != nil {
				used := born
				for pid, c := range cur {
					if p, ok := prev[i][pid]; ok && c >= p {
						used += c - p
					}
				}
				out[i].Cores = append(out[i].Cores, float64(used))
			}
			prev[i] = cur
		}
		prevUp = up
		return now, nil
	}
	last, err := read()
	if err != nil {
		return nil, err
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	end := last.Add(window)
	for last.Before(end) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		now, err := read()
		if err != nil {
			return nil, err
		}
		wall := float64(now.Sub(last))
		for i := range out {
			n := len(out[i].Cores) - 1
			out[i].Cores[n] /= wall
		}
		last = now
	}
	return out, nil
}

// PodClient is the agent's pod API as the overhead benchmark drives it:
// lifecycle/api's Client. Get of a missing pod returns an error wrapping
// api.ErrNotFound.
type PodClient interface {
	Apply(ctx context.Context, manifest []byte, source string) (*corev1.PodList, error)
	Delete(ctx context.Context, namespace, name string) error
	Get(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	List(ctx context.Context) (*corev1.PodList, error)
}

// OverheadConfig chooses the overhead scenario.
type OverheadConfig struct {
	Pods        []int         // running pod counts to measure at, ascending; default 110
	Window      time.Duration // each phase (idle, churn); default 60 s
	Interval    time.Duration // sampling period; default 1 s
	Parallel    int           // applies (and deletes) in flight while filling and churning; default 4
	Image       string        // the busybox image
	MemoryLimit string        // each pod's memory limit; default 16Mi
	ProcDir     string        // default /proc
	Progress    io.Writer     // progress lines; nil is silent
	// Profile, when set, runs beside every window (idle and churn) for
	// its length, e.g. to take the agent's CPU profile of it; the window
	// waits for it, and its error ends the benchmark.
	Profile func(ctx context.Context, pods int, phase string, window time.Duration) error
	// Probes, when set, adds a "probed" window at every pod count: the
	// pods are swapped for as many with a readiness and a liveness probe
	// each, of these kinds in turn (ProbeKinds), every ProbePeriod
	// (default 10 s). ProbeTotals reads the agent's prober_probe_total
	// before and after that window, for the probe rate achieved.
	Probes      []string
	ProbePeriod time.Duration
	ProbeTotals func(ctx context.Context) (ProbeTotals, error)
	// RuntimeView: the client's pods are what the runtime reports
	// (bench/staticpods), not what an agent says. Each container's start
	// is then stamped to the nanosecond, so a churned pod's start is
	// timed to it instead of to when a poll saw it Running (the agent's
	// API rounds startedAt to the second); readiness is unknown, so the
	// probed window waits for Running and then two probe periods.
	RuntimeView bool
	// MaxPods, when set, is the most pods the agent admits; the fill and
	// the churn workers together must stay within it.
	MaxPods int
	// ChurnRate, when positive, churns in an open loop: a pod is applied
	// every 1/ChurnRate seconds whatever the agent's pace, with at most
	// ChurnInFlight() of them in flight (an arrival beyond is skipped and
	// counted). Agents are then timed under the same load; the closed
	// loop of Parallel workers gives a faster agent more pods to start.
	ChurnRate float64
}

// ChurnInFlight is the most churned pods in flight at once: the workers
// of the closed loop, twice as many in the open one.
func (c OverheadConfig) ChurnInFlight() int {
	if c.ChurnRate > 0 {
		return 2 * c.Parallel
	}
	return c.Parallel
}

func (c OverheadConfig) withDefaults() OverheadConfig {
	if len(c.Pods) == 0 {
		c.Pods = []int{110}
	}
	if c.Window == 0 {
		c.Window = 60 * time.Second
	}
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Parallel == 0 {
		c.Parallel = 4
	}
	if c.MemoryLimit == "" {
		c.MemoryLimit = "16Mi"
	}
	if c.ProcDir == "" {
		c.ProcDir = "/proc"
	}
	if c.ProbePeriod == 0 {
		c.ProbePeriod = 10 * time.Second
	}
	return c
}

// OverheadRow is one group's figures in one phase.
type OverheadRow struct {
	Pods      int
	Phase     string // "idle", "churn" or "probed"
	Process   string
	MeanCores float64
	MaxRSS    uint64
	Procs     int // processes in the group at the last sample
	Churned   int // pods applied and deleted during the phase (churn only)
	// ChurnSkipped are the open loop's arrivals skipped because
	// ChurnInFlight pods were in flight (churn only).
	ChurnSkipped int
	// Start and Delete are the churned pods' apply -> Running and
	// delete -> gone (churn only).
	Start, Delete Summary
	// Probes and ProbesFailed are the agent's probes over ProbeWindow
	// (probed only).
	Probes, ProbesFailed uint64
	ProbeWindow          time.Duration
	Series               GroupSeries
}

// overheadNamespace holds every pod of the benchmark.
const overheadNamespace = "bench"

// overheadManifest is a pod that sleeps for an hour in a few MiB.
func overheadManifest(name, image, memory string) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - name: main
    image: %s
    command: [sleep, "3600"]
    resources: {limits: {memory: %s}}
`, name, overheadNamespace, image, memory)
}

// RunOverhead measures groups (the agent first, then the runtime's
// processes) with the agent running each count of cfg.Pods pods: it fills
// up to the count through c, waits until all run, samples an idle window,
// then samples a churn window during which cfg.Parallel workers apply a
// fresh pod, wait for it to run, delete it and wait for it to be gone, over
// and over. Every pod it made is deleted before it returns, on error too.
func RunOverhead(ctx context.Context, c PodClient, groups []ProcGroup, cfg OverheadConfig) (rows []OverheadRow, retErr error) {
	cfg = cfg.withDefaults()
	if len(cfg.Probes) > 0 && cfg.ProbeTotals == nil {
		return nil, errors.New("bench overhead: probes without a way to read the agent's probe totals")
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		defer cancel()
		progressf(cfg.Progress, "overhead: deleting every benchmark pod")
		retErr = errors.Join(retErr, deleteAll(cctx, c, cfg))
	}()
	running := 0
	for _, n := range cfg.Pods {
		if n < running {
			return rows, fmt.Errorf("bench overhead: pod counts must ascend (%d after %d)", n, running)
		}
		if cfg.MaxPods > 0 && n+cfg.ChurnInFlight() > cfg.MaxPods {
			return rows, fmt.Errorf("bench overhead: %d pods and %d churned in flight need maxPods %d, the agent admits %d", n, cfg.ChurnInFlight(), n+cfg.ChurnInFlight(), cfg.MaxPods)
		}
		progressf(cfg.Progress, "overhead: applying pods %d..%d, %d at a time", running, n-1, cfg.Parallel)
		t0 := time.Now()
		_, err := parallel(ctx, n-running, cfg.Parallel, func(ctx context.Context, i int) error {
			name := fmt.Sprintf("idle-%d", running+i)
			_, err := c.Apply(ctx, overheadManifest(name, cfg.Image, cfg.MemoryLimit), "bench-overhead/"+name)
			return err
		})
		if err != nil {
			return rows, fmt.Errorf("bench overhead: apply: %w", err)
		}
		if err := waitPods(ctx, c, cfg.Progress, "idle-", n, 10*time.Minute, podRunning); err != nil {
			return rows, err
		}
		running = n
		progressf(cfg.Progress, "overhead: %d pods running after %s; idle window of %s", n, time.Since(t0).Round(time.Second), cfg.Window)
		wait := cfg.profile(ctx, n, "idle")
		idle, err := Sample(ctx, cfg.ProcDir, groups, cfg.Window, cfg.Interval)
		if err = errors.Join(err, wait()); err != nil {
			return rows, err
		}
		rows = append(rows, overheadRows(n, "idle", 0, idle)...)
		progressf(cfg.Progress, "overhead: %d pods: churn window of %s", n, cfg.Window)
		wait = cfg.profile(ctx, n, "churn")
		series, churn, err := sampleChurn(ctx, c, groups, cfg)
		if err = errors.Join(err, wait()); err != nil {
			return rows, err
		}
		churnRows := overheadRows(n, "churn", len(churn.starts), series)
		start, del := Summarize(churn.starts), Summarize(churn.deletes)
		for i := range churnRows {
			churnRows[i].Start, churnRows[i].Delete, churnRows[i].ChurnSkipped = start, del, churn.skipped
		}
		if churn.skipped > 0 {
			progressf(cfg.Progress, "overhead: %d pods: %d of the churn's arrivals skipped: %d pods were in flight", n, churn.skipped, cfg.ChurnInFlight())
		}
		rows = append(rows, churnRows...)
		progressf(cfg.Progress, "overhead: %d pods: %d pods applied and deleted during the churn window (start p50 %s p99 %s, delete p50 %s p99 %s)",
			n, len(churn.starts), start.P50.Round(time.Millisecond), start.P99.Round(time.Millisecond), del.P50.Round(time.Millisecond), del.P99.Round(time.Millisecond))
		if len(cfg.Probes) > 0 {
			probed, err := sampleProbed(ctx, c, groups, cfg, n, n != cfg.Pods[len(cfg.Pods)-1])
			rows = append(rows, probed...)
			if err != nil {
				return rows, err
			}
		}
	}
	return rows, nil
}

// profile starts cfg.Profile for one window, if set; the returned wait
// gives its error.
func (c OverheadConfig) profile(ctx context.Context, pods int, phase string) (wait func() error) {
	if c.Profile == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- c.Profile(ctx, pods, phase, c.Window) }()
	return func() error {
		if err := <-done; err != nil {
			return fmt.Errorf("bench overhead: profile of %d pods %s: %w", pods, phase, err)
		}
		return nil
	}
}

func overheadRows(pods int, phase string, churned int, series []GroupSeries) []OverheadRow {
	rows := make([]OverheadRow, len(series))
	for i, s := range series {
		rows[i] = OverheadRow{Pods: pods, Phase: phase, Process: s.Name, MeanCores: s.MeanCores(), MaxRSS: s.MaxRSS(), Churned: churned, Series: s}
		if len(s.Procs) > 0 {
			rows[i].Procs = s.Procs[len(s.Procs)-1]
		}
	}
	return rows
}

// churnTimes are the churned pods' apply -> Running and delete -> gone,
// and the open loop's skipped arrivals.
type churnTimes struct {
	starts, deletes []time.Duration
	skipped         int
}

// sampleChurn samples for cfg.Window while pods are churned: by
// cfg.Parallel workers, each starting its next pod when its last is gone,
// or, with cfg.ChurnRate, one pod every 1/ChurnRate seconds. It waits for
// the last pods to be gone before it returns.
func sampleChurn(ctx context.Context, c PodClient, groups []ProcGroup, cfg OverheadConfig) ([]GroupSeries, churnTimes, error) {
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var times churnTimes
	seq := 0
	var churnErr error
	one := func() {
		mu.Lock()
		name := fmt.Sprintf("churn-%d", seq)
		seq++
		mu.Unlock()
		start, del, err := churnOne(cctx, ctx, c, name, cfg)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			times.starts = append(times.starts, start)
			times.deletes = append(times.deletes, del)
		case cctx.Err() == nil && churnErr == nil:
			churnErr = err
			stop()
		}
	}
	if cfg.ChurnRate > 0 {
		// The launcher holds a count of wg while it adds its pods', so
		// that wg.Wait never sees zero before it is done.
		wg.Add(1)
		go func() {
			defer wg.Done()
			inFlight := make(chan struct{}, cfg.ChurnInFlight())
			tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.ChurnRate))
			defer tick.Stop()
			for {
				select {
				case <-cctx.Done():
					return
				case <-tick.C:
				}
				select {
				case inFlight <- struct{}{}:
				default:
					mu.Lock()
					times.skipped++
					mu.Unlock()
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-inFlight }()
					one()
				}()
			}
		}()
	} else {
		for w := 0; w < cfg.Parallel; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for cctx.Err() == nil {
					one()
				}
			}()
		}
	}
	series, err := Sample(ctx, cfg.ProcDir, groups, cfg.Window, cfg.Interval)
	stop()
	wg.Wait()
	return series, times, errors.Join(err, churnErr)
}

// churnOne applies pod name, waits until it runs, deletes it and waits
// until it is gone, and returns how long each took: to Running as the
// runtime stamped the container's start when the client carries it
// (cfg.RuntimeView), else as a poll saw it; to gone as a poll saw it.
// Once run is cancelled it stops applying, but a pod it made is still
// deleted under ctx.
func churnOne(run, ctx context.Context, c PodClient, name string, cfg OverheadConfig) (start, del time.Duration, err error) {
	t0 := time.Now()
	if _, err := c.Apply(run, overheadManifest(name, cfg.Image, cfg.MemoryLimit), "bench-overhead/"+name); err != nil {
		if run.Err() != nil {
			return 0, 0, run.Err()
		}
		return 0, 0, fmt.Errorf("bench overhead: churn apply %s: %w", name, err)
	}
	var running *corev1.Pod
	waitErr := waitPod(run, c, name, func(p *corev1.Pod) bool {
		if p != nil && p.Status.Phase == corev1.PodRunning {
			running = p
			return true
		}
		return false
	})
	start = time.Since(t0)
	if at, ok := runtimeStart(running); ok && cfg.RuntimeView && at.After(t0) && at.Sub(t0) < start {
		start = at.Sub(t0)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	t1 := time.Now()
	if err := c.Delete(dctx, overheadNamespace, name); err != nil {
		return 0, 0, fmt.Errorf("bench overhead: churn delete %s: %w", name, err)
	}
	if err := waitPod(dctx, c, name, func(p *corev1.Pod) bool { return p == nil }); err != nil {
		return 0, 0, fmt.Errorf("bench overhead: churn %s never went away: %w", name, err)
	}
	return start, time.Since(t1), waitErr
}

// runtimeStart is when the last of p's containers started, as its status
// says.
func runtimeStart(p *corev1.Pod) (time.Time, bool) {
	if p == nil || len(p.Status.ContainerStatuses) == 0 {
		return time.Time{}, false
	}
	var last time.Time
	for _, cs := range p.Status.ContainerStatuses {
		r := cs.State.Running
		if r == nil || r.StartedAt.IsZero() {
			return time.Time{}, false
		}
		if r.StartedAt.After(last) {
			last = r.StartedAt.Time
		}
	}
	return last, true
}

// waitPod polls until pred holds for pod name (nil when it does not
// exist). It asks for that pod alone: a churn worker listing every pod
// five times a second would charge the agent for JSON it only reads to
// find one pod (it was 40% of the agent's CPU during churn at 110 pods).
func waitPod(ctx context.Context, c PodClient, name string, pred func(*corev1.Pod) bool) error {
	for {
		p, err := c.Get(ctx, overheadNamespace, name)
		switch {
		case errors.Is(err, api.ErrNotFound):
			p = nil
		case err != nil:
			return err
		}
		if pred(p) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// podRunning: the pod's phase is Running.
func podRunning(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

// waitPods polls until want pods named prefix* are done (running, or
// ready), for at most limit.
func waitPods(ctx context.Context, c PodClient, progress io.Writer, prefix string, want int, limit time.Duration, done func(*corev1.Pod) bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	lastReport := time.Now()
	for {
		l, err := c.List(ctx)
		if err != nil {
			return fmt.Errorf("bench overhead: list pods: %w", err)
		}
		n, failed := 0, ""
		for _, p := range l.Items {
			if p.Namespace != overheadNamespace || !strings.HasPrefix(p.Name, prefix) {
				continue
			}
			switch {
			case done(&p):
				n++
			case p.Status.Phase == corev1.PodFailed:
				failed = p.Name + ": " + p.Status.Message
			}
		}
		switch {
		case failed != "":
			return fmt.Errorf("bench overhead: pod failed: %s", failed)
		case n >= want:
			return nil
		}
		if time.Since(lastReport) >= 10*time.Second {
			progressf(progress, "overhead: %d of %d pods running", n, want)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench overhead: %d of %d pods running: %w", n, want, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// deleteAll deletes every pod of the benchmark's namespace and waits until
// the agent reports none.
func deleteAll(ctx context.Context, c PodClient, cfg OverheadConfig) error {
	l, err := c.List(ctx)
	if err != nil {
		return fmt.Errorf("bench overhead: list pods: %w", err)
	}
	var names []string
	for _, p := range l.Items {
		if p.Namespace == overheadNamespace {
			names = append(names, p.Name)
		}
	}
	if _, err := parallel(ctx, len(names), max(cfg.Parallel, 8), func(ctx context.Context, i int) error {
		return c.Delete(ctx, overheadNamespace, names[i])
	}); err != nil {
		return fmt.Errorf("bench overhead: delete: %w", err)
	}
	for {
		l, err := c.List(ctx)
		if err != nil {
			return fmt.Errorf("bench overhead: list pods: %w", err)
		}
		left := 0
		for _, p := range l.Items {
			if p.Namespace == overheadNamespace {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench overhead: %d pods left: %w", left, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// ms renders a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }

// msField is a CSV field in milliseconds; empty for none.
func msField(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64)
}

// mib renders bytes in MiB.
func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// WriteOverheadTable prints the rows, with the target next to nodeguard's.
func WriteOverheadTable(w io.Writer, rows []OverheadRow, agent string) {
	fmt.Fprintf(w, "%6s  %-6s  %-18s %6s %11s %12s  %s\n", "pods", "phase", "process", "procs", "mean cores", "max RSS", "target")
	for _, r := range rows {
		target := ""
		if r.Process == agent && r.Phase == "idle" {
			target = fmt.Sprintf("<= %.2f core, <= %s at 110 pods (kubelet: %.2f core, %s)",
				TargetIdleCores, mib(TargetRSSBytes), KubeletCores, mib(KubeletRSSBytes))
			if r.Pods <= 110 {
				target = verdict(r.MeanCores <= TargetIdleCores && r.MaxRSS <= TargetRSSBytes) + ": " + target
			}
		}
		fmt.Fprintf(w, "%6d  %-6s  %-18s %6d %11.3f %12s  %s\n", r.Pods, r.Phase, r.Process, r.Procs, r.MeanCores, mib(r.MaxRSS), target)
	}
	for _, r := range rows {
		switch {
		case r.Phase == "churn" && r.Process == agent:
			fmt.Fprintf(w, "churn at %d pods: %d pods applied, run and deleted during the window; to Running p50 %s p99 %s, to gone p50 %s p99 %s\n",
				r.Pods, r.Churned, ms(r.Start.P50), ms(r.Start.P99), ms(r.Delete.P50), ms(r.Delete.P99))
		case r.Phase == "probed" && r.Process == agent:
			fmt.Fprintf(w, "probed at %d pods: %d probes (%.1f/s, %d failed) in %s\n", r.Pods, r.Probes, r.ProbeRate(), r.ProbesFailed, r.ProbeWindow.Round(time.Second))
		}
	}
	// The agent idle with and without probes, side by side.
	idle := map[int]OverheadRow{}
	for _, r := range rows {
		if r.Process == agent && r.Phase == "idle" {
			idle[r.Pods] = r
		}
	}
	for _, r := range rows {
		if i, ok := idle[r.Pods]; ok && r.Process == agent && r.Phase == "probed" {
			fmt.Fprintf(w, "%s at %d pods: %.3f cores idle without probes, %.3f with %.1f probes/s (%+.3f cores, %s max RSS)\n",
				agent, r.Pods, i.MeanCores, r.MeanCores, r.ProbeRate(), r.MeanCores-i.MeanCores, mib(r.MaxRSS))
		}
	}
}

func verdict(ok bool) string {
	if ok {
		return "MET"
	}
	return "MISSED"
}

// WriteOverheadFiles writes overhead.csv (one line per row),
// overhead-samples.csv (every sample) and overhead.png (the agent's CPU and
// RSS over time, per phase) into dir, and returns their paths.
func WriteOverheadFiles(dir string, rows []OverheadRow, agent string, interval time.Duration) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	summary := [][]string{{"pods", "phase", "process", "procs", "mean_cores", "max_rss_bytes", "churned_pods", "probes", "probes_failed", "probes_per_second",
		"start_p50_ms", "start_p99_ms", "delete_p50_ms", "delete_p99_ms"}}
	samples := [][]string{{"pods", "phase", "process", "sample", "seconds", "cores", "rss_bytes", "procs"}}
	for _, r := range rows {
		summary = append(summary, []string{strconv.Itoa(r.Pods), r.Phase, r.Process, strconv.Itoa(r.Procs),
			strconv.FormatFloat(r.MeanCores, 'f', 4, 64), strconv.FormatUint(r.MaxRSS, 10), strconv.Itoa(r.Churned),
			strconv.FormatUint(r.Probes, 10), strconv.FormatUint(r.ProbesFailed, 10), strconv.FormatFloat(r.ProbeRate(), 'f', 2, 64),
			msField(r.Start.P50), msField(r.Start.P99), msField(r.Delete.P50), msField(r.Delete.P99)})
		for i, rss := range r.Series.RSS {
			cores := ""
			if i > 0 {
				cores = strconv.FormatFloat(r.Series.Cores[i-1], 'f', 4, 64)
			}
			samples = append(samples, []string{strconv.Itoa(r.Pods), r.Phase, r.Process, strconv.Itoa(i),
				strconv.FormatFloat((time.Duration(i) * interval).Seconds(), 'f', 0, 64), cores,
				strconv.FormatUint(rss, 10), strconv.Itoa(r.Series.Procs[i])})
		}
	}
	var files []string
	for name, recs := range map[string][][]string{"overhead.csv": summary, "overhead-samples.csv": samples} {
		path := filepath.Join(dir, name)
		if err := writeCSV(path, recs); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	png := filepath.Join(dir, "overhead.png")
	if err := overheadPNG(png, rows, agent, interval); err != nil {
		return files, err
	}
	return append(files, png), nil
}

func writeCSV(path string, recs [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	w := csv.NewWriter(f)
	_ = w.WriteAll(recs) // the error is w.Error, checked below
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// overheadPNG draws two stacked plots over sample time, one line per pod
// count and phase: the agent's CPU (cores) and its RSS (MiB).
func overheadPNG(path string, rows []OverheadRow, agent string, interval time.Duration) error {
	cpu, rss := plot.New(), plot.New()
	cpu.Title.Text = fmt.Sprintf("%s: CPU and RSS per 1 s sample (target <= %.2f core idle, <= %s)", agent, TargetIdleCores, mib(TargetRSSBytes))
	cpu.X.Label.Text, cpu.Y.Label.Text = "seconds into the window", "cores"
	rss.X.Label.Text, rss.Y.Label.Text = "seconds into the window", "RSS (MiB)"
	cpu.Legend.Top, rss.Legend.Top = true, true
	var lines []any
	var rssLines []any
	for _, r := range rows {
		if r.Process != agent {
			continue
		}
		label := fmt.Sprintf("%d pods, %s", r.Pods, r.Phase)
		c := make(plotter.XYs, len(r.Series.Cores))
		for i, v := range r.Series.Cores {
			c[i] = plotter.XY{X: (time.Duration(i+1) * interval).Seconds(), Y: v}
		}
		m := make(plotter.XYs, len(r.Series.RSS))
		for i, v := range r.Series.RSS {
			m[i] = plotter.XY{X: (time.Duration(i) * interval).Seconds(), Y: float64(v) / (1 << 20)}
		}
		lines = append(lines, label, c)
		rssLines = append(rssLines, label, m)
	}
	if err := plotutil.AddLines(cpu, lines...); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := plotutil.AddLines(rss, rssLines...); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	img := vgimg.New(9*vg.Inch, 8*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(12)}
	canvases := plot.Align([][]*plot.Plot{{cpu}, {rss}}, tiles, dc)
	cpu.Draw(canvases[0][0])
	rss.Draw(canvases[1][0])
	return writePNG(path, img)
}
