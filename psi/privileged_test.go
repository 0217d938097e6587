package psi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// Bounds of the privileged tests.
const (
	// hogLimit is the sandbox's memory limit and hogBytes what the hog
	// keeps resident: close enough that reclaim, refaults and OOM kills
	// of the hog keep memory stalls up (~7% of wall time measured here).
	hogLimit = 64 << 20
	hogBytes = "60M"
	// hogRun bounds the hog; stress-ng stops itself after it.
	hogRun = 8 * time.Second
	// wakeBound is how long a trigger may take to fire once the hog
	// runs: a 2 s unprivileged window is evaluated on the 2 s averaging
	// tick, so the first wake-up comes 2-4 s in; a 500 ms one sooner.
	wakeBound = 8 * time.Second
	// removalBound is how long the kernel may take to report a removed
	// cgroup's trigger (kernfs_notify runs from a workqueue).
	removalBound = 5 * time.Second
)

// hogStall is the trigger the hog must fire: 0.4% of the window, well
// below the stall the hog causes (it varied from 2% to 7% between runs on
// a loaded CI machine), and far above the 0% of an idle cgroup.
var hogStall = Trigger{Kind: KindSome, Stall: 2 * time.Millisecond, Window: MinWindow}

// capable reports whether this process may use windows below 2 s.
func capable(t testing.TB) bool {
	t.Helper()
	ok, err := hasCapSysResource()
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// hasCapSysResource reports whether CAP_SYS_RESOURCE is in this thread's
// effective set. (internal/host.HasCapability does the same; it is not
// imported so that internal/host can import this package without an
// import cycle in these tests.)
func hasCapSysResource() (bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3 carries 64 bits in two words
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("capget: %w", err)
	}
	const c = unix.CAP_SYS_RESOURCE
	return data[c/32].Effective&(1<<(c%32)) != 0, nil
}

// wantEffective is the trigger the kernel should grant to a process with
// or without CAP_SYS_RESOURCE.
func wantEffective(tr Trigger, capable bool) Trigger {
	if capable {
		return tr
	}
	slow, _ := unprivileged(tr)
	return slow
}

// cgroupPressure returns the memory.pressure file of a new sandbox with a
// memory limit of limit bytes (none when 0), on cgroup2: the sandbox's
// unified directory in the hybrid layout, its only directory on pure v2.
func cgroupPressure(t *testing.T, limit int64) (*cgtest.Sandbox, string) {
	t.Helper()
	var opts []cgtest.Option
	if limit > 0 {
		opts = append(opts, cgtest.WithMemoryLimit(limit))
	}
	sb := cgtest.New(t, opts...)
	cgtest.Need(t, sb.UnifiedDir() != "", "no cgroup2 hierarchy: per-cgroup PSI needs one")
	p := filepath.Join(sb.UnifiedDir(), Memory.CgroupFile())
	_, err := os.Stat(p)
	cgtest.Need(t, err == nil, fmt.Sprintf("per-cgroup PSI: %v", err))
	return sb, p
}

// startHog starts stress-ng in sb, keeping hogBytes resident for hogRun.
// The returned wait kills the hog, waits for it and returns its output; it
// also runs at cleanup, so the hog never outlives the test.
func startHog(t *testing.T, sb *cgtest.Sandbox) (wait func() string) {
	t.Helper()
	_, err := exec.LookPath("stress-ng")
	cgtest.Need(t, err == nil, "stress-ng is not installed (apt-get install stress-ng)")
	cmd := exec.Command("stress-ng", "--vm", "1", "--vm-bytes", hogBytes, "--vm-keep",
		"--timeout", fmt.Sprintf("%ds", int(hogRun/time.Second)))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	if err := sb.Start(t, cmd); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	wait = func() string {
		once.Do(func() {
			if err := sb.Kill(); err != nil {
				t.Error(err)
			}
			_ = cmd.Wait() // killed: its status says nothing
		})
		return out.String()
	}
	t.Cleanup(func() { wait() })
	return wait
}

// recordLog keeps what a Watcher logs, as JSON lines.
type recordLog struct {
	buf bytes.Buffer
}

