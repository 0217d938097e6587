package tripwire

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// Bounds of the privileged tests.
const (
	// sandboxLimit is the test cgroup's hard limit: far above what the
	// hog touches, so no test meets an OOM.
	sandboxLimit = 256 << 20
	// hogMiB is the hog's mapping; every test stays below it.
	hogMiB = 192
	// sanityLatency bounds crossing-to-Fire in tests: only a sanity
	// bound (the kernel signals within a millisecond here); the speed is
	// measured by BenchmarkTripwireLatency.
	sanityLatency = 100 * time.Millisecond
	// quiet is how long a test waits to see that nothing fires.
	quiet = 200 * time.Millisecond
)

// readFile reads a cgroup file for assertions.
func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// waitDone checks that the reader goroutine has returned and C is closed.
func waitDone(t *testing.T, tw Tripwire) {
	t.Helper()
	select {
	case <-tw.Done():
	case <-time.After(waitBound):
		t.Fatal("reader goroutine still running after Close")
	}
	for range tw.C() { // drains what was left, ends when C is closed
	}
}

func TestV1UsageThresholdOnARealCgroup(t *testing.T) {
	cgtest.RequireMode(t, cgroups.ModeHybrid, cgroups.ModeV1)
	sb := cgtest.New(t, cgtest.WithMemoryLimit(sandboxLimit))
	dir := sb.MemoryDir()
	h := startHog(t, sb, filepath.Join(dir, fileUsage), hogMiB)
	clock := newMonoClock()
	before := countEventfds(t)

	tw, err := New(dir, false, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tw.Close() })

	t.Run("a crossing at 64 MiB fires within the sanity bound", func(t *testing.T) {
		if err := tw.Arm(64 << 20); err != nil {
			t.Fatal(err)
		}
		r := h.up(t, 100<<20, 64<<20, 4<<20)
		if r.Cross == 0 {
			t.Fatalf("hog never saw usage reach 64 MiB: %+v", r)
		}
		f := waitFire(t, tw)
		lat := time.Duration(clock.of(f.At) - r.Cross)
		t.Logf("fire %+v; crossing seen by the hog (after a 4 MiB step) to Fire.At: %v; hog at %d MiB", f, lat, r.Usage>>20)
		if f.Kind != KindUsageThreshold || f.Dir != dir || f.Threshold != 64<<20 {
			t.Errorf("fire %+v", f)
		}
		if lat >= sanityLatency {
			t.Errorf("Fire.At is %v after the crossing, want < %v", lat, sanityLatency)
		}
	})
	t.Run("re-arming higher fires only when that is crossed", func(t *testing.T) {
		if err := tw.Arm(160 << 20); err != nil {
			t.Fatal(err)
		}
		noFire(t, tw, quiet)
		r := h.up(t, 170<<20, 160<<20, 4<<20)
		f := waitFire(t, tw)
		t.Logf("fire %+v, %v after the hog's crossing", f, time.Duration(clock.of(f.At)-r.Cross))
		if f.Threshold != 160<<20 {
			t.Errorf("fire for threshold %d, want %d", f.Threshold, 160<<20)
		}
	})
	t.Run("a downward crossing is counted, not delivered", func(t *testing.T) {
		d := tw.Stats().Downward
		h.down(t)
		waitStat(t, tw, "downward", func(s Stats) bool { return s.Downward > d })
		noFire(t, tw, quiet)
	})
	t.Run("Close ends the reader and drops the registration", func(t *testing.T) {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		waitDone(t, tw)
		// The kernel removes a registration when its eventfd is closed.
		if got := countEventfds(t); got != before {
			t.Errorf("%d eventfds open after Close, want %d", got, before)
		}
		t.Logf("stats %+v", tw.Stats())
	})
}

func TestV1StopsWhenTheCgroupIsRemoved(t *testing.T) {
	cgtest.RequireMode(t, cgroups.ModeHybrid, cgroups.ModeV1)
	sb := cgtest.New(t)
	child := sb.Child(t, "gone")
	tw, err := New(child.MemoryDir(), false, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tw.Close() })
	if err := tw.Arm(1 << 30); err != nil {
		t.Fatal(err)
	}
	if err := child.Remove(); err != nil {
		t.Fatal(err)
	}
	// The kernel signals each registration's eventfd once when the
	// cgroup goes; usage is then unreadable.
	select {
	case <-tw.Done():
	case <-time.After(waitBound):
		t.Fatal("reader still running after the cgroup was removed")
	}
	if err := tw.Err(); !errors.Is(err, ErrGone) {
		t.Errorf("Err() = %v, want ErrGone", err)
	}
	if err := tw.Close(); err != nil {
		t.Errorf("Close = %v", err)
	}
}

