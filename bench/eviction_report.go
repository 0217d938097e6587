package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// EvictionTrial is the record of one trial. Times are wall-clock (the
// hog's progress carries CLOCK_REALTIME); a zero time means "never".
type EvictionTrial struct {
	Rate              uint64
	Strategy          string
	Trial             int
	Budget, Threshold uint64
	// Baseline is the pod root's working set read at BaselineAt, after
	// the hog printed its first line and before it allocated.
	Baseline   uint64
	BaselineAt time.Time
	// Hog is the hog pod, "namespace/name"; AllocStart its first
	// allocation step and AchievedRate its rate from there on (bytes/s).
	Hog          string
	AllocStart   time.Time
	AchievedRate float64
	// Crossed is the ground truth: the first progress point where
	// Baseline + allocated >= Budget - Threshold.
	Crossed time.Time
	// Detected is the strategy's Detected time; KillSent when the
	// eviction's Kill began (its first pass signals every process) and
	// KillReturned when it returned; Released when the pod root's
	// working set was back below the line (or the hog cgroup gone),
	// polled every millisecond after the kill.
	Detected, KillSent, KillReturned, Released time.Time
	// KernelOOM is when the monitor first saw an oom_kill in the pod
	// root's subtree (polled every 2 ms); KernelOOMFirst whether one had
	// happened before the eviction's kill (read just before it), or at
	// all when there was no kill.
	KernelOOM      time.Time
	KernelOOMFirst bool
	// Victims are the evicted pods in order; Collateral counts those that
	// were not the hog. Reason is the first eviction's reason.
	Victims    []string
	Collateral int
	Reason     string
	// Missed: no detection before the kernel's OOM kill or the timeout.
	Missed, TimedOut bool
	// Controlled: the hog ran under a controller (a Deployment: the race
	// through the API server); Replaced is when a new pod of that
	// controller was running after the hog's eviction (zero: none ran
	// within the wait, or the hog was not evicted).
	Controlled bool
	Replaced   time.Time
	// Note flags a doubtful record; Err is why the trial failed.
	Note, Err string
}

// finish derives the ground truth and the verdicts from the hog's
// progress.
func (t *EvictionTrial) finish(points []ProgressPoint) {
	if start, rate, ok := AllocationStart(points); ok {
		t.AllocStart, t.AchievedRate = start, rate
		if !t.BaselineAt.IsZero() && t.BaselineAt.After(start) {
			t.Note = "baseline read after allocation began"
		}
	}
	if at, ok := Crossing(points, t.Baseline, t.Budget, t.Threshold); ok {
		t.Crossed = at
	} else if at, ok := ProjectCrossing(points, t.Baseline, t.Budget, t.Threshold, t.AchievedRate); ok && !t.Detected.IsZero() {
		// Evicted before the hog's log reached the line: either early
		// (the pod root's working set holds more than baseline +
		// allocated: the hog's own runtime, page tables), or its last
		// lines were not written yet when it was killed (at 2 GiB/s the
		// log lags). The crossing is where its steady rate would have
		// taken it from its last line; the detection counts either way.
		t.Crossed = at
		if t.Note == "" {
			t.Note = "crossing extrapolated from the hog's rate: it was evicted before its log reached the line"
		}
	}
	if t.KillSent.IsZero() && !t.KernelOOM.IsZero() {
		t.KernelOOMFirst = true
	}
	t.Missed = t.Detected.IsZero() || (!t.KernelOOM.IsZero() && t.Detected.After(t.KernelOOM))
	if !t.Detected.IsZero() && !t.AllocStart.IsZero() && t.Detected.Before(t.AllocStart) {
		// A stale signal, not the hog: the detection does not count, and
		// a kernel OOM kill of the hog came first whatever was evicted.
		t.Note = "false positive: detected before the hog allocated"
		t.Missed = true
		t.KernelOOMFirst = !t.KernelOOM.IsZero()
	}
	if !t.Detected.IsZero() && t.Crossed.IsZero() && !t.Missed {
		// No ground truth to time it against: the hog's log shows no
		// allocation, or too little for a rate (evicted long before it
		// could near the line, or its log lost). It does not count as a
		// detection, and is counted as missed rather than as neither.
		t.Note = "no ground truth: detected, but the hog's log never neared the line"
		t.Missed = true
		t.KernelOOMFirst = !t.KernelOOM.IsZero()
	}
}

func since(a, b time.Time) (time.Duration, bool) {
	if a.IsZero() || b.IsZero() {
		return 0, false
	}
	return b.Sub(a), true
}

