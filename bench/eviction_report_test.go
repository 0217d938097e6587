package bench

import (
	"bytes"
	"encoding/csv"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// trialAt makes a trial whose events come at the given offsets after the
// crossing at t0 (a negative offset: never).
func trialAt(strategy string, rate uint64, det, kill, rel, oom time.Duration, victims ...string) EvictionTrial {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) time.Time {
		if d < 0 {
			return time.Time{}
		}
		return t0.Add(d)
	}
	t := EvictionTrial{Rate: rate, Strategy: strategy, Budget: 1 << 30, Threshold: 100 << 20, Hog: "ns/hog",
		Crossed: t0, Detected: at(det), KillSent: at(kill), Released: at(rel), KernelOOM: at(oom), Victims: victims}
	for _, v := range victims {
		if v != t.Hog {
			t.Collateral++
		}
	}
	// As the harness reads it just before the kill.
	t.KernelOOMFirst = oom >= 0 && kill >= 0 && oom < kill
	t.finish(nil)
	t.Crossed = t0 // finish(nil) has no progress; keep the ground truth
	return t
}

func TestFinishVerdicts(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name           string
		trial          EvictionTrial
		missed, oomFst bool
	}{
		{"a detection before the OOM kill is in time", trialAt("a", 1, 5*ms, 6*ms, 20*ms, -1, "ns/hog"), false, false},
		{"no detection at all is missed", trialAt("a", 1, -1, -1, -1, -1), true, false},
		{"an OOM kill without any eviction fired first", trialAt("a", 1, -1, -1, -1, 50*ms), true, true},
		{"a detection after the OOM kill is missed, and the kernel was first", trialAt("a", 1, 60*ms, 61*ms, 70*ms, 50*ms, "ns/hog"), true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.trial.Missed != tc.missed || tc.trial.KernelOOMFirst != tc.oomFst {
				t.Errorf("missed %v oom first %v, want %v %v", tc.trial.Missed, tc.trial.KernelOOMFirst, tc.missed, tc.oomFst)
			}
		})
	}
	t.Run("a detection before the hog allocated is a false positive, not a detection", func(t *testing.T) {
		tr := EvictionTrial{Budget: 100 << 20, Threshold: 10 << 20, Detected: time.Unix(999, 5e8), KillSent: time.Unix(999, 6e8),
			KernelOOM: time.Unix(1001, 0), Victims: []string{"ns/b-busy"}, Collateral: 1}
		tr.finish(ramp(time.Unix(999, 0), 10))
		if !tr.Missed || !tr.KernelOOMFirst || !strings.Contains(tr.Note, "false positive") {
			t.Errorf("missed %v, OOM first %v, note %q", tr.Missed, tr.KernelOOMFirst, tr.Note)
		}
	})
	t.Run("a detection with no allocation in the hog's log has no ground truth: missed, not neither", func(t *testing.T) {
		tr := EvictionTrial{Budget: 100 << 20, Threshold: 10 << 20, Detected: time.Unix(999, 5e8), KillSent: time.Unix(999, 6e8),
			Victims: []string{"ns/hog"}, Hog: "ns/hog"}
		tr.finish([]ProgressPoint{{At: time.Unix(999, 4e8)}}) // started, nothing allocated yet
		if !tr.Missed || tr.KernelOOMFirst || !strings.Contains(tr.Note, "no ground truth") {
			t.Errorf("missed %v, OOM first %v, note %q", tr.Missed, tr.KernelOOMFirst, tr.Note)
		}
		if row := SummarizeEviction([]EvictionTrial{tr})[0]; row.Detected+row.Missed != row.Trials {
			t.Errorf("detected %d + missed %d != trials %d", row.Detected, row.Missed, row.Trials)
		}
	})
	t.Run("a baseline read after allocation began is noted", func(t *testing.T) {
		tr := EvictionTrial{Budget: 100 << 20, Threshold: 10 << 20, BaselineAt: time.Unix(1000, 5e8)}
		tr.finish(ramp(time.Unix(999, 0), 10))
		if tr.Note == "" || tr.AchievedRate == 0 {
			t.Errorf("note %q rate %v, want a note and a rate", tr.Note, tr.AchievedRate)
		}
	})
}