func TestV2MemoryHighOnARealCgroup(t *testing.T) {
	cgtest.RequireMode(t, cgroups.ModeV2)
	sb := cgtest.New(t, cgtest.WithMemoryLimit(sandboxLimit))
	dir := sb.MemoryDir()
	h := startHog(t, sb, filepath.Join(dir, fileCurrent), hogMiB)
	clock := newMonoClock()
	orig := readFile(t, filepath.Join(dir, fileHigh))

	tw, err := New(dir, true, Options{Mechanism: KindMemoryHigh})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tw.Close() })

	const threshold = 64 << 20
	t.Run("Arm writes memory.high", func(t *testing.T) {
		if err := tw.Arm(threshold); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(dir, fileHigh)); got != "67108864" {
			t.Errorf("memory.high = %q, want 67108864", got)
		}
	})
	t.Run("allocating past memory.high fires, and the allocator is throttled", func(t *testing.T) {
		// 2 MiB past high: the kernel's penalty grows with the square
		// of the overage (1 s per charge batch at 12%), so the hog
		// stays within ~3% of it.
		r := h.up(t, threshold+2<<20, threshold, 256<<10)
		if r.Cross == 0 {
			t.Fatalf("hog never saw memory.current reach memory.high: %+v", r)
		}
		f := waitFire(t, tw)
		lat := time.Duration(clock.of(f.At) - r.Cross)
		below, above := r.rates()
		t.Logf("fire %+v; crossing seen by the hog to Fire.At: %v", f, lat)
		t.Logf("hog touched %d KiB at %.0f MiB/s below memory.high and %d KiB at %.1f MiB/s above it (throttled)",
			r.BelowBytes>>10, below, r.AboveBytes>>10, above)
		if f.Kind != KindMemoryHigh || f.Count == 0 || f.Threshold != threshold {
			t.Errorf("fire %+v", f)
		}
		if lat >= sanityLatency {
			t.Errorf("Fire.At is %v after the crossing, want < %v", lat, sanityLatency)
		}
	})
	t.Run("Close restores memory.high", func(t *testing.T) {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		waitDone(t, tw)
		if got := readFile(t, filepath.Join(dir, fileHigh)); got != orig {
			t.Errorf("memory.high = %q after Close, want %q", got, orig)
		}
		t.Logf("stats %+v", tw.Stats())
	})
}

