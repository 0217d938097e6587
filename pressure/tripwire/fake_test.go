package tripwire

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// waitBound bounds every wait for the reader in the unprivileged tests;
// inotify on a temp file answers in microseconds.
const waitBound = 5 * time.Second

// fakeV2 makes a directory with the v2 files the Tripwire uses.
func fakeV2(t *testing.T, high string, highCount int) string {
	t.Helper()
	dir := t.TempDir()
	writeFake(t, dir, fileHigh, high+"\n")
	writeFake(t, dir, fileCurrent, fmt.Sprintf("%010d\n", 1<<20))
	writeFake(t, dir, fileEventsLocal, events(highCount, 0))
	writeFake(t, dir, fileStat, stat(0))
	return dir
}

func fakeV1(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeFake(t, dir, fileUsage, "1048576\n")
	writeFake(t, dir, fileControl, "")
	return dir
}

// events renders memory.events.local with fixed-width counters, so that
// rewriting it in place (see writeFake) never shows the reader a shorter or
// empty file.
func events(high, max int) string {
	return fmt.Sprintf("low 0\nhigh %06d\nmax %06d\noom 0\noom_kill 0\noom_group_kill 0\n", high, max)
}

// stat renders memory.stat with a fixed-width inactive_file, as events.
func stat(inactiveFile uint64) string {
	return fmt.Sprintf("anon 4096\nfile 8192\nactive_file 0\ninactive_file %012d\nunevictable 0\n", inactiveFile)
}

// writeFake writes content over the start of dir/name in one write,
// creating it if needed, without truncating first: a truncation is a
// modification of its own, and the reader could see the empty file, which
// real cgroup files never show. Callers keep lengths fixed or growing.
func writeFake(t *testing.T, dir, name, content string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte(content), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFake(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustNew(t *testing.T, dir string, v2 bool, opts Options) Tripwire {
	t.Helper()
	tw, err := New(dir, v2, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tw.Close() })
	return tw
}

func waitFire(t *testing.T, tw Tripwire) Fire {
	t.Helper()
	select {
	case f, ok := <-tw.C():
		if !ok {
			t.Fatalf("C closed, reader error: %v", tw.Err())
		}
		return f
	case <-time.After(waitBound):
		t.Fatalf("no fire within %v; stats %+v", waitBound, tw.Stats())
	}
	return Fire{}
}

func noFire(t *testing.T, tw Tripwire, d time.Duration) {
	t.Helper()
	select {
	case f := <-tw.C():
		t.Fatalf("unexpected fire %+v", f)
	case <-time.After(d):
	}
}

// waitStat waits until cond holds for the Tripwire's stats.
func waitStat(t *testing.T, tw Tripwire, what string, cond func(Stats) bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond(tw.Stats()) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; stats %+v", what, waitBound, tw.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNewRejectsBadDirectories(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	empty := t.TempDir()
	badEvents := fakeV2(t, "max", 0)
	writeFake(t, badEvents, fileEventsLocal, "high lots\n")
	tests := []struct {
		name    string
		dir     string
		v2      bool
		opts    Options
		want    error
		wantMsg string
	}{
		{"a missing directory is not found (v1)", missing, false, Options{}, fs.ErrNotExist, missing},
		{"a missing directory is not found (v2)", missing, true, Options{}, fs.ErrNotExist, missing},
		{"a missing directory is not found (poll)", missing, true, Options{LeaveHigh: true}, fs.ErrNotExist, missing},
		{"a directory without v1 memory files is unsupported", empty, false, Options{}, ErrUnsupported, filepath.Join(empty, fileUsage)},
		{"a directory without v2 memory files is unsupported", empty, true, Options{Mechanism: KindMemoryHigh}, ErrUnsupported, filepath.Join(empty, fileHigh)},
		{"a directory without v2 memory files is unsupported by the working-set poll", empty, true, Options{}, ErrUnsupported, filepath.Join(empty, fileCurrent)},
		{"an unknown mechanism is unsupported", fakeV2(t, "max", 0), true, Options{Mechanism: "bpf"}, ErrUnsupported, `"bpf"`},
		{"a directory without memory.current cannot be polled", empty, true, Options{LeaveHigh: true}, ErrUnsupported, filepath.Join(empty, fileCurrent)},
		{"a v2 directory is not a v1 one", fakeV2(t, "max", 0), false, Options{}, ErrUnsupported, fileUsage},
		{"a malformed high counter is malformed", badEvents, true, Options{Mechanism: KindMemoryHigh}, ErrMalformed, filepath.Join(badEvents, fileEventsLocal)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tw, err := New(tt.dir, tt.v2, tt.opts)
			if err == nil {
				tw.Close()
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("error %q does not match %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not name %s", err, tt.wantMsg)
			}
		})
	}
}

