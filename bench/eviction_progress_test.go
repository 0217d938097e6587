package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
)

func TestParseCRILog(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []string
		bad  bool
	}{
		{
			name: "full stdout records become lines",
			in:   "2026-01-02T03:04:05.123456789Z stdout F 1 0\n2026-01-02T03:04:05.2Z stdout F 2 1048576\n",
			want: []string{"1 0", "2 1048576"},
		},
		{
			name: "partial records are joined into their line",
			in:   "2026-01-02T03:04:05Z stdout P 17000000\n2026-01-02T03:04:05Z stdout F 00 5\n",
			want: []string{"1700000000 5"},
		},
		{
			name: "stderr lines are skipped",
			in:   "2026-01-02T03:04:05Z stderr F hog: oops\n2026-01-02T03:04:05Z stdout F 3 4\n",
			want: []string{"3 4"},
		},
		{
			name: "a last record without newline is still being written",
			in:   "2026-01-02T03:04:05Z stdout F 3 4\n2026-01-02T03:04:05Z stdout F 5",
			want: []string{"3 4"},
		},
		{
			name: "an empty record is an empty line",
			in:   "2026-01-02T03:04:05Z stdout F \n",
			want: []string{""},
		},
		{name: "a line without fields is malformed", in: "garbage\n", bad: true},
		{name: "a bad time is malformed", in: "yesterday stdout F 1 2\n", bad: true},
		{name: "an unknown tag is malformed", in: "2026-01-02T03:04:05Z stdout X 1 2\n", bad: true},
		{name: "an unknown stream is malformed", in: "2026-01-02T03:04:05Z stdin F 1 2\n", bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCRILog([]byte(tc.in))
			if tc.bad {
				if !errors.Is(err, ErrMalformedProgress) {
					t.Fatalf("err %v, want ErrMalformedProgress", err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParseProgress(t *testing.T) {
	t.Run("well-formed lines become points", func(t *testing.T) {
		got, err := ParseProgress([]string{"1000 0", "2000 1048576", "2000 2097152"})
		want := []ProgressPoint{{time.Unix(0, 1000), 0}, {time.Unix(0, 2000), 1 << 20}, {time.Unix(0, 2000), 2 << 20}}
		if err != nil || len(got) != len(want) {
			t.Fatalf("got %v, %v", got, err)
		}
		for i := range want {
			if !got[i].At.Equal(want[i].At) || got[i].Allocated != want[i].Allocated {
				t.Errorf("point %d = %+v, want %+v", i, got[i], want[i])
			}
		}
	})
	for _, tc := range []struct{ name, line string }{
		{"one field is malformed", "1000"},
		{"three fields are malformed", "1000 1 2"},
		{"a negative time is malformed", "-5 1"},
		{"a word is malformed", "now 1"},
		{"a leading space is malformed", " 1000 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseProgress([]string{tc.line}); !errors.Is(err, ErrMalformedProgress) {
				t.Errorf("ParseProgress(%q) = %v, want ErrMalformedProgress", tc.line, err)
			}
		})
	}
	t.Run("an allocation that shrinks is malformed", func(t *testing.T) {
		if _, err := ParseProgress([]string{"1000 5", "2000 4"}); !errors.Is(err, ErrMalformedProgress) {
			t.Errorf("err %v, want ErrMalformedProgress", err)
		}
	})
	t.Run("time that goes back is malformed", func(t *testing.T) {
		if _, err := ParseProgress([]string{"2000 5", "1000 6"}); !errors.Is(err, ErrMalformedProgress) {
			t.Errorf("err %v, want ErrMalformedProgress", err)
		}
	})
}

// ramp makes progress points: start line at t0 (0 bytes), then one step
// of 1 MiB every ms from t0+1s.
func ramp(t0 time.Time, steps int) []ProgressPoint {
	pts := []ProgressPoint{{t0, 0}}
	for i := 1; i <= steps; i++ {
		pts = append(pts, ProgressPoint{t0.Add(time.Second + time.Duration(i)*time.Millisecond), uint64(i) << 20})
	}
	return pts
}

func TestCrossing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	pts := ramp(t0, 100)
	for _, tc := range []struct {
		name                        string
		baseline, budget, threshold uint64
		want                        time.Duration // after t0+1s; <0: none
	}{
		// Line at 100-10 = 90 MiB; baseline 30 MiB: crossed at 60 MiB.
		{"the first point at budget - threshold is the crossing", 30 << 20, 100 << 20, 10 << 20, 60 * time.Millisecond},
		{"a baseline already over the line crosses at the first point", 95 << 20, 100 << 20, 10 << 20, -time.Second},
		{"a hog that stops short never crosses", 0, 1 << 30, 10 << 20, -1},
		{"a threshold above the budget never crosses", 0, 10 << 20, 20 << 20, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, ok := Crossing(pts, tc.baseline, tc.budget, tc.threshold)
			if tc.want == -1 {
				if ok {
					t.Fatalf("crossed at %v, want never", at)
				}
				return
			}
			if want := t0.Add(time.Second + tc.want); !ok || !at.Equal(want) {
				t.Fatalf("crossed at %v (%v), want %v", at, ok, want)
			}
		})
	}
}

func TestAllocationStart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	start, rate, ok := AllocationStart(ramp(t0, 101))
	// 100 MiB in the 100 ms from step 1 to step 101: 1000 MiB/s.
	if !ok || !start.Equal(t0.Add(time.Second+time.Millisecond)) || rate < 999<<20 || rate > 1001<<20 {
		t.Errorf("start %v rate %.0f ok %v; want t0+1.001s, 1000 MiB/s", start, rate, ok)
	}
	if _, _, ok := AllocationStart(ramp(t0, 0)); ok {
		t.Error("a hog that never allocated has a start")
	}
}