// DetectionLatency is Detected - Crossed (negative when the strategy
// fired before the ground truth line, e.g. on pressure alone).
func (t EvictionTrial) DetectionLatency() (time.Duration, bool) { return since(t.Crossed, t.Detected) }

// KillLatency is KillSent - Detected.
func (t EvictionTrial) KillLatency() (time.Duration, bool) { return since(t.Detected, t.KillSent) }

// ReleaseLatency is Released - KillSent.
func (t EvictionTrial) ReleaseLatency() (time.Duration, bool) { return since(t.KillSent, t.Released) }

// Outcome is a one-line summary for progress output.
func (t EvictionTrial) Outcome() string {
	if t.Err != "" {
		return "error: " + t.Err
	}
	var parts []string
	if d, ok := t.DetectionLatency(); ok {
		parts = append(parts, "detected "+signedMs(d)+" after crossing")
	} else if t.Detected.IsZero() {
		parts = append(parts, "not detected")
	}
	if d, ok := t.KillLatency(); ok {
		parts = append(parts, "kill +"+fmtMs(d))
	}
	if d, ok := t.ReleaseLatency(); ok {
		parts = append(parts, "released +"+fmtMs(d))
	}
	if len(t.Victims) > 0 {
		parts = append(parts, "victims "+strings.Join(t.Victims, ","))
	}
	if t.KernelOOMFirst {
		parts = append(parts, "KERNEL OOM FIRST")
	}
	if t.Missed {
		parts = append(parts, "MISSED")
	}
	if t.TimedOut {
		parts = append(parts, "timed out")
	}
	if t.Controlled && !t.Replaced.IsZero() {
		parts = append(parts, "replacement ran")
	}
	if t.AchievedRate > 0 {
		parts = append(parts, fmt.Sprintf("hog %.0f MiB/s", t.AchievedRate/(1<<20)))
	}
	if t.Note != "" {
		parts = append(parts, "note: "+t.Note)
	}
	return strings.Join(parts, ", ")
}

// EvictionRow is one strategy at one rate.
type EvictionRow struct {
	Strategy string
	Rate     uint64
	Trials   int
	// Detected counts trials detected in time (not Missed); Detection is
	// their latency after the crossing, Kill the kill's latency after the
	// detection, Release the release's after the kill.
	Detected                 int
	Detection, Kill, Release Summary
	// KernelOOMFirst counts trials where the kernel's OOM killer fired
	// before the strategy's kill (or with no kill), KernelOOM those with
	// any OOM kill in the pod root.
	KernelOOMFirst, KernelOOM int
	Collateral, Missed        int
	Errors                    int
	// Controlled counts trials whose hog had a controller, Replaced
	// those where its replacement ran after the eviction.
	Controlled, Replaced int
}

// SummarizeEviction groups trials by strategy (in the order of first
// appearance) and rate (ascending).
func SummarizeEviction(trials []EvictionTrial) []EvictionRow {
	type key struct {
		s string
		r uint64
	}
	var order []string
	var rates []uint64
	by := map[key][]EvictionTrial{}
	for _, t := range trials {
		k := key{t.Strategy, t.Rate}
		if !slices.Contains(order, t.Strategy) {
			order = append(order, t.Strategy)
		}
		if !slices.Contains(rates, t.Rate) {
			rates = append(rates, t.Rate)
		}
		by[k] = append(by[k], t)
	}
	slices.Sort(rates)
	var rows []EvictionRow
	for _, s := range order {
		for _, r := range rates {
			ts := by[key{s, r}]
			if len(ts) == 0 {
				continue
			}
			row := EvictionRow{Strategy: s, Rate: r, Trials: len(ts)}
			var det, kill, rel []time.Duration
			for _, t := range ts {
				if t.Err != "" {
					row.Errors++
				}
				if d, ok := t.DetectionLatency(); ok && !t.Missed {
					det = append(det, d)
					row.Detected++
				}
				if d, ok := t.KillLatency(); ok {
					kill = append(kill, d)
				}
				if d, ok := t.ReleaseLatency(); ok {
					rel = append(rel, d)
				}
				if t.KernelOOMFirst {
					row.KernelOOMFirst++
				}
				if !t.KernelOOM.IsZero() {
					row.KernelOOM++
				}
				row.Collateral += t.Collateral
				if t.Controlled {
					row.Controlled++
				}
				if !t.Replaced.IsZero() {
					row.Replaced++
				}
				if t.Missed {
					row.Missed++
				}
			}
			row.Detection, row.Kill, row.Release = Summarize(det), Summarize(kill), Summarize(rel)
			rows = append(rows, row)
		}
	}
	return rows
}