// TestV2OriginalMemoryHighSurvivesASIGKILL arms a Tripwire in another
// process, SIGKILLs it (no Close), and checks that the next Tripwire on the
// same cgroup and state store puts back the memory.high of before the
// first Arm, not the threshold the killed one left. Without the record the
// killed one's threshold is taken as the original and stays for good.
func TestV2OriginalMemoryHighSurvivesASIGKILL(t *testing.T) {
	cgtest.RequireMode(t, cgroups.ModeV2)
	sb := cgtest.New(t, cgtest.WithMemoryLimit(sandboxLimit))
	dir := sb.MemoryDir()
	high := filepath.Join(dir, fileHigh)
	// An original that is not the kernel's default, as a kubelet-owned
	// kubepods may have.
	if err := os.WriteFile(high, []byte("201326592"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), armerEnv+"="+dir+" "+state+" "+strconv.Itoa(64<<20))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	line := make(chan string, 1)
	go func() {
		b := make([]byte, 64)
		n, _ := out.Read(b)
		line <- strings.TrimSpace(string(b[:n]))
	}()
	select {
	case l := <-line:
		if l != "armed" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("armer said %q", l)
		}
	case <-time.After(waitBound):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("armer did not arm in time")
	}
	if got := readFile(t, high); got != "67108864" {
		t.Fatalf("memory.high = %q while armed, want 67108864", got)
	}
	// The crash: SIGKILL by pid, no Close.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(waitBound):
		t.Fatal("armer still running after SIGKILL")
	}
	if got := readFile(t, high); got != "67108864" {
		t.Fatalf("memory.high = %q after the crash, want the armed 67108864 still there", got)
	}

	store := openStore(t, state)
	tw, err := New(dir, true, Options{Mechanism: KindMemoryHigh, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("re-arming after the crash and closing restores the true original", func(t *testing.T) {
		if err := tw.Arm(96 << 20); err != nil {
			t.Fatal(err)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, high); got != "201326592" {
			t.Errorf("memory.high = %q after Close, want the original 201326592", got)
		}
		noRecords(t, store)
	})
}

func TestV2WorkingSetOnARealCgroup(t *testing.T) {
	cgtest.RequireMode(t, cgroups.ModeV2)
	sb := cgtest.New(t, cgtest.WithMemoryLimit(sandboxLimit))
	dir := sb.MemoryDir()
	h := startHog(t, sb, filepath.Join(dir, fileCurrent), hogMiB)
	clock := newMonoClock()
	orig := readFile(t, filepath.Join(dir, fileHigh))
	state := t.TempDir()

	store := openStore(t, state)
	tw, err := New(dir, true, Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tw.Close() })
	const threshold = 64 << 20
	if err := tw.Arm(threshold); err != nil {
		t.Fatal(err)
	}
	t.Run("the assist puts memory.high at the line, above usage", func(t *testing.T) {
		deadline := time.Now().Add(waitBound)
		for {
			got := readFile(t, filepath.Join(dir, fileHigh))
			v, err := cgstat.ParseValue([]byte(got+"\n"), fileHigh) // readFile trimmed the newline
			// inactive_file of a cgroup with only an anonymous hog is
			// near 0: memory.high is the line plus that.
			if err == nil && v >= threshold && v < threshold+4<<20 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("memory.high = %q, want the line %d plus the cgroup's inactive_file", got, threshold)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("the working set reaching the line fires once", func(t *testing.T) {
		r := h.up(t, threshold+2<<20, threshold, 256<<10)
		if r.Cross == 0 {
			t.Fatalf("hog never saw memory.current reach the line: %+v", r)
		}
		f := waitFire(t, tw)
		lat := time.Duration(clock.of(f.At) - r.Cross)
		t.Logf("fire %+v; the hog's crossing to Fire.At: %v", f, lat)
		if f.Kind != KindWorkingSet || f.Threshold != threshold || f.WorkingSet < threshold {
			t.Errorf("fire %+v", f)
		}
		if lat >= sanityLatency {
			t.Errorf("Fire.At is %v after the crossing, want < %v", lat, sanityLatency)
		}
		noFire(t, tw, quiet) // still above: judged, not again
	})
	t.Run("below the line and up again fires again", func(t *testing.T) {
		h.down(t)
		waitStat(t, tw, "downward", func(s Stats) bool { return s.Downward >= 1 })
		h.up(t, threshold+2<<20, threshold, 256<<10)
		waitFire(t, tw)
	})
	t.Run("Close restores memory.high and removes the record", func(t *testing.T) {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		waitDone(t, tw)
		if got := readFile(t, filepath.Join(dir, fileHigh)); got != orig {
			t.Errorf("memory.high = %q after Close, want %q", got, orig)
		}
		noRecords(t, store)
		t.Logf("stats %+v", tw.Stats())
	})
}

// TestProcessBeneathFindsAProcessInARealCgroup: the search that keeps the
// assist off guard mode's own pod reads real cgroup.procs files (v1 and v2
// alike): a process started in a child cgroup of the sandbox is found
// there, in every hierarchy the sandbox has, and this test's own process,
// outside the sandbox, is not.
func TestProcessBeneathFindsAProcessInARealCgroup(t *testing.T) {
	sb := cgtest.New(t)
	pod := sb.Child(t, "pod-guard")
	h := startHog(t, pod, filepath.Join(pod.MemoryDir(), usageFileOf(pod)), 1)
	pid := h.cmd.Process.Pid
	for _, d := range sb.Dirs() {
		t.Run("in the hierarchy mounted at "+d.Hierarchy.Mount, func(t *testing.T) {
			fd, err := openDir(d.Path)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			where, in, err := processBeneath(fd, d.Path, pid)
			if err != nil || !in || where != "pod-guard" {
				t.Errorf("processBeneath(pid %d) = %q, %v, %v; want pod-guard", pid, where, in, err)
			}
			where, in, err = processBeneath(fd, d.Path, os.Getpid())
			if err != nil || in {
				t.Errorf("processBeneath(this test, outside the sandbox) = %q, %v, %v; want not found", where, in, err)
			}
		})
	}
}

// usageFileOf is the memory usage file of the sandbox's memory hierarchy.
func usageFileOf(sb *cgtest.Sandbox) string {
	if _, err := os.Stat(filepath.Join(sb.MemoryDir(), fileCurrent)); err == nil {
		return fileCurrent
	}
	return fileUsage
}

// TestV2WorkingSetNeverThrottlesItsOwnPod: with the agent's process in a
// pod cgroup beneath the watched directory (guard mode's DaemonSet beneath
// kubepods), the working-set poll never writes memory.high there, and a
// hog in another pod crossing the line still fires.
func TestV2WorkingSetNeverThrottlesItsOwnPod(t *testing.T) {
	cgtest.RequireMode(t, cgroups.ModeV2)
	sb := cgtest.New(t, cgtest.WithMemoryLimit(sandboxLimit))
	dir := sb.MemoryDir()
	usage := filepath.Join(dir, fileCurrent)
	self := startHog(t, sb.Child(t, "pod-guard"), usage, 1)
	h := startHog(t, sb.Child(t, "pod-hog"), usage, hogMiB)
	orig := readFile(t, filepath.Join(dir, fileHigh))

	tw, err := New(dir, true, Options{Store: openStore(t, t.TempDir()), SelfPID: self.cmd.Process.Pid})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tw.Close() })
	const threshold = 64 << 20
	if err := tw.Arm(threshold); err != nil {
		t.Fatal(err)
	}
	r := h.up(t, threshold+2<<20, threshold, 256<<10)
	if r.Cross == 0 {
		t.Fatalf("hog never saw memory.current reach the line: %+v", r)
	}
	if f := waitFire(t, tw); f.Kind != KindWorkingSet || f.Threshold != threshold {
		t.Errorf("fire %+v", f)
	}
	if got := readFile(t, filepath.Join(dir, fileHigh)); got != orig {
		t.Errorf("memory.high = %q with the agent's own pod beneath, want it untouched (%q)", got, orig)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, fileHigh)); got != orig {
		t.Errorf("memory.high = %q after Close, want %q", got, orig)
	}
}