func sampleTrials() []EvictionTrial {
	ms := time.Millisecond
	return []EvictionTrial{
		trialAt("nodeguard", 200<<20, 2*ms, 3*ms, 30*ms, -1, "ns/hog"),
		trialAt("nodeguard", 200<<20, 4*ms, 5*ms, 40*ms, -1, "ns/hog"),
		trialAt("kubelet", 200<<20, 400*ms, 401*ms, 430*ms, -1, "ns/hog"),
		trialAt("kubelet", 200<<20, -1, -1, -1, 500*ms),
		trialAt("kubelet", 1<<30, 100*ms, 101*ms, 150*ms, 90*ms, "ns/b-busy", "ns/hog"),
	}
}

func TestSummarizeEviction(t *testing.T) {
	rows := SummarizeEviction(sampleTrials())
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 3: %+v", len(rows), rows)
	}
	ng, kb, kb1g := rows[0], rows[1], rows[2]
	if ng.Strategy != "nodeguard" || ng.Detected != 2 || ng.Detection.P50 != 2*time.Millisecond || ng.Kill.P50 != time.Millisecond {
		t.Errorf("nodeguard row %+v", ng)
	}
	if kb.Strategy != "kubelet" || kb.Rate != 200<<20 || kb.Trials != 2 || kb.Detected != 1 || kb.Missed != 1 || kb.KernelOOMFirst != 1 {
		t.Errorf("kubelet 200Mi/s row %+v", kb)
	}
	if kb1g.Rate != 1<<30 || kb1g.Collateral != 1 || kb1g.Missed != 1 || kb1g.Detected != 0 {
		t.Errorf("kubelet 1Gi/s row %+v", kb1g)
	}
	// The kubelet missed one of its two trials at 200Mi/s: its p50 is of
	// the one it caught, no ratio.
	if ratio := DetectionRatio(rows, "kubelet", "nodeguard"); len(ratio) != 0 {
		t.Errorf("ratio %v, want none: the kubelet missed a trial at each rate", ratio)
	}
	ms := time.Millisecond
	all := append(sampleTrials()[:3], trialAt("kubelet", 200<<20, 400*ms, 401*ms, 430*ms, -1, "ns/hog"))
	if ratio := DetectionRatio(SummarizeEviction(all), "kubelet", "nodeguard"); len(ratio) != 1 || ratio[200<<20] != 200 {
		t.Errorf("ratio %v, want 200x at 200Mi/s, where both caught every trial", ratio)
	}
}

func TestWriteEvictionTable(t *testing.T) {
	var b bytes.Buffer
	WriteEvictionTable(&b, SummarizeEviction(sampleTrials()))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a header and 3 rows:\n%s", len(lines), b.String())
	}
	for _, want := range []string{"det p50", "kill p99", "OOM first", "collateral", "missed"} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("header lacks %q: %s", want, lines[0])
		}
	}
	// Detection is signed: after the crossing is "+".
	if f := strings.Fields(lines[1]); f[0] != "nodeguard" || f[1] != "200Mi/s" || f[4] != "+2.0" {
		t.Errorf("nodeguard row %q", lines[1])
	}
	if f := strings.Fields(lines[3]); f[0] != "kubelet" || f[1] != "1Gi/s" || !strings.Contains(lines[3], "100%") || f[len(f)-2] != "1" {
		t.Errorf("kubelet 1Gi/s row %q", lines[3])
	}
}

func TestWriteEvictionCSV(t *testing.T) {
	var b bytes.Buffer
	if err := WriteEvictionCSV(&b, sampleTrials()); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 6 || !slices.Equal(recs[0], EvictionCSVHeader) {
		t.Fatalf("%d records, header %v", len(recs), recs[0])
	}
	col := func(name string) int { return slices.Index(EvictionCSVHeader, name) }
	first := recs[1]
	if first[col("strategy")] != "nodeguard" || first[col("detection_ms")] != "2.000" || first[col("kill_ms")] != "1.000" || first[col("release_ms")] != "27.000" {
		t.Errorf("first row %v", first)
	}
	missed := recs[4]
	if missed[col("detected_unix_ns")] != "" || missed[col("detection_ms")] != "" || missed[col("missed")] != "true" || missed[col("kernel_oom_first")] != "true" {
		t.Errorf("missed row %v: absent times must be empty", missed)
	}
	if v := recs[5][col("victims")]; v != "ns/b-busy ns/hog" {
		t.Errorf("victims %q", v)
	}
}