func fmtMs(d time.Duration) string {
	switch ms := float64(d) / 1e6; {
	case math.Abs(ms) >= 10000:
		return fmt.Sprintf("%.1f s", ms/1000)
	case math.Abs(ms) >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	default:
		return fmt.Sprintf("%.1f ms", ms)
	}
}

func signedMs(d time.Duration) string {
	if d < 0 {
		return "-" + fmtMs(-d)
	}
	return "+" + fmtMs(d)
}

func cell(s Summary, pick func(Summary) time.Duration) string {
	if s.N == 0 {
		return "-"
	}
	return fmtMs(pick(s))
}

func p50(s Summary) time.Duration { return s.P50 }
func p99(s Summary) time.Duration { return s.P99 }

// WriteEvictionTable prints one line per strategy and rate. Detection
// latencies are signed: negative is before the ground-truth crossing.
// Where a hog had a controller (the race through the API server), a last
// column counts the trials whose replacement pod ran.
func WriteEvictionTable(w io.Writer, rows []EvictionRow) {
	controlled := slices.ContainsFunc(rows, func(r EvictionRow) bool { return r.Controlled > 0 })
	fmt.Fprintf(w, "%-14s %9s %6s %8s %9s %9s %9s %9s %9s %9s %10s %10s %7s",
		"strategy", "rate", "trials", "detected", "det p50", "det p99", "kill p50", "kill p99", "rel p50", "rel p99", "OOM first", "collateral", "missed")
	if controlled {
		fmt.Fprintf(w, " %8s", "replaced")
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		fmt.Fprintf(w, "%-14s %9s %6d %8d %9s %9s %9s %9s %9s %9s %9.0f%% %10d %7d",
			r.Strategy, FormatRate(r.Rate), r.Trials, r.Detected,
			signedCell(r.Detection, p50), signedCell(r.Detection, p99), cell(r.Kill, p50), cell(r.Kill, p99),
			cell(r.Release, p50), cell(r.Release, p99),
			100*float64(r.KernelOOMFirst)/float64(max(r.Trials, 1)), r.Collateral, r.Missed)
		if controlled {
			fmt.Fprintf(w, " %8d", r.Replaced)
		}
		fmt.Fprintln(w)
	}
}

func signedCell(s Summary, pick func(Summary) time.Duration) string {
	if s.N == 0 {
		return "-"
	}
	return signedMs(pick(s))
}

// The race's targets for nodeguard, checked by WriteEvictionTargets.
const (
	TargetDetectionP99 = 10 * time.Millisecond // after the crossing
	TargetKillP99      = 20 * time.Millisecond // after the detection
	TargetNoOOMUpTo    = 1 << 30               // bytes/s: no kernel OOM kill at or below this rate
)

// EvictionTargets checks strategy's rows against the race's targets: one
// line per target, "MET" or "MISSED" with the figures behind it. A rate
// with a trial not detected in time misses the detection target whatever
// the others' latencies.
func EvictionTargets(rows []EvictionRow, strategy string) []string {
	var (
		det, kill []string
		detOK     = true
		killOK    = true
		oomTrials int
		oom       int
		coll      int
		found     bool
		oomAbove  []string
	)
	for _, r := range rows {
		if r.Strategy != strategy {
			continue
		}
		found = true
		switch {
		case r.Detected < r.Trials:
			detOK = false
			det = append(det, fmt.Sprintf("%s %d/%d in time", FormatRate(r.Rate), r.Detected, r.Trials))
		default:
			detOK = detOK && r.Detection.P99 <= TargetDetectionP99
			det = append(det, fmt.Sprintf("%s %s", FormatRate(r.Rate), signedMs(r.Detection.P99)))
		}
		if r.Kill.N > 0 {
			killOK = killOK && r.Kill.P99 <= TargetKillP99
			kill = append(kill, fmt.Sprintf("%s %s", FormatRate(r.Rate), fmtMs(r.Kill.P99)))
		} else {
			killOK = false
			kill = append(kill, FormatRate(r.Rate)+" no kill")
		}
		if r.Rate <= TargetNoOOMUpTo {
			oomTrials += r.Trials
			oom += r.KernelOOM
		} else if r.KernelOOM > 0 {
			oomAbove = append(oomAbove, fmt.Sprintf("%s: %d of %d", FormatRate(r.Rate), r.KernelOOM, r.Trials))
		}
		coll += r.Collateral
	}
	if !found {
		return nil
	}
	oomLine := fmt.Sprintf("no kernel OOM kill up to %s: %s (%d of %d trials had one)", FormatRate(TargetNoOOMUpTo), verdict(oom == 0), oom, oomTrials)
	if len(oomAbove) > 0 {
		oomLine += "; above: " + strings.Join(oomAbove, ", ")
	}
	return []string{
		fmt.Sprintf("detection p99 <= %s after the crossing: %s (%s)", fmtMs(TargetDetectionP99), verdict(detOK), strings.Join(det, ", ")),
		fmt.Sprintf("kill sent p99 <= %s after detection: %s (%s)", fmtMs(TargetKillP99), verdict(killOK), strings.Join(kill, ", ")),
		oomLine,
		fmt.Sprintf("no collateral eviction: %s (%d)", verdict(coll == 0), coll),
	}
}

