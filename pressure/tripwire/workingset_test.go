package tripwire

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

func TestDecideWS(t *testing.T) {
	o := Options{}.withDefaults()
	const th = 1 << 30
	tests := []struct {
		name      string
		ws        uint64
		above     bool
		sinceFire time.Duration
		want      wsStep
	}{
		{"far below ticks at the longest period", th - 1<<30 + 1, false, -1, wsStep{next: o.MaxPeriod}},
		{"20 MiB below ticks in the time a 2 GiB/s ramp covers it", th - 20<<20, false, -1, wsStep{next: 9765625 * time.Nanosecond}},
		{"right below ticks at the shortest period", th - 1, false, -1, wsStep{next: o.MinPeriod}},
		{"a first crossing is delivered", th, false, -1, wsStep{deliver: true, above: true, next: o.Floor}},
		{"a crossing long after the last fire is delivered", th + 1<<20, false, time.Second, wsStep{deliver: true, above: true, next: o.Floor}},
		{"a crossing within the floor waits for its end", th, false, 5 * time.Millisecond, wsStep{wait: true, next: o.MinPeriod}},
		{"a crossing far above within the floor waits until the floor ends", th + 1<<30, false, 5 * time.Millisecond, wsStep{wait: true, next: 15 * time.Millisecond}},
		{"a judged crossing does not fire again", th + 1<<20, true, time.Second, wsStep{above: true, next: o.Floor}},
		{"hovering just below a judged line does not re-arm it", th - o.Hysteresis, true, time.Second, wsStep{above: true, next: o.Floor}},
		{"coming back below the hysteresis re-arms", th - o.Hysteresis - 1, true, time.Second, wsStep{downward: true, next: o.MinPeriod}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decideWS(o, th, tt.ws, tt.above, tt.sinceFire)
			if got != tt.want {
				t.Errorf("decideWS(ws %d, above %v, since %v) = %+v, want %+v", tt.ws, tt.above, tt.sinceFire, got, tt.want)
			}
		})
	}
}

func TestWorkingSetFiresOnTheWorkingSetNotOnPageCache(t *testing.T) {
	dir := fakeV2(t, "max", 0)
	tw := mustNew(t, dir, true, Options{NoAssist: true, MinPeriod: time.Millisecond, MaxPeriod: 2 * time.Millisecond, Floor: time.Millisecond})
	const th = 64 << 20
	usage := func(u, inactive uint64) {
		writeFake(t, dir, fileStat, stat(inactive))
		writeFake(t, dir, fileCurrent, fmt.Sprintf("%010d\n", u))
	}
	usage(32<<20, 0)
	if err := tw.Arm(th); err != nil {
		t.Fatal(err)
	}
	t.Run("usage above the line in page cache does not fire", func(t *testing.T) {
		usage(96<<20, 64<<20) // working set 32 MiB
		waitStat(t, tw, "ticks above the line", func(s Stats) bool { return s.Ignored > 20 })
		noFire(t, tw, 20*time.Millisecond)
	})
	t.Run("the working set crossing fires once", func(t *testing.T) {
		usage(96<<20, 16<<20) // working set 80 MiB
		f := waitFire(t, tw)
		if f.Kind != KindWorkingSet || f.Threshold != th || f.WorkingSet != 80<<20 {
			t.Errorf("fire %+v", f)
		}
		noFire(t, tw, 30*time.Millisecond)
	})
	t.Run("hovering within the hysteresis does not fire again", func(t *testing.T) {
		usage(96<<20, 33<<20) // 63 MiB
		noFire(t, tw, 20*time.Millisecond)
		usage(96<<20, 31<<20) // 65 MiB
		noFire(t, tw, 20*time.Millisecond)
		if s := tw.Stats(); s.Downward != 0 {
			t.Errorf("stats %+v: a downward crossing within the hysteresis", s)
		}
	})
	t.Run("below the hysteresis and up again fires again", func(t *testing.T) {
		usage(48<<20, 0)
		waitStat(t, tw, "downward", func(s Stats) bool { return s.Downward == 1 })
		usage(70<<20, 0)
		waitFire(t, tw)
	})
	t.Run("without the assist it never writes memory.high", func(t *testing.T) {
		if got := readFake(t, dir, fileHigh); got != "max\n" {
			t.Errorf("memory.high = %q", got)
		}
	})
}