func TestEvictionPNG(t *testing.T) {
	for _, tc := range []struct {
		name   string
		trials []EvictionTrial
	}{
		{"detections are plotted", sampleTrials()},
		{"a run that never detected still gets a frame", []EvictionTrial{trialAt("kubelet", 1<<30, -1, -1, -1, 5*time.Millisecond)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "eviction.png")
			if err := EvictionPNG(p, tc.trials); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
				t.Fatalf("not a PNG: %v", err)
			}
		})
	}
}

func TestParseThreshold(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"10%", 100 << 20, true},
		{"100Mi", 100 << 20, true},
		{"0%", 0, false},
		{"100%", 0, false},
		{"2Gi", 0, false},
		{"-5Mi", 0, false},
		{"lots", 0, false},
	} {
		t.Run("parses "+tc.in, func(t *testing.T) {
			got, err := ParseThreshold(tc.in, 1000<<20)
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("got %d, %v; want %d ok=%v", got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseRatesAndFormat(t *testing.T) {
	got, err := ParseRates("50Mi/s, 200Mi/s,1Gi/s,2Gi")
	if err != nil || !slices.Equal(got, []uint64{50 << 20, 200 << 20, 1 << 30, 2 << 30}) {
		t.Errorf("ParseRates = %v, %v", got, err)
	}
	for _, bad := range []string{"", "fast", "0/s", "-1Mi/s"} {
		if _, err := ParseRates(bad); err == nil {
			t.Errorf("ParseRates(%q) accepted", bad)
		}
	}
	for n, want := range map[uint64]string{200 << 20: "200Mi", 1 << 30: "1Gi", 107374182: "102.4Mi", 512: "512"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if got := hogName(200<<20, "poll1s", 3); got != "hog-200mi-poll1s-3" {
		t.Errorf("hogName = %q", got)
	}
}

func TestCheckBudget(t *testing.T) {
	// This machine's meminfo (the parser wants every key the kubelet uses) with
	// MemAvailable set to 4 GiB.
	real, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(real), "\n") {
		if strings.HasPrefix(l, "MemAvailable:") {
			l = "MemAvailable:    4194304 kB"
		}
		lines = append(lines, l)
	}
	mi := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(mi, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckBudget(mi, 2<<30); err != nil {
		t.Errorf("2Gi of 4Gi available: %v", err)
	}
	if err := CheckBudget(mi, 2<<30+1); !errors.Is(err, ErrBudgetTooLarge) {
		t.Errorf("just over half: %v, want ErrBudgetTooLarge", err)
	}
	if err := CheckBudget(filepath.Join(t.TempDir(), "none"), 1); err == nil || errors.Is(err, ErrBudgetTooLarge) {
		t.Errorf("unreadable meminfo: %v, want a read error", err)
	}
}

func TestStrategyRegistry(t *testing.T) {
	reg := NewEvictionStrategies()
	if !slices.Equal(reg.Names(), []string{StrategyKubelet, StrategyKubeletMemcg, StrategyNodeguard, StrategyPoll1s, StrategyPSI}) {
		t.Errorf("built-in strategies %v", reg.Names())
	}
	_, err := reg.New("oomd")
	if !errors.Is(err, ErrStrategyNotRegistered) || !strings.Contains(err.Error(), "strategy oomd not registered") {
		t.Errorf("New(oomd) = %v, want \"strategy oomd not registered\"", err)
	}
	reg.Register("oomd", func() EvictionStrategy { return NewPollStrategy("oomd", time.Millisecond) })
	if s, err := reg.New("oomd"); err != nil || s.Name() != "oomd" {
		t.Errorf("after Register: %v, %v", s, err)
	}
	t.Run("only nodeguard is the agent's own", func(t *testing.T) {
		for _, n := range reg.Names() {
			s, _ := reg.New(n)
			if got := evictsThroughAgent(s); got != (n == StrategyNodeguard) {
				t.Errorf("%s: evicts through the agent %v", n, got)
			}
		}
	})
	t.Run("the memcg baseline is in the defaults on cgroup v1 only", func(t *testing.T) {
		if got := DefaultStrategies(false); !slices.Equal(got, DefaultStrategyNames) {
			t.Errorf("v1: %v", got)
		}
		if got := DefaultStrategies(true); slices.Contains(got, StrategyKubeletMemcg) || len(got) != len(DefaultStrategyNames)-1 {
			t.Errorf("v2: %v", got)
		}
	})
}
