//go:build nodelane

package nodelane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeguard/nodeguard/lab/nodevm"
)

// The race check's own bounds (the race's is its mode's RaceSet.Bound).
const (
	// raceStopDelay: after the race's bound, SIGTERM lets it remove its
	// pods (bench's cleanup takes up to 3 min) and stop its agent (30 s);
	// then it is killed, and its agent with it (its parent-death signal).
	raceStopDelay = 4 * time.Minute
	// sandboxGoneBound: crictl stopp and rmp of a sandbox, under TCG.
	sandboxGoneBound = 60 * time.Second
)

// race runs the OOM race (`nodeguard bench eviction`) on the node's
// containerd with the systemd driver, as docs/benchmarks.md's "inside the node
// lane" table was measured, and writes its files to the output disk. It
// fails when the race errs or when nodeguard's own trials were lost to the
// kernel OOM killer or evicted another pod than the hog; its latencies
// are printed, not judged.
func (n *node) race(t *testing.T) {
	mode, err := nodevm.ParseRace(os.Getenv(nodevm.EnvRace))
	if err != nil {
		t.Fatal(err)
	}
	set, ok := nodevm.Race(mode)
	if !ok {
		t.Skipf("%s=%s", nodevm.EnvRace, mode)
	}
	outRoot := os.Getenv(nodevm.EnvOutDir)
	if outRoot == "" {
		t.Fatalf("%s is not set: the lane script mounts the output disk and exports where", nodevm.EnvOutDir)
	}
	out := filepath.Join(outRoot, "race-"+mode)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}

	// The race's own agent takes over kubepods: the node's must not run.
	if o, err := systemctl(startCmdBound, "stop", "nodeguard"); err != nil {
		t.Fatalf("systemctl stop nodeguard: %v %s", err, o)
	}
	if active, sub, pid, err := agent(); err != nil || active == "active" || pid != 0 {
		t.Fatalf("nodeguard.service after systemctl stop: %s/%s main pid %d (%v)", active, sub, pid, err)
	}
	// The layout: containerd's systemd driver (the cgroupfs
	// check left it off).
	setSystemdCgroup(t, true)
	removeSandboxes(t)

	budget := resource.MustParse(nodevm.RaceBudget)
	avail, err := meminfo("MemAvailable")
	if err != nil {
		t.Fatal(err)
	}
	if avail < 2*budget.Value() {
		t.Fatalf("MemAvailable %d MiB: the race's budget %s may be at most half of it", avail>>20, nodevm.RaceBudget)
	}

	args := []string{"bench", "eviction", "--runtime-endpoint", RuntimeEndpoint, "--cgroup-driver", CgroupDriver, "--cgroup-root", CgroupRoot,
		"--budget", nodevm.RaceBudget, "--threshold", nodevm.RaceThreshold, "--rates", set.Rates, "--trials", strconv.Itoa(set.Trials),
		"--out", out, "--log-level", "warn"}
	t.Logf("race %s: nodeguard %s (bounded by %s); MemAvailable %d MiB, guest load average %s", mode, strings.Join(args, " "), set.Bound,
		avail>>20, guestLoad())
	report, took, runErr := runRace(t, args, set.Bound, out)
	for _, l := range strings.Split(strings.TrimSpace(reportTable(report)), "\n") {
		t.Log(l)
	}
	t.Logf("race %s took %s; guest load average %s", mode, took.Round(time.Second), guestLoad())
	if runErr != nil {
		t.Errorf("the race failed: %v", runErr)
	}

	b, err := os.ReadFile(filepath.Join(out, "eviction.csv"))
	if err != nil {
		t.Fatalf("the race's CSV: %v", err)
	}
	trials, err := ParseRaceCSV(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range SummarizeRace(trials) {
		t.Log(s.String())
	}
	rates := len(strings.Split(set.Rates, ","))
	for _, f := range RaceFaults(trials, "nodeguard", rates*set.Trials) {
		t.Error(f)
	}
	if st, err := os.Stat(filepath.Join(out, "eviction.png")); err != nil || st.Size() == 0 {
		t.Errorf("the race's plot: %v", err)
	}
	if sbs, err := criPods(); err == nil && len(sbs) > 0 {
		t.Logf("the race left %d sandboxes", len(sbs))
	}
}

