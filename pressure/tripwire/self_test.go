package tripwire

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeCgroup makes rel beneath root with a cgroup.procs listing pids.
func fakeCgroup(t *testing.T, root, rel string, pids ...int) {
	t.Helper()
	dir := filepath.Join(root, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, p := range pids {
		fmt.Fprintf(&b, "%d\n", p)
	}
	writeFake(t, dir, fileProcs, b.String())
	// A cgroup file beside the children, as every cgroup has.
	writeFake(t, dir, fileCurrent, "0000000000\n")
}

func TestProcessBeneath(t *testing.T) {
	const self = 4242
	tests := []struct {
		name      string
		cgroups   map[string][]int
		wantWhere string
		want      bool
	}{
		{"a pod root without this process", map[string][]int{
			".": nil, "burstable": nil, "burstable/pod1": nil, "burstable/pod1/ctr": {1, 42, 424, 42420}, "besteffort": nil,
		}, "", false},
		{"guard mode's own container beneath a QoS cgroup", map[string][]int{
			".": nil, "burstable": nil, "burstable/pod1": nil, "burstable/pod1/ctr": {17}, "burstable/podg": nil, "burstable/podg/guard": {3, self, 9},
		}, "burstable/podg/guard", true},
		{"a Guaranteed pod right beneath kubepods", map[string][]int{
			".": nil, "podg": nil, "podg/guard": {self},
		}, "podg/guard", true},
		{"the pod root itself", map[string][]int{".": {self}}, ".", true},
		{"deeper than the search goes", map[string][]int{
			".": nil, "a/b/c/d/e/f/g/h/i": {self},
		}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for rel, pids := range tt.cgroups {
				fakeCgroup(t, root, rel, pids...)
			}
			fd, err := openDir(root)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			where, in, err := processBeneath(fd, root, self)
			if err != nil || in != tt.want || where != tt.wantWhere {
				t.Errorf("processBeneath = %q, %v, %v; want %q, %v", where, in, err, tt.wantWhere, tt.want)
			}
		})
	}
}

// guardPod puts the process pid in a fake pod cgroup beneath the fake
// pod root dir, as guard mode's DaemonSet is beneath kubepods.
func guardPod(t *testing.T, dir string, pid int) {
	t.Helper()
	fakeCgroup(t, dir, "burstable/pod-other/ctr", pid+1)
	fakeCgroup(t, dir, "burstable/pod-guard/guard", pid)
}

func TestTheAssistNeverThrottlesItsOwnProcess(t *testing.T) {
	const self = 4242
	t.Run("beneath the pod root the working set polls without memory.high, at the poll's own tick", func(t *testing.T) {
		dir := fakeV2(t, "max", 0)
		guardPod(t, dir, self)
		tw := mustNew(t, dir, true, Options{SelfPID: self, MaxPeriod: 2 * time.Millisecond, Store: openStore(t, t.TempDir())})
		if ws := tw.(*wsPoller); ws.assist || ws.opts.MinPeriod != DefaultMinPeriod {
			t.Errorf("assist %v, min period %v; want no assist and %v", ws.assist, ws.opts.MinPeriod, DefaultMinPeriod)
		}
		if err := tw.Arm(64 << 20); err != nil {
			t.Fatal(err)
		}
		writeFake(t, dir, fileCurrent, "0070000000\n")
		if f := waitFire(t, tw); f.Kind != KindWorkingSet || f.WorkingSet < 64<<20 {
			t.Errorf("fire %+v", f)
		}
		if got := readFake(t, dir, fileHigh); got != "max\n" {
			t.Errorf("memory.high = %q, want it never written", got)
		}
	})
	t.Run("beneath the pod root memory.high as the mechanism is refused", func(t *testing.T) {
		dir := fakeV2(t, "max", 0)
		guardPod(t, dir, self)
		_, err := New(dir, true, Options{Mechanism: KindMemoryHigh, SelfPID: self})
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "burstable/pod-guard/guard") {
			t.Errorf("New = %v, want ErrUnsupported naming the process's cgroup", err)
		}
		if got := readFake(t, dir, fileHigh); got != "max\n" {
			t.Errorf("memory.high = %q, want it never written", got)
		}
	})
	t.Run("elsewhere the assist writes memory.high", func(t *testing.T) {
		dir := fakeV2(t, "max", 0)
		guardPod(t, dir, self+100)
		tw := mustNew(t, dir, true, Options{SelfPID: self, MaxPeriod: 2 * time.Millisecond})
		if ws := tw.(*wsPoller); !ws.assist || ws.opts.MinPeriod != DefaultAssistMinPeriod {
			t.Errorf("assist %v, min period %v; want the assist and %v", ws.assist, ws.opts.MinPeriod, DefaultAssistMinPeriod)
		}
		if err := tw.Arm(64 << 20); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(waitBound)
		for readFake(t, dir, fileHigh) == "max\n" {
			if time.Now().After(deadline) {
				t.Fatal("the assist never wrote memory.high")
			}
			time.Sleep(time.Millisecond)
		}
	})
}