func TestParseOOMKill(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     uint64
		ok       bool
	}{
		{"v1 memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3, true},
		{"v2 memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n", 2, true},
		{"no oom_kill line is malformed", "oom_kill_disable 0\nunder_oom 0\n", 0, false},
		{"a bad number is malformed", "oom_kill x\n", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseOOMKill([]byte(tc.in))
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("got %d, %v; want %d ok=%v", got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestOOMCounterSumsTheSubtreeAndKeepsVanishedCounts(t *testing.T) {
	root := t.TempDir()
	leaf := filepath.Join(root, "besteffort", "podX", "ctr")
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(dir string, n int) {
		if err := os.WriteFile(filepath.Join(dir, "memory.oom_control"), fmt.Appendf(nil, "oom_kill_disable 0\nunder_oom 0\noom_kill %d\n", n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{root, filepath.Join(root, "besteffort"), filepath.Join(root, "besteffort", "podX"), leaf} {
		write(d, 0)
	}
	write(leaf, 1) // an earlier trial's kill: the baseline
	h := &cgroups.Hierarchy{ID: 4, Controllers: []string{"memory"}, Mount: root, Root: "/", Own: "/"}
	var o oomCounter
	if err := o.init(cgroups.Dir{Hierarchy: h, Path: root, Rel: "/"}); err != nil {
		t.Fatal(err)
	}
	if fired, err := o.fired(); fired || err != nil {
		t.Fatalf("fired %v, %v before any kill", fired, err)
	}
	write(leaf, 2) // v1 counts the kill in the victim's own memcg only
	if fired, err := o.fired(); !fired || err != nil {
		t.Fatalf("fired %v, %v after a kill in a leaf", fired, err)
	}
	if err := os.RemoveAll(leaf); err != nil { // the runtime removes the dead container's cgroup
		t.Fatal(err)
	}
	if fired, err := o.fired(); !fired || err != nil {
		t.Fatalf("fired %v, %v after the leaf was removed: the count must stay", fired, err)
	}
}

func TestProjectCrossing(t *testing.T) {
	t0 := time.Unix(100, 0)
	pts := []ProgressPoint{{At: t0, Allocated: 100 << 20}, {At: t0.Add(time.Second), Allocated: 200 << 20}}
	// line = 1000 - 100 = 900 MiB; have = 600 + 200 = 800 MiB; 100 MiB at 100 MiB/s is 1 s after the last point.
	at, ok := ProjectCrossing(pts, 600<<20, 1000<<20, 100<<20, 100<<20)
	if !ok || !at.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("ProjectCrossing = %v, %v; want %v", at, ok, t0.Add(2*time.Second))
	}
	if _, ok := ProjectCrossing(nil, 0, 1, 0, 1); ok {
		t.Fatal("no points, yet a projection")
	}
}