func TestArmRejectsBadThresholds(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  string
		v2   bool
		opts Options
		file string
	}{
		{"v1", fakeV1(t), false, Options{}, fileControl},
		{"v2", fakeV2(t, "max", 0), true, Options{Mechanism: KindMemoryHigh}, fileHigh},
		{"working-set", fakeV2(t, "max", 0), true, Options{}, fileCurrent},
		{"poll", fakeV2(t, "max", 0), true, Options{LeaveHigh: true}, fileCurrent},
	} {
		for _, th := range []uint64{0, 1 << 63} {
			t.Run("a "+tc.name+" threshold of "+strconv.FormatUint(th, 10)+" is refused", func(t *testing.T) {
				tw := mustNew(t, tc.dir, tc.v2, tc.opts)
				err := tw.Arm(th)
				if !errors.Is(err, ErrInvalidThreshold) || !strings.Contains(err.Error(), filepath.Join(tc.dir, tc.file)) {
					t.Errorf("Arm(%d) = %v, want ErrInvalidThreshold naming %s", th, err, tc.file)
				}
			})
		}
	}
}

func TestV2FiresOnHighEvents(t *testing.T) {
	dir := fakeV2(t, "max", 3)
	tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, Coalesce: -1})

	t.Run("events before Arm are not fires", func(t *testing.T) {
		writeFake(t, dir, fileEventsLocal, events(4, 0))
		waitStat(t, tw, "ignored", func(s Stats) bool { return s.Ignored >= 1 })
		noFire(t, tw, 20*time.Millisecond)
	})
	t.Run("Arm writes memory.high", func(t *testing.T) {
		if err := tw.Arm(64 << 20); err != nil {
			t.Fatal(err)
		}
		if got := readFake(t, dir, fileHigh); got != "67108864" {
			t.Errorf("memory.high = %q, want 67108864", got)
		}
	})
	t.Run("a higher high counter fires with the counter", func(t *testing.T) {
		writeFake(t, dir, fileEventsLocal, events(5, 0))
		f := waitFire(t, tw)
		if f.Kind != KindMemoryHigh || f.Count != 5 || f.Dir != dir || f.Threshold != 64<<20 || f.At.IsZero() {
			t.Errorf("fire %+v", f)
		}
	})
	t.Run("other events in the file do not fire", func(t *testing.T) {
		before := tw.Stats().Ignored
		writeFake(t, dir, fileEventsLocal, events(5, 1))
		waitStat(t, tw, "ignored", func(s Stats) bool { return s.Ignored > before })
		noFire(t, tw, 20*time.Millisecond)
	})
	t.Run("re-arming moves memory.high", func(t *testing.T) {
		if err := tw.Arm(128 << 20); err != nil {
			t.Fatal(err)
		}
		if got := readFake(t, dir, fileHigh); got != "134217728" {
			t.Errorf("memory.high = %q", got)
		}
		writeFake(t, dir, fileEventsLocal, events(6, 1))
		if f := waitFire(t, tw); f.Threshold != 128<<20 || f.Count != 6 {
			t.Errorf("fire %+v", f)
		}
	})
	t.Run("Close restores memory.high, closes C and ends the reader", func(t *testing.T) {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readFake(t, dir, fileHigh); got != "max" {
			t.Errorf("memory.high = %q, want max", got)
		}
		select {
		case <-tw.Done():
		case <-time.After(waitBound):
			t.Fatal("reader still running")
		}
		if _, ok := <-tw.C(); ok {
			t.Error("C not closed")
		}
		if err := tw.Arm(1 << 20); !errors.Is(err, ErrClosed) {
			t.Errorf("Arm after Close = %v, want ErrClosed", err)
		}
		if err := tw.Close(); err != nil {
			t.Errorf("second Close = %v", err)
		}
	})
}

func TestV2LeavesAMemoryHighChangedBySomeoneElse(t *testing.T) {
	dir := fakeV2(t, "1073741824", 0)
	tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh})
	if err := tw.Arm(64 << 20); err != nil {
		t.Fatal(err)
	}
	writeFake(t, dir, fileHigh, "0999424\n") // as long as ours
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFake(t, dir, fileHigh); got != "0999424\n" {
		t.Errorf("memory.high = %q, want the other writer's value", got)
	}
}

func TestV2RestoresTheOriginalValue(t *testing.T) {
	dir := fakeV2(t, "1073741824", 0)
	tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh})
	for _, th := range []uint64{64 << 20, 32 << 20} {
		if err := tw.Arm(th); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFake(t, dir, fileHigh); got != "1073741824" {
		t.Errorf("memory.high = %q, want the value before the first Arm", got)
	}
}