// runRace runs the installed nodeguard with args, its report (stdout) to
// out/report.txt and returned, its progress (stderr) to out/progress.log
// with each trial's line logged as it comes. At bound it gets SIGTERM, and
// is killed raceStopDelay later.
func runRace(t *testing.T, args []string, bound time.Duration, out string) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	progress, err := os.Create(filepath.Join(out, "progress.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer progress.Close()
	var report bytes.Buffer
	cmd := exec.CommandContext(ctx, "/usr/local/bin/nodeguard", args...)
	cmd.Stdout = &report
	lines := &lineLogger{log: func(l string) {
		if strings.HasPrefix(l, "trial ") {
			t.Log(l)
		}
	}}
	cmd.Stderr = io.MultiWriter(progress, lines)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = raceStopDelay
	t0 := time.Now()
	err = cmd.Run()
	took := time.Since(t0)
	lines.flush()
	if ctx.Err() != nil {
		err = fmt.Errorf("stopped after its bound of %s (%w): %v", bound, ctx.Err(), err)
	}
	if err != nil {
		err = fmt.Errorf("nodeguard %s: %w; its progress ends:\n%s", strings.Join(args[:2], " "), err, tail(lines.all(), 15))
	}
	if werr := os.WriteFile(filepath.Join(out, "report.txt"), report.Bytes(), 0o644); werr != nil {
		t.Error(werr)
	}
	return report.String(), took, err
}

// reportTable is the race's report from its "OOM race:" heading on (the
// table, the ratios and nodeguard's targets), without the lines before.
func reportTable(report string) string {
	if i := strings.Index(report, "OOM race:"); i >= 0 {
		return report[i:]
	}
	return report
}

// lineLogger calls log with each complete line written to it, and keeps
// them all.
type lineLogger struct {
	log     func(string)
	mu      sync.Mutex
	partial []byte
	lines   []string
}

func (w *lineLogger) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		l := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		w.lines = append(w.lines, l)
		w.log(l)
	}
}

func (w *lineLogger) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		l := string(w.partial)
		w.partial = nil
		w.lines = append(w.lines, l)
		w.log(l)
	}
}

func (w *lineLogger) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// guestLoad is the guest's /proc/loadavg, its first three figures.
func guestLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// setSystemdCgroup writes containerd's runc SystemdCgroup option, restarts
// containerd and waits until its CRI reports the value.
func setSystemdCgroup(t *testing.T, on bool) {
	t.Helper()
	b, err := os.ReadFile(containerdConfig)
	if err != nil {
		t.Fatal(err)
	}
	from, to := "SystemdCgroup = true", "SystemdCgroup = false"
	if on {
		from, to = to, from
	}
	if !bytes.Contains(b, []byte(from)) && !bytes.Contains(b, []byte(to)) {
		t.Fatalf("%s has no SystemdCgroup setting", containerdConfig)
	}
	if bytes.Contains(b, []byte(from)) {
		if err := os.WriteFile(containerdConfig, bytes.ReplaceAll(b, []byte(from), []byte(to)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := systemctl(containerdBound, "restart", "containerd"); err != nil {
			t.Fatalf("systemctl restart containerd: %v %s", err, out)
		}
	}
	want := "cgroupfs"
	if on {
		want = "systemd"
	}
	reported := "not reported"
	d, err := waitFor(fmt.Sprintf("containerd's CRI with SystemdCgroup=%v", on), containerdBound, func() (bool, string, error) {
		info, err := crictl("info")
		if err != nil {
			return false, err.Error(), nil
		}
		systemd, _, ok, err := RuncSystemdCgroup(info)
		if !ok || err != nil || systemd != on {
			return false, fmt.Sprintf("systemd %v ok %v err %v", systemd, ok, err), nil
		}
		// A runtime that reports its driver (RuntimeConfig) must report
		// the new one too.
		switch driver, err := runtimeDriver(); {
		case errors.Is(err, ErrNotReported):
			return true, "", nil
		case err != nil:
			return false, err.Error(), nil
		default:
			reported = driver
			return driver == want, "RuntimeConfig reports " + driver, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd's CRI has SystemdCgroup=%v, RuntimeConfig cgroup driver %s (%s)", on, reported, d.Round(time.Millisecond))
}

// removeSandboxes stops and removes every sandbox containerd has, and
// fails t unless none is left.
func removeSandboxes(t *testing.T) {
	t.Helper()
	sbs, err := criPods()
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		t.Logf("removing sandbox %s (%s/%s) left by an earlier check", sb.ID[:12], sb.Metadata.Namespace, sb.Metadata.Name)
		if _, err := crictl("stopp", sb.ID); err != nil {
			t.Error(err)
		}
		if _, err := crictl("rmp", sb.ID); err != nil {
			t.Error(err)
		}
	}
	if _, err := waitFor("no sandbox", sandboxGoneBound, func() (bool, string, error) {
		sbs, err := criPods()
		if err != nil {
			return false, err.Error(), nil
		}
		return len(sbs) == 0, fmt.Sprintf("%d sandboxes", len(sbs)), nil
	}); err != nil {
		t.Fatal(err)
	}
}
