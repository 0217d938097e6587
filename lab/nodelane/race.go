package nodelane

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Readers of the OOM race's output (`nodeguard bench eviction --out DIR`)
// for the race check. Like the others, they read the files by their
// documented names (eviction.csv's header, docs/benchmarks.md's OOM race sections), not
// through the bench package, so the check grades the race's output rather
// than reusing its arithmetic.

// RaceTrial is one row of eviction.csv: one trial of one strategy.
type RaceTrial struct {
	Strategy string
	// Rate is the hog's allocation rate in bytes/s; Trial its number at
	// that rate.
	Rate  uint64
	Trial int
	// Detected: the strategy detected the crossing (detected_unix_ns is
	// set). KernelOOM: the kernel OOM-killed in the pod root during the
	// trial; KernelOOMFirst: before the strategy's kill, or with none.
	Detected, KernelOOM, KernelOOMFirst bool
	// Missed: not detected before the kernel's OOM kill or the trial's
	// end; TimedOut: the trial's bound ran out.
	Missed, TimedOut bool
	// Victims are the evicted pods, Collateral how many were not the hog.
	Victims    []string
	Collateral int
	// Note flags a doubtful record, Err a trial that failed.
	Note, Err string
}

// raceColumns are the columns ParseRaceCSV needs.
var raceColumns = []string{"rate_bytes_per_s", "strategy", "trial", "detected_unix_ns", "kernel_oom_unix_ns", "kernel_oom_first",
	"victims", "collateral", "missed", "timed_out", "note", "error"}

// ParseRaceCSV parses eviction.csv by its header's names (other columns
// are ignored; a missing one is an error).
func ParseRaceCSV(b []byte) ([]RaceTrial, error) {
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("parse eviction.csv: %w: %w", ErrMalformed, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("parse eviction.csv: no header: %w", ErrMalformed)
	}
	col := map[string]int{}
	for i, name := range rows[0] {
		col[name] = i
	}
	for _, name := range raceColumns {
		if _, ok := col[name]; !ok {
			return nil, fmt.Errorf("parse eviction.csv: no column %q in %q: %w", name, rows[0], ErrMalformed)
		}
	}
	var out []RaceTrial
	for n, row := range rows[1:] {
		get := func(name string) string { return row[col[name]] }
		line := n + 2
		var t RaceTrial
		var err error
		t.Strategy = get("strategy")
		if t.Strategy == "" {
			return nil, fmt.Errorf("parse eviction.csv line %d: no strategy: %w", line, ErrMalformed)
		}
		if t.Rate, err = strconv.ParseUint(get("rate_bytes_per_s"), 10, 64); err != nil {
			return nil, fmt.Errorf("parse eviction.csv line %d rate: %w: %w", line, ErrMalformed, err)
		}
		if t.Trial, err = strconv.Atoi(get("trial")); err != nil {
			return nil, fmt.Errorf("parse eviction.csv line %d trial: %w: %w", line, ErrMalformed, err)
		}
		if t.Collateral, err = strconv.Atoi(get("collateral")); err != nil || t.Collateral < 0 {
			return nil, fmt.Errorf("parse eviction.csv line %d collateral %q: %w", line, get("collateral"), ErrMalformed)
		}
		for name, dst := range map[string]*bool{"kernel_oom_first": &t.KernelOOMFirst, "missed": &t.Missed, "timed_out": &t.TimedOut} {
			if *dst, err = strconv.ParseBool(get(name)); err != nil {
				return nil, fmt.Errorf("parse eviction.csv line %d %s %q: %w", line, name, get(name), ErrMalformed)
			}
		}
		t.Detected = get("detected_unix_ns") != ""
		t.KernelOOM = get("kernel_oom_unix_ns") != ""
		t.Victims = strings.Fields(get("victims"))
		t.Note, t.Err = get("note"), get("error")
		out = append(out, t)
	}
	return out, nil
}

// RaceStrategy sums up one strategy's trials.
type RaceStrategy struct {
	Strategy string
	// Caught counts trials detected in time and killed before the kernel
	// OOM killer fired, with no error; KernelOOMFirst those lost to the
	// kernel OOM killer (detected or not); KernelOOM those with any OOM
	// kill in the pod root.
	Trials, Caught, KernelOOMFirst, KernelOOM int
	Missed, TimedOut, Collateral, Errors      int
}

// String is the strategy's summary line.
func (s RaceStrategy) String() string {
	return fmt.Sprintf("%s: caught %d of %d trials before the kernel OOM killer, lost to it %d, any kernel OOM kill %d, missed %d, timed out %d, collateral evictions %d, errors %d",
		s.Strategy, s.Caught, s.Trials, s.KernelOOMFirst, s.KernelOOM, s.Missed, s.TimedOut, s.Collateral, s.Errors)
}

// SummarizeRace sums trials up per strategy, in the order the strategies
// first appear.
func SummarizeRace(trials []RaceTrial) []RaceStrategy {
	var out []RaceStrategy
	for _, t := range trials {
		i := slices.IndexFunc(out, func(s RaceStrategy) bool { return s.Strategy == t.Strategy })
		if i < 0 {
			out = append(out, RaceStrategy{Strategy: t.Strategy})
			i = len(out) - 1
		}
		s := &out[i]
		s.Trials++
		if t.Detected && !t.Missed && !t.KernelOOMFirst && t.Err == "" {
			s.Caught++
		}
		if t.KernelOOMFirst {
			s.KernelOOMFirst++
		}
		if t.KernelOOM {
			s.KernelOOM++
		}
		if t.Missed {
			s.Missed++
		}
		if t.TimedOut {
			s.TimedOut++
		}
		if t.Err != "" {
			s.Errors++
		}
		s.Collateral += t.Collateral
	}
	return out
}

// RaceFaults returns what makes strategy's trials wrong rather than slow:
// a trial that failed, one lost to the kernel OOM killer, one that evicted
// another pod than the hog; and want trials of it, no fewer. Latencies are
// not judged here (benchmarks print figures, tests do not time-assert).
func RaceFaults(trials []RaceTrial, strategy string, want int) []string {
	var faults []string
	n := 0
	for _, t := range trials {
		if t.Strategy != strategy {
			continue
		}
		n++
		at := fmt.Sprintf("%s trial %d at %d MiB/s", strategy, t.Trial, t.Rate>>20)
		if t.Err != "" {
			faults = append(faults, at+": failed: "+t.Err)
		}
		if t.KernelOOMFirst {
			faults = append(faults, at+": lost to the kernel OOM killer")
		}
		if t.Collateral > 0 {
			faults = append(faults, fmt.Sprintf("%s: %d collateral evictions (victims %s)", at, t.Collateral, strings.Join(t.Victims, ", ")))
		}
	}
	if n != want {
		faults = append(faults, fmt.Sprintf("%d trials of %s, want %d", n, strategy, want))
	}
	return faults
}