func TestFiresAreCoalescedAndDropped(t *testing.T) {
	t.Run("a signal within Coalesce of the last fire is counted, not delivered", func(t *testing.T) {
		var now atomic.Int64
		now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		clock := func() time.Time { return time.Unix(0, now.Load()) }
		dir := fakeV2(t, "max", 0)
		tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, Now: clock})
		if err := tw.Arm(1 << 20); err != nil {
			t.Fatal(err)
		}
		writeFake(t, dir, fileEventsLocal, events(1, 0))
		waitFire(t, tw)
		now.Add(int64(DefaultCoalesce / 2))
		writeFake(t, dir, fileEventsLocal, events(2, 0))
		waitStat(t, tw, "coalesced", func(s Stats) bool { return s.Coalesced == 1 })
		now.Add(int64(DefaultCoalesce))
		writeFake(t, dir, fileEventsLocal, events(3, 0))
		if f := waitFire(t, tw); f.Count != 3 {
			t.Errorf("fire %+v, want the counter 3", f)
		}
	})
	t.Run("a fire that does not fit in C is dropped and counted", func(t *testing.T) {
		dir := fakeV2(t, "max", 0)
		tw := mustNew(t, dir, true, Options{Mechanism: KindMemoryHigh, Buffer: 1, Coalesce: -1})
		if err := tw.Arm(1 << 20); err != nil {
			t.Fatal(err)
		}
		writeFake(t, dir, fileEventsLocal, events(1, 0))
		waitStat(t, tw, "fired", func(s Stats) bool { return s.Fired == 1 })
		writeFake(t, dir, fileEventsLocal, events(2, 0))
		waitStat(t, tw, "dropped", func(s Stats) bool { return s.Dropped == 1 })
		if tw.Dropped() != 1 {
			t.Errorf("Dropped() = %d", tw.Dropped())
		}
	})
}

func TestV1ArmRegistersOneEventfd(t *testing.T) {
	dir := fakeV1(t)
	before := countEventfds(t)
	tw := mustNew(t, dir, false, Options{})
	for _, th := range []uint64{64 << 20, 96 << 20} {
		// The fake file keeps every write at the descriptor's offset;
		// the kernel's takes each write as one command.
		if err := os.Truncate(filepath.Join(dir, fileControl), 0); err != nil {
			t.Fatal(err)
		}
		if err := tw.Arm(th); err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(strings.TrimLeft(readFake(t, dir, fileControl), "\x00"))
		if len(f) != 3 || f[2] != strconv.FormatUint(th, 10) {
			t.Fatalf("cgroup.event_control got %q, want \"<eventfd> <usage fd> %d\"", f, th)
		}
		if link, _ := os.Readlink("/proc/self/fd/" + f[0]); link != "anon_inode:[eventfd]" {
			t.Errorf("fd %s is %q, not an eventfd", f[0], link)
		}
		if link, _ := os.Readlink("/proc/self/fd/" + f[1]); link != filepath.Join(dir, fileUsage) {
			t.Errorf("fd %s is %q, not %s", f[1], link, fileUsage)
		}
		// The loop's own kick eventfd plus the armed one; the
		// previous registration's eventfd is closed.
		if got := countEventfds(t); got != before+2 {
			t.Errorf("%d eventfds open after Arm(%d), want %d", got, th, before+2)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if got := countEventfds(t); got != before {
		t.Errorf("%d eventfds open after Close, want %d", got, before)
	}
}

// countEventfds counts this process's open eventfds.
func countEventfds(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link == "anon_inode:[eventfd]" {
			n++
		}
	}
	return n
}

func TestPollFiresOnUpwardCrossings(t *testing.T) {
	dir := fakeV2(t, "max", 0)
	tw := mustNew(t, dir, true, Options{LeaveHigh: true, PollEvery: time.Millisecond, Coalesce: -1})
	if err := tw.Arm(8 << 20); err != nil {
		t.Fatal(err)
	}
	writeFake(t, dir, fileCurrent, fmt.Sprintf("%010d\n", 9<<20))
	if f := waitFire(t, tw); f.Kind != KindPoll || f.Threshold != 8<<20 {
		t.Errorf("fire %+v", f)
	}
	noFire(t, tw, 20*time.Millisecond) // still above: no new crossing
	writeFake(t, dir, fileCurrent, fmt.Sprintf("%010d\n", 7<<20))
	waitStat(t, tw, "downward", func(s Stats) bool { return s.Downward == 1 })
	writeFake(t, dir, fileCurrent, fmt.Sprintf("%010d\n", 8<<20))
	waitFire(t, tw)
	if got := readFake(t, dir, fileHigh); got != "max\n" {
		t.Errorf("memory.high = %q: LeaveHigh wrote it", got)
	}
}

func TestClassifyV1(t *testing.T) {
	const th = 64 << 20
	tests := []struct {
		name      string
		crossings uint64
		usage     uint64
		usageOK   bool
		want      bool
	}{
		{"one crossing with usage above is upward", 1, th + 1, true, true},
		{"one crossing with usage at the threshold is upward", 1, th, true, true},
		{"one crossing with usage below is downward", 1, th - 1, true, false},
		{"two crossings are a spike that went up", 2, th - 1, true, true},
		{"an unreadable usage is delivered", 1, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classifyV1(tt.crossings, tt.usage, tt.usageOK, th); got != tt.want {
				t.Errorf("classifyV1 = %v, want %v", got, tt.want)
			}
		})
	}
}