func (r *recordLog) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(&r.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines returns the logged records, decoded.
func (r *recordLog) lines(t testing.TB) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(r.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestTriggerFiresUnderMemoryPressure(t *testing.T) {
	cgtest.RequirePrivileged(t)
	hogged, hogPath := cgroupPressure(t, hogLimit)
	_, idlePath := cgroupPressure(t, hogLimit)
	asked := []Trigger{hogStall, hogStall}
	asked[0].Path, asked[1].Path = hogPath, idlePath
	w, err := NewWatcher(nil, asked)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	eff := w.Effective()
	privileged := capable(t)
	for i := range asked {
		if want := wantEffective(asked[i], privileged); eff[i] != want {
			t.Errorf("trigger %d: effective %v, want %v (CAP_SYS_RESOURCE=%v)", i, eff[i], want, privileged)
		}
	}

	before := readPressure(t, hogPath)
	ctx, cancel := context.WithTimeout(t.Context(), wakeBound+hogRun)
	defer cancel()
	wake := make(chan Wake, 16)
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(ctx, wake) }()
	defer func() {
		cancel()
		<-runDone
	}()

	start := time.Now()
	wait := startHog(t, hogged)
	var got Wake
	select {
	case got = <-wake:
	case <-time.After(wakeBound):
		out := wait()
		t.Fatalf("no wake-up within %v of starting the hog; pressure now %+v; fired %d/%d; hog said:\n%s",
			wakeBound, readPressure(t, hogPath), w.Fired(0), w.Fired(1), out)
	}
	latency := got.Time.Sub(start)
	after := readPressure(t, hogPath)
	wait()
	t.Logf("trigger %v fired %v after the hog started; stall total grew %v", got.Trigger, latency, after.Some.Total-before.Some.Total)

	if got.Index != 0 || got.Trigger != eff[0] {
		t.Errorf("woke trigger %d %v, want 0 %v", got.Index, got.Trigger, eff[0])
	}
	if w.Fired(0) == 0 {
		t.Errorf("Fired(0) = 0 after a delivered wake-up")
	}
	if w.Fired(1) != 0 {
		t.Errorf("the idle sandbox's trigger fired %d times", w.Fired(1))
	}
	// The kernel fires only when the window saw at least the stall.
	if grew := after.Some.Total - before.Some.Total; grew < eff[0].Stall {
		t.Errorf("memory.pressure some total grew by %v, less than the %v stall that fired", grew, eff[0].Stall)
	}
	// Level-triggered epoll must not report a consumed event again.
	if polls, fired := w.polls.Load(), w.Fired(0)+w.Fired(1); polls > fired {
		t.Errorf("epoll_wait returned %d times for %d firings", polls, fired)
	}
	if errs := w.Errs(); errs[0] != nil || errs[1] != nil {
		t.Errorf("Errs() = %v, want none", errs)
	}
}

// readPressure reads a pressure file through a File.
func readPressure(t *testing.T, name string) Stats {
	t.Helper()
	f, err := OpenFile(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := f.Read()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fdsTo lists this process's descriptors open on name.
func fdsTo(t *testing.T, name string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && target == name {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestSystemMemoryTrigger(t *testing.T) {
	cgtest.RequirePrivileged(t)
	const name = "/proc/pressure/memory"
	_, err := os.Stat(name)
	cgtest.Need(t, err == nil, fmt.Sprintf("system memory PSI: %v", err))
	asked := []Trigger{
		{Path: name, Kind: KindSome, Stall: 150 * time.Millisecond, Window: 500 * time.Millisecond},
		{Path: name, Kind: KindFull, Stall: 100 * time.Millisecond, Window: time.Second},
		{Path: name, Kind: KindSome, Stall: time.Second, Window: 2 * time.Second},
	}
	var log recordLog
	open := len(fdsTo(t, name))
	w, err := NewWatcher(log.logger(), asked)
	if err != nil {
		t.Fatal(err)
	}
	privileged := capable(t)

	t.Run("each trigger gets the window the process's capabilities allow", func(t *testing.T) {
		eff := w.Effective()
		for i := range asked {
			if want := wantEffective(asked[i], privileged); eff[i] != want {
				t.Errorf("trigger %d: effective %v, want %v (CAP_SYS_RESOURCE=%v)", i, eff[i], want, privileged)
			}
		}
	})
	t.Run("a fallback is logged once per Watcher with the asked and used windows", func(t *testing.T) {
		lines := log.lines(t)
		if privileged {
			if len(lines) != 0 {
				t.Errorf("logged %v, want nothing when the fast window is granted", lines)
			}
			return
		}
		if len(lines) != 1 {
			t.Fatalf("logged %d lines, want 1: %v", len(lines), lines)
		}
		l := lines[0]
		want := map[string]any{
			"level": "INFO", "path": name, "asked_window": float64(500 * time.Millisecond),
			"used_window": float64(2 * time.Second), "used_stall": float64(600 * time.Millisecond),
			"fallbacks": float64(2), "triggers": float64(3),
		}
		for k, v := range want {
			if l[k] != v {
				t.Errorf("log %s = %v, want %v (line %v)", k, l[k], v, l)
			}
		}
		if e, _ := l["err"].(string); !strings.Contains(e, "invalid argument") {
			t.Errorf("log err = %q, want the errno (EINVAL)", l["err"])
		}
	})
	t.Run("Run returns promptly after cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx, make(chan Wake, 1)) }()
		time.Sleep(50 * time.Millisecond)
		start := time.Now()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Run() = %v, want context.Canceled", err)
			}
			t.Logf("Run returned %v after cancel", time.Since(start))
		case <-time.After(runBound):
			t.Fatalf("Run still running %v after cancel", runBound)
		}
	})
	t.Run("Close closes every trigger descriptor", func(t *testing.T) {
		if got := len(fdsTo(t, name)) - open; got != len(asked) {
			t.Errorf("%d descriptors on %s while armed, want %d", got, name, len(asked))
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if got := len(fdsTo(t, name)) - open; got != 0 {
			t.Errorf("%d descriptors on %s left after Close", got, name)
		}
	})
}

func TestRemovedCgroupIsReported(t *testing.T) {
	cgtest.RequirePrivileged(t)
	sb, p := cgroupPressure(t, 0)
	tr := hogStall
	tr.Path = p
	w, err := NewWatcher(nil, []Trigger{tr})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	f, err := OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(t.Context())
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(ctx, make(chan Wake, 1)) }()
	time.Sleep(50 * time.Millisecond)
	if err := sb.Remove(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(removalBound)
	for w.Errs()[0] == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	err = w.Errs()[0]
	if !errors.Is(err, ErrGone) {
		t.Fatalf("Errs()[0] = %v %v after removing the cgroup, want ErrGone", err, removalBound)
	}
	t.Logf("reported within %v: %v", removalBound-time.Until(deadline), err)
	if s, err := f.Read(); !errors.Is(err, ErrGone) {
		t.Errorf("File.Read() of the removed cgroup = %+v, %v; want ErrGone", s, err)
	}
	polls := w.polls.Load()
	time.Sleep(200 * time.Millisecond)
	if extra := w.polls.Load() - polls; extra > 2 {
		t.Errorf("epoll_wait returned %d times in 200 ms after the removal: Run spins", extra)
	}
	if w.Fired(0) != 0 {
		t.Errorf("the removal counted as %d firings", w.Fired(0))
	}
	select {
	case err := <-runDone:
		t.Fatalf("Run returned %v after a removal, want it to keep running", err)
	default:
	}
	cancel()
	select {
	case <-runDone:
	case <-time.After(runBound):
		t.Fatalf("Run still running %v after cancel", runBound)
	}
}

// helperEnv makes the test binary run helper (see TestMain) instead of the
// tests: it arms the trigger in the variable (JSON) and reports.
const helperEnv = "PSI_TEST_HELPER"

// helperRequest is what the parent asks the helper to do.
type helperRequest struct {
	Trigger Trigger
	Wait    time.Duration // wait this long for a wake-up; 0: none
}

// helperReport is what the helper found.
type helperReport struct {
	Capable      bool
	Effective    Trigger
	LogLines     int
	Woke         bool
	Latency      time.Duration // from "armed" to the wake-up
	PsimonArmed  bool          // a new psimon kthread ran while armed
	PsimonClosed bool          // and was gone after Close
	PsimonGone   time.Duration // how long after Close it was gone
	Err          string
}

func TestMain(m *testing.M) {
	if req := os.Getenv(helperEnv); req != "" {
		os.Exit(helper(req))
	}
	os.Exit(m.Run())
}

// psimons returns the pids of the kernel's PSI real-time poller threads,
// which exist only while a privileged (< 2 s window) trigger exists.
func psimons() []string {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	var out []string
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) == "psimon" {
			out = append(out, filepath.Base(filepath.Dir(c)))
		}
	}
	return out
}

// helper runs in a child: prints "armed" once the trigger is armed, then a
// JSON helperReport.
func helper(reqJSON string) int {
	var req helperRequest
	var rep helperReport
	defer func() {
		b, _ := json.Marshal(rep)
		fmt.Println(string(b))
	}()
	if err := json.Unmarshal([]byte(reqJSON), &req); err != nil {
		rep.Err = err.Error()
		return 0
	}
	var err error
	if rep.Capable, err = hasCapSysResource(); err != nil {
		rep.Err = err.Error()
		return 0
	}
	before := psimons()
	var log recordLog
	w, err := NewWatcher(log.logger(), []Trigger{req.Trigger})
	if err != nil {
		rep.Err = err.Error()
		return 0
	}
	rep.LogLines = strings.Count(log.buf.String(), "\n")
	rep.Effective = w.Effective()[0]
	var ours []string
	for _, p := range psimons() {
		if !slices.Contains(before, p) {
			ours = append(ours, p)
		}
	}
	rep.PsimonArmed = len(ours) > 0
	fmt.Println("armed")
	if req.Wait > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), req.Wait)
		wake := make(chan Wake, 1)
		go func() { _ = w.Run(ctx, wake) }()
		start := time.Now()
		select {
		case <-wake:
			rep.Woke, rep.Latency = true, time.Since(start)
		case <-ctx.Done():
		}
		cancel()
	}
	if err := w.Close(); err != nil {
		rep.Err = err.Error()
		return 0
	}
	closed := time.Now()
	deadline := closed.Add(time.Second)
	for {
		now := psimons()
		gone := true
		for _, p := range ours {
			gone = gone && !slices.Contains(now, p)
		}
		if gone || time.Now().After(deadline) {
			rep.PsimonClosed, rep.PsimonGone = gone, time.Since(closed)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0
}

// startHelper runs helper in a new user namespace, where root has
// CAP_SYS_RESOURCE: the kernel checks the bit in the opener's credentials
// without looking at their namespace, so the 500 ms fast path runs for
// real even on machines that withhold the capability. It returns once the
// helper has armed its trigger.
func startHelper(t *testing.T, req helperRequest) (report func() helperReport) {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), req.Wait+10*time.Second)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Skipf("cannot start a process in a new user namespace here: %v", err)
	}
	r := bufio.NewReader(out)
	first, err := r.ReadString('\n')
	if err != nil || first != "armed\n" {
		rest, _ := r.ReadString('\n')
		cancel()
		_ = cmd.Wait()
		t.Fatalf("helper said %q %q (%v); stderr: %s", first, rest, err, stderr.String())
	}
	return func() helperReport {
		defer cancel()
		line, err := r.ReadString('\n')
		if werr := cmd.Wait(); werr != nil || err != nil {
			t.Fatalf("helper: %v, %v; stderr: %s", werr, err, stderr.String())
		}
		var rep helperReport
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			t.Fatalf("helper printed %q: %v", line, err)
		}
		if rep.Err != "" {
			t.Fatalf("helper: %s", rep.Err)
		}
		return rep
	}
}