// WriteEvictionTargets prints EvictionTargets under a heading.
func WriteEvictionTargets(w io.Writer, rows []EvictionRow, strategy string) {
	lines := EvictionTargets(rows, strategy)
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(w, "targets (%s):\n", strategy)
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

// DetectionRatio returns, per rate where both strategies detected every
// trial in time, the ratio of a's detection p50 to b's (e.g. kubelet /
// nodeguard). A strategy that missed trials has no p50 to compare: the
// p50 of the trials it caught is the luck of its phase (a 10 s poller
// that catches a 100 ms window does so within those 100 ms), and b's
// p50 must be positive for a ratio to mean anything.
func DetectionRatio(rows []EvictionRow, a, b string) map[uint64]float64 {
	pa, pb := map[uint64]time.Duration{}, map[uint64]time.Duration{}
	for _, r := range rows {
		if r.Detection.N == 0 || r.Missed > 0 || r.Detected < r.Trials {
			continue
		}
		switch r.Strategy {
		case a:
			pa[r.Rate] = r.Detection.P50
		case b:
			pb[r.Rate] = r.Detection.P50
		}
	}
	out := map[uint64]float64{}
	for rate, x := range pa {
		if y, ok := pb[rate]; ok && y > 0 {
			out[rate] = float64(x) / float64(y)
		}
	}
	return out
}

// EvictionCSVHeader is the header of WriteEvictionCSV.
var EvictionCSVHeader = []string{
	"rate_bytes_per_s", "strategy", "trial", "budget_bytes", "threshold_bytes", "baseline_bytes",
	"achieved_rate_bytes_per_s", "alloc_start_unix_ns", "crossed_unix_ns", "detected_unix_ns",
	"kill_sent_unix_ns", "kill_returned_unix_ns", "released_unix_ns", "kernel_oom_unix_ns",
	"detection_ms", "kill_ms", "release_ms", "kernel_oom_first", "victims", "collateral",
	"missed", "timed_out", "reason", "note", "error", "controlled", "replaced_unix_ns",
}

// WriteEvictionCSV writes one row per trial.
func WriteEvictionCSV(w io.Writer, trials []EvictionTrial) error {
	cw := csv.NewWriter(w)
	_ = cw.Write(EvictionCSVHeader)
	ns := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatInt(t.UnixNano(), 10)
	}
	ms := func(d time.Duration, ok bool) string {
		if !ok {
			return ""
		}
		return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64)
	}
	for _, t := range trials {
		_ = cw.Write([]string{
			strconv.FormatUint(t.Rate, 10), t.Strategy, strconv.Itoa(t.Trial),
			strconv.FormatUint(t.Budget, 10), strconv.FormatUint(t.Threshold, 10), strconv.FormatUint(t.Baseline, 10),
			strconv.FormatFloat(t.AchievedRate, 'f', 0, 64), ns(t.AllocStart), ns(t.Crossed), ns(t.Detected),
			ns(t.KillSent), ns(t.KillReturned), ns(t.Released), ns(t.KernelOOM),
			ms(t.DetectionLatency()), ms(t.KillLatency()), ms(t.ReleaseLatency()),
			strconv.FormatBool(t.KernelOOMFirst), strings.Join(t.Victims, " "), strconv.Itoa(t.Collateral),
			strconv.FormatBool(t.Missed), strconv.FormatBool(t.TimedOut), t.Reason, t.Note, t.Err,
			strconv.FormatBool(t.Controlled), ns(t.Replaced),
		})
	}
	cw.Flush()
	return cw.Error()
}