func TestWorkingSetAssistKeepsMemoryHighAboveUsage(t *testing.T) {
	dir := fakeV2(t, "max", 0)
	store := openStore(t, t.TempDir())
	tw := mustNew(t, dir, true, Options{Store: store, MinPeriod: time.Millisecond, MaxPeriod: 2 * time.Millisecond, Floor: time.Millisecond})
	const th = 64 << 20
	usage := func(u, inactive uint64) {
		writeFake(t, dir, fileStat, stat(inactive))
		writeFake(t, dir, fileCurrent, fmt.Sprintf("%010d\n", u))
	}
	high := func() uint64 {
		v, err := cgstat.ParseValue([]byte(strings.TrimSpace(readFake(t, dir, fileHigh))+"\n"), fileHigh) // the fake holds what Arm wrote, without the kernel's newline
		if err != nil {
			return 0
		}
		return v
	}
	waitHigh := func(what string, want uint64) {
		t.Helper()
		deadline := time.Now().Add(waitBound)
		for high() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: memory.high = %d, want %d", what, high(), want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	usage(32<<20, 0)
	if err := tw.Arm(th); err != nil {
		t.Fatal(err)
	}
	t.Run("without page cache memory.high is the line", func(t *testing.T) {
		waitHigh("no cache", th)
		if r, ok := recordOf(t, store, dir); !ok || r.Original != "max" {
			t.Errorf("record %+v, %v: want the original max recorded before the write", r, ok)
		}
	})
	t.Run("page cache above the line moves memory.high above usage by the working set's headroom", func(t *testing.T) {
		usage(96<<20, 64<<20) // working set 32 MiB
		waitHigh("cache", th+64<<20)
		noFire(t, tw, 20*time.Millisecond)
	})
	t.Run("memory.high reset underneath (systemd's daemon-reload) is set again", func(t *testing.T) {
		writeFake(t, dir, fileHigh, "max\n")
		waitHigh("after the reset", th+64<<20)
	})
	t.Run("Close restores the original and removes the record", func(t *testing.T) {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if got := readFake(t, dir, fileHigh); got != "max" {
			t.Errorf("memory.high = %q after Close", got)
		}
		noRecords(t, store)
	})
}

func TestWorkingSetFastPathCostsAtMostOneEarlyFire(t *testing.T) {
	dir := fakeV2(t, "max", 0)
	// MaxRate x MaxPeriod = 128 MiB: the 64 MiB line is near, so
	// inactive_file is refreshed every 100 ms below it.
	tw := mustNew(t, dir, true, Options{MaxRate: 64 << 30, MinPeriod: time.Millisecond, MaxPeriod: 2 * time.Millisecond, Floor: time.Millisecond})
	const th = 64 << 20
	usage := func(u, inactive uint64) {
		writeFake(t, dir, fileStat, stat(inactive))
		writeFake(t, dir, fileCurrent, fmt.Sprintf("%010d\n", u))
	}
	usage(32<<20, 0)
	if err := tw.Arm(th); err != nil {
		t.Fatal(err)
	}
	waitStat(t, tw, "ticks", func(s Stats) bool { return s.Ignored > 5 })
	t.Run("a crossing without page cache fires on usage", func(t *testing.T) {
		usage(80<<20, 0)
		if f := waitFire(t, tw); f.WorkingSet != 80<<20 {
			t.Errorf("fire %+v", f)
		}
		usage(32<<20, 0)
		waitStat(t, tw, "downward", func(s Stats) bool { return s.Downward == 1 })
	})
	t.Run("page cache that grew since the last memory.stat fires once, then not again", func(t *testing.T) {
		usage(96<<20, 64<<20) // working set 32 MiB
		select {
		case f := <-tw.C():
			t.Logf("early fire %+v (the inactive_file it used was < 100 ms old)", f)
			waitStat(t, tw, "the next tick's correction", func(s Stats) bool { return s.Downward == 2 })
		case <-time.After(50 * time.Millisecond):
		}
		noFire(t, tw, 150*time.Millisecond)
	})
}