func TestFastPathInUserNamespace(t *testing.T) {
	cgtest.RequirePrivileged(t)
	t.Run("a privileged opener gets the 500 ms window on the system file and Close stops the kernel poller", func(t *testing.T) {
		tr := Trigger{Path: "/proc/pressure/memory", Kind: KindSome, Stall: 150 * time.Millisecond, Window: MinWindow}
		rep := startHelper(t, helperRequest{Trigger: tr})()
		if !rep.Capable {
			t.Skip("root in a new user namespace has no CAP_SYS_RESOURCE here")
		}
		if rep.Effective != tr || rep.LogLines != 0 {
			t.Errorf("effective %v with %d log lines, want %v and none", rep.Effective, rep.LogLines, tr)
		}
		t.Logf("psimon gone %v after Close", rep.PsimonGone)
		if !rep.PsimonArmed || !rep.PsimonClosed {
			t.Errorf("psimon started on arm: %v, stopped on Close: %v; want both", rep.PsimonArmed, rep.PsimonClosed)
		}
	})
	t.Run("a 500 ms trigger on a sandbox fires under the memory hog", func(t *testing.T) {
		sb, p := cgroupPressure(t, hogLimit)
		tr := hogStall
		tr.Path = p
		report := startHelper(t, helperRequest{Trigger: tr, Wait: wakeBound})
		wait := startHog(t, sb)
		rep := report()
		out := wait()
		if !rep.Capable {
			t.Skip("root in a new user namespace has no CAP_SYS_RESOURCE here")
		}
		if rep.Effective != tr {
			t.Errorf("effective %v, want %v", rep.Effective, tr)
		}
		if !rep.Woke {
			t.Fatalf("no wake-up within %v; hog said:\n%s", wakeBound, out)
		}
		t.Logf("500 ms trigger fired %v after arming (hog started right after)", rep.Latency)
	})
}
