//go:build !nodelane

package nodelane

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// testdata/guest/eviction.csv is the quick race's CSV from the lane's guest
// (8 trials: nodeguard caught both, the pollers none, PSI detected one
// too late).

func TestParseRaceCSV(t *testing.T) {
	trials, err := ParseRaceCSV(fixture(t, "eviction.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(trials) != 8 {
		t.Fatalf("%d trials, want 8", len(trials))
	}
	first := trials[0]
	if first.Strategy != "nodeguard" || first.Rate != 200<<20 || first.Trial != 1 || !first.Detected || first.KernelOOM ||
		first.KernelOOMFirst || first.Missed || first.Collateral != 0 || !slices.Equal(first.Victims, []string{"bench-eviction/hog-200mi-nodeguard-1"}) {
		t.Errorf("first trial %+v", first)
	}
	got := SummarizeRace(trials)
	want := []RaceStrategy{
		{Strategy: "nodeguard", Trials: 2, Caught: 2},
		{Strategy: "kubelet", Trials: 2, KernelOOMFirst: 2, KernelOOM: 2, Missed: 2},
		{Strategy: "poll1s", Trials: 2, KernelOOMFirst: 2, KernelOOM: 2, Missed: 2},
		// detected once, before the kernel's kill, but its own kill came
		// after it: lost, not caught
		{Strategy: "psi", Trials: 2, KernelOOMFirst: 2, KernelOOM: 2, Missed: 1},
	}
	if !slices.Equal(got, want) {
		t.Errorf("summary\n%+v\nwant\n%+v", got, want)
	}
	if s := got[0].String(); !strings.HasPrefix(s, "nodeguard: caught 2 of 2 trials before the kernel OOM killer, lost to it 0,") {
		t.Errorf("summary line %q", s)
	}
	if f := RaceFaults(trials, "nodeguard", 2); len(f) != 0 {
		t.Errorf("faults of a clean run: %q", f)
	}
}

func TestRaceFaults(t *testing.T) {
	base := func() []RaceTrial {
		trials, err := ParseRaceCSV(fixture(t, "eviction.csv"))
		if err != nil {
			t.Fatal(err)
		}
		return trials
	}
	tests := []struct {
		name   string
		change func([]RaceTrial) []RaceTrial
		want   string
	}{
		{"a trial lost to the kernel OOM killer is a fault", func(ts []RaceTrial) []RaceTrial { ts[0].KernelOOMFirst = true; return ts }, "lost to the kernel OOM killer"},
		{"a collateral eviction is a fault", func(ts []RaceTrial) []RaceTrial {
			ts[0].Collateral, ts[0].Victims = 1, []string{"bench-eviction/b-busy"}
			return ts
		}, "1 collateral evictions (victims bench-eviction/b-busy)"},
		{"a trial that failed is a fault", func(ts []RaceTrial) []RaceTrial { ts[4].Err = "hog never started"; return ts }, "failed: hog never started"},
		{"fewer trials than asked is a fault", func(ts []RaceTrial) []RaceTrial { return ts[1:] }, "1 trials of nodeguard, want 2"},
		{"a late detection is not a fault", func(ts []RaceTrial) []RaceTrial { return ts }, ""},
		{"the baselines' collateral evictions are not nodeguard's", func(ts []RaceTrial) []RaceTrial { ts[1].Collateral = 3; return ts }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := RaceFaults(tt.change(base()), "nodeguard", 2)
			switch {
			case tt.want == "" && len(f) > 0:
				t.Errorf("faults %q", f)
			case tt.want != "" && (len(f) != 1 || !strings.Contains(f[0], tt.want)):
				t.Errorf("faults %q, want one saying %q", f, tt.want)
			}
		})
	}
}

func TestParseRaceCSVRefuses(t *testing.T) {
	csv := string(fixture(t, "eviction.csv"))
	header, _, _ := strings.Cut(csv, "\n")
	for name, in := range map[string]string{
		"nothing":                   "",
		"a header without missed":   strings.Replace(header, ",missed,", ",", 1) + "\n",
		"a rate that is not one":    strings.Replace(csv, "209715200,nodeguard", "fast,nodeguard", 1),
		"a flag that is not a bool": strings.Replace(csv, ",false,bench-eviction/hog-200mi-nodeguard-1,", ",maybe,bench-eviction/hog-200mi-nodeguard-1,", 1),
		"a row without a strategy":  strings.Replace(csv, "209715200,nodeguard", "209715200,", 1),
		"a short row":               header + "\n1,2\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseRaceCSV([]byte(in)); !errors.Is(err, ErrMalformed) {
				t.Errorf("err = %v, want ErrMalformed", err)
			}
		})
	}
}
