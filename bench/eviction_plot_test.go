package bench

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestTrialOutcome(t *testing.T) {
	ms := time.Millisecond
	failed := trialAt("a", 1, 5*ms, 6*ms, 9*ms, -1, "ns/hog")
	failed.Err = "settle: timed out"
	late := trialAt("a", 1, 60*ms, 61*ms, 70*ms, 50*ms, "ns/hog")
	// Detected in time, but the kill came after the OOM kill.
	slowKill := trialAt("a", 1, 5*ms, 60*ms, 70*ms, 50*ms, "ns/hog")
	for _, tc := range []struct {
		name  string
		trial EvictionTrial
		want  Outcome
	}{
		{"a detection and kill before the OOM killer is caught", trialAt("a", 1, 5*ms, 6*ms, 9*ms, -1, "ns/hog"), OutcomeCaught},
		{"an OOM kill with no detection is the OOM killer's", trialAt("a", 1, -1, -1, -1, 40*ms), OutcomeKernelOOM},
		{"a detection after the OOM kill is the OOM killer's", late, OutcomeKernelOOM},
		{"a kill after the OOM kill is the OOM killer's even when detected in time", slowKill, OutcomeKernelOOM},
		{"no detection and no OOM kill is missed", trialAt("a", 1, -1, -1, -1, -1), OutcomeMissed},
		{"a failed trial is an error whatever it recorded", failed, OutcomeError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TrialOutcome(tc.trial); got != tc.want {
				t.Errorf("outcome %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPrepareEvictionPlot(t *testing.T) {
	ms := time.Millisecond
	early := func(strategy string, rate uint64, before time.Duration) EvictionTrial {
		tr := trialAt(strategy, rate, 0, 5*ms, 9*ms, -1, "ns/hog")
		tr.Detected = tr.Crossed.Add(-before)
		return tr
	}
	trials := []EvictionTrial{
		early("nodeguard", 1<<30, 6*ms), early("nodeguard", 1<<30, 2*ms), early("nodeguard", 1<<30, 4*ms),
		trialAt("nodeguard", 200<<20, 100*time.Microsecond, ms, 5*ms, -1, "ns/hog"),
		trialAt("kubelet", 1<<30, -1, -1, -1, 40*ms),
		trialAt("kubelet", 200<<20, 600*ms, 601*ms, 620*ms, -1, "ns/hog"),
		trialAt("kubelet", 200<<20, -1, -1, -1, -1),
	}
	d := PrepareEvictionPlot(trials)

	t.Run("strategies keep their order, rates ascend", func(t *testing.T) {
		if !slices.Equal(d.Strategies, []string{"nodeguard", "kubelet"}) || !slices.Equal(d.Rates, []uint64{200 << 20, 1 << 30}) {
			t.Errorf("strategies %v, rates %v", d.Strategies, d.Rates)
		}
	})
	t.Run("early detections stay negative and late ones positive", func(t *testing.T) {
		var got []float64
		for _, p := range d.Points {
			got = append(got, p.Ms)
		}
		slices.Sort(got)
		want := []float64{-6, -4, -2, 0.1, 600}
		if len(got) != len(want) {
			t.Fatalf("points %v, want %v", got, want)
		}
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-9 {
				t.Errorf("points %v, want %v", got, want)
				break
			}
		}
	})
	t.Run("each strategy has its slot within a rate's group, its trials spread within it", func(t *testing.T) {
		for _, p := range d.Points {
			var bar *PlotBar
			for i := range d.Bars {
				b := &d.Bars[i]
				if b.Strategy == p.Strategy && math.Abs(b.X-p.X) <= d.BarWidth/2 {
					bar = b
				}
			}
			if bar == nil {
				t.Errorf("point %+v lies outside its strategy's bar", p)
			}
		}
		ng1g, kb1g := barAt(t, d, 0, 1), barAt(t, d, 1, 1)
		if !(ng1g.X < kb1g.X && ng1g.X > 0.5 && kb1g.X < 1.5) {
			t.Errorf("1Gi/s bars at %v and %v, want nodeguard left of kubelet within group 1", ng1g.X, kb1g.X)
		}
		var xs []float64
		for _, p := range d.Points {
			if p.Strategy == 0 && p.X > 0.5 {
				xs = append(xs, p.X)
			}
		}
		if len(xs) != 3 || xs[0] == xs[1] || xs[1] == xs[2] {
			t.Errorf("nodeguard's three 1Gi/s trials at %v, want three distinct x", xs)
		}
	})
	t.Run("medians are per strategy and rate", func(t *testing.T) {
		if len(d.Medians) != 3 {
			t.Fatalf("medians %+v, want nodeguard at both rates and kubelet at 200Mi/s", d.Medians)
		}
		for _, m := range d.Medians {
			if m.Strategy == 0 && m.X > 0.5 && m.Ms != -4 {
				t.Errorf("nodeguard 1Gi/s median %v, want -4", m.Ms)
			}
		}
	})
	t.Run("bars count every trial by outcome", func(t *testing.T) {
		for _, tc := range []struct {
			strategy, rate int
			want           [numOutcomes]int
		}{
			{0, 1, [numOutcomes]int{OutcomeCaught: 3}},
			{0, 0, [numOutcomes]int{OutcomeCaught: 1}},
			{1, 1, [numOutcomes]int{OutcomeKernelOOM: 1}},
			{1, 0, [numOutcomes]int{OutcomeCaught: 1, OutcomeMissed: 1}},
		} {
			if got := barAt(t, d, tc.strategy, tc.rate).Counts; got != tc.want {
				t.Errorf("%s at %s: %v, want %v", d.Strategies[tc.strategy], FormatRate(d.Rates[tc.rate]), got, tc.want)
			}
		}
	})
	t.Run("no trials, no data", func(t *testing.T) {
		if e := PrepareEvictionPlot(nil); len(e.Bars)+len(e.Points)+len(e.Strategies) != 0 {
			t.Errorf("%+v", e)
		}
	})
}

func barAt(t *testing.T, d EvictionPlotData, strategy, rate int) PlotBar {
	t.Helper()
	for _, b := range d.Bars {
		if b.Strategy == strategy && b.Rate == rate {
			return b
		}
	}
	t.Fatalf("no bar for strategy %d at rate %d", strategy, rate)
	return PlotBar{}
}

func TestSymLogScale(t *testing.T) {
	n := SymLogScale{}
	lo, hi := -100.0, 1000.0
	t.Run("it keeps the order and both ends", func(t *testing.T) {
		prev := -1.0
		for _, v := range []float64{-100, -6, -1, -0.1, 0, 0.1, 1, 10, 600, 1000} {
			x := n.Normalize(lo, hi, v)
			if x <= prev {
				t.Errorf("Normalize(%v) = %v, not above %v", v, x, prev)
			}
			prev = x
		}
		if n.Normalize(lo, hi, lo) != 0 || n.Normalize(lo, hi, hi) != 1 {
			t.Errorf("ends at %v and %v", n.Normalize(lo, hi, lo), n.Normalize(lo, hi, hi))
		}
	})
	t.Run("-6 ms and +0.1 ms are far apart, 0.1 and 0.2 ms close", func(t *testing.T) {
		far := n.Normalize(lo, hi, 0.1) - n.Normalize(lo, hi, -6)
		near := n.Normalize(lo, hi, 0.2) - n.Normalize(lo, hi, 0.1)
		if far < 10*near || far < 0.1 {
			t.Errorf("-6..+0.1 spans %v, 0.1..0.2 spans %v", far, near)
		}
	})
	t.Run("it is symmetric about 0", func(t *testing.T) {
		if a, b := n.Normalize(-10, 10, -5), n.Normalize(-10, 10, 5); math.Abs(a+b-1) > 1e-12 {
			t.Errorf("-5 at %v, +5 at %v", a, b)
		}
	})
}

func TestSymLogTicks(t *testing.T) {
	var labels []string
	for _, tk := range (SymLogTicks{}).Ticks(-100, 1000) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if want := []string{"-100", "-10", "-1", "0", "+1", "+10", "+100", "+1 s"}; !slices.Equal(labels, want) {
		t.Errorf("labels %v, want %v", labels, want)
	}
	if lo, hi := latencyRange([]PlotPoint{{Ms: -6}, {Ms: 600}}); lo != -100 || hi != 1000 {
		t.Errorf("range %v..%v, want -100..1000 (decades beyond the data)", lo, hi)
	}
	if lo, hi := latencyRange(nil); lo != -100 || hi != 1000 {
		t.Errorf("empty range %v..%v, want the -10..+100 floor's decades", lo, hi)
	}
}
