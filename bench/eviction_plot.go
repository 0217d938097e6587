package bench

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Outcome is what became of one trial, as eviction.png counts it.
type Outcome int

// The outcomes, in the order they are stacked.
const (
	// OutcomeCaught: detected in time and killed before the kernel's OOM
	// killer fired.
	OutcomeCaught Outcome = iota
	// OutcomeKernelOOM: the kernel's OOM killer fired first, whether the
	// strategy had noticed or not.
	OutcomeKernelOOM
	// OutcomeMissed: neither: no detection in time and no OOM kill (the
	// trial timed out, or the detection did not count).
	OutcomeMissed
	// OutcomeError: the trial failed.
	OutcomeError
	numOutcomes
)

func (o Outcome) String() string {
	switch o {
	case OutcomeCaught:
		return "caught"
	case OutcomeKernelOOM:
		return "kernel OOM killer first"
	case OutcomeMissed:
		return "missed"
	case OutcomeError:
		return "error"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// TrialOutcome classifies a trial: an error, else the kernel's OOM killer
// first, else missed, else caught.
func TrialOutcome(t EvictionTrial) Outcome {
	switch {
	case t.Err != "":
		return OutcomeError
	case t.KernelOOMFirst:
		return OutcomeKernelOOM
	case t.Missed:
		return OutcomeMissed
	}
	return OutcomeCaught
}

// PlotPoint is one detection drawn: X on the categorical axis (the rate's
// group, offset by strategy and trial), Ms the signed detection latency.
type PlotPoint struct {
	Strategy int
	X, Ms    float64
}

// PlotBar is one strategy's outcome counts at one rate, drawn at X.
type PlotBar struct {
	Strategy, Rate int
	X              float64
	Counts         [numOutcomes]int
}

// EvictionPlotData is what eviction.png draws, prepared from the trials:
// rates are groups 0, 1, ... on the x axis (ascending), each strategy (in
// order of first appearance) at its offset within the group.
type EvictionPlotData struct {
	Strategies []string
	Rates      []uint64
	// Points: one per trial detected in time (not Missed); Medians: per
	// strategy and rate with such trials, at the strategy's offset.
	Points, Medians []PlotPoint
	Bars            []PlotBar
	// BarWidth is each bar's width in x units.
	BarWidth float64
}

// groupWidth is the share of a rate's unit on the x axis its strategies
// take; trialSpread the share of a strategy's slot its trials spread over,
// so that equal latencies do not hide each other.
const (
	groupWidth  = 0.84
	trialSpread = 0.5
)

// PrepareEvictionPlot lays the trials out for EvictionPNG.
func PrepareEvictionPlot(trials []EvictionTrial) EvictionPlotData {
	var d EvictionPlotData
	for _, t := range trials {
		if !slices.Contains(d.Strategies, t.Strategy) {
			d.Strategies = append(d.Strategies, t.Strategy)
		}
		if !slices.Contains(d.Rates, t.Rate) {
			d.Rates = append(d.Rates, t.Rate)
		}
	}
	slices.Sort(d.Rates)
	n := len(d.Strategies)
	if n == 0 {
		return d
	}
	slot := groupWidth / float64(n)
	d.BarWidth = 0.85 * slot
	center := func(si, ri int) float64 { return float64(ri) - groupWidth/2 + slot*(float64(si)+0.5) }
	for si, s := range d.Strategies {
		for ri, r := range d.Rates {
			bar := PlotBar{Strategy: si, Rate: ri, X: center(si, ri)}
			var lat []float64
			var group []EvictionTrial
			for _, t := range trials {
				if t.Strategy == s && t.Rate == r {
					group = append(group, t)
				}
			}
			if len(group) == 0 {
				continue
			}
			for k, t := range group {
				bar.Counts[TrialOutcome(t)]++
				if dl, ok := t.DetectionLatency(); ok && !t.Missed {
					ms := float64(dl) / 1e6
					lat = append(lat, ms)
					x := bar.X
					if m := len(group); m > 1 {
						x += slot * trialSpread * (float64(k)/float64(m-1) - 0.5)
					}
					d.Points = append(d.Points, PlotPoint{Strategy: si, X: x, Ms: ms})
				}
			}
			d.Bars = append(d.Bars, bar)
			if len(lat) > 0 {
				slices.Sort(lat)
				med := lat[len(lat)/2]
				if len(lat)%2 == 0 {
					med = (lat[len(lat)/2-1] + lat[len(lat)/2]) / 2
				}
				d.Medians = append(d.Medians, PlotPoint{Strategy: si, X: bar.X, Ms: med})
			}
		}
	}
	return d
}

// symlogLinear is the symmetric-log scale's linear range, in ms: within
// ±1 ms the axis is linear, beyond it logarithmic, so that -6 ms and +0.1
// ms are far apart and 600 ms still fits.
const symlogLinear = 1.0

// symlog maps a signed latency onto the symmetric-log axis.
func symlog(v float64) float64 {
	return math.Copysign(math.Log10(1+math.Abs(v)/symlogLinear), v)
}

// SymLogScale is a symmetric-log plot.Normalizer.
type SymLogScale struct{}

// Normalize implements plot.Normalizer.
func (SymLogScale) Normalize(min, max, x float64) float64 {
	lo, hi := symlog(min), symlog(max)
	if hi == lo {
		return 0.5
	}
	return (symlog(x) - lo) / (hi - lo)
}

// SymLogTicks marks 0 and every power of ten (±1, ±10, ... ms) within the
// range, with minor ticks at 2 and 5 times each.
type SymLogTicks struct{}

// Ticks implements plot.Ticker.
func (SymLogTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	add := func(v float64, major bool) {
		if v < min || v > max {
			return
		}
		t := plot.Tick{Value: v}
		if major {
			t.Label = signedLabel(v)
		}
		out = append(out, t)
	}
	add(0, true)
	for p := 0.0; p <= 6; p++ {
		dec := math.Pow(10, p)
		for _, sign := range []float64{1, -1} {
			add(sign*dec, true)
			add(sign*2*dec, false)
			add(sign*5*dec, false)
		}
	}
	slices.SortFunc(out, func(a, b plot.Tick) int { return cmpFloat(a.Value, b.Value) })
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func signedLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%+.0f s", v/1000)
	}
	return fmt.Sprintf("%+.0f", v)
}

// latencyRange is the y range of the detection panel: the powers of ten
// (in ms) just beyond the earliest and the latest detection, at least -10
// and +100 ms, so that the crossing and the 10 ms target are always in
// view and both ends carry a labelled tick.
func latencyRange(points []PlotPoint) (lo, hi float64) {
	lo, hi = -10, 100
	for _, p := range points {
		lo, hi = min(lo, p.Ms), max(hi, p.Ms)
	}
	decade := func(v float64) float64 { return math.Pow(10, math.Ceil(math.Log10(v*1.2))) }
	return -decade(-lo), decade(hi)
}

// outcomeColors are the bar colors: caught green, the OOM killer red,
// missed grey, error black.
var outcomeColors = [numOutcomes]color.Color{
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0xaa, G: 0xaa, B: 0xaa, A: 0xff},
	color.Black,
}

// EvictionPNG draws two panels over the same x axis (the hog's rates, one
// slot per strategy within each): above, every trial's signed detection
// latency after the ground-truth crossing (symmetric-log ms, 0 = the
// crossing, a dashed line at the +10 ms target) with each strategy's
// median as a bar; below, per strategy and rate, the trials caught, lost
// to the kernel's OOM killer, missed, or failed, stacked.
func EvictionPNG(path string, trials []EvictionTrial) error {
	d := PrepareEvictionPlot(trials)
	top, bottom := plot.New(), plot.New()
	top.Title.Text = "OOM race: detection after the pod root crossed budget - threshold (negative: before)"
	top.Y.Label.Text = "detection latency (ms, symmetric log)"
	top.Y.Scale, top.Y.Tick.Marker = SymLogScale{}, SymLogTicks{}
	top.Y.Min, top.Y.Max = latencyRange(d.Points)
	bottom.Title.Text = "trials per outcome"
	bottom.Y.Label.Text = "trials"
	bottom.X.Label.Text = "hog allocation rate"
	xlo, xhi := -0.5, float64(max(len(d.Rates), 1))-0.5
	top.X.Min, top.X.Max, bottom.X.Min, bottom.X.Max = xlo, xhi, xlo, xhi
	rateTicks := func(float64, float64) []plot.Tick {
		out := make([]plot.Tick, len(d.Rates))
		for i, r := range d.Rates {
			out[i] = plot.Tick{Value: float64(i), Label: FormatRate(r)}
		}
		return out
	}
	top.X.Tick.Marker = plot.TickerFunc(rateTicks)
	// The bottom panel names each bar's strategy; the rates are above it.
	bottom.X.Tick.Marker = plot.TickerFunc(func(float64, float64) []plot.Tick {
		out := make([]plot.Tick, len(d.Bars))
		for i, b := range d.Bars {
			out[i] = plot.Tick{Value: b.X, Label: d.Strategies[b.Strategy]}
		}
		return out
	})
	bottom.X.Tick.Label.Rotation = math.Pi / 2
	bottom.X.Tick.Label.XAlign, bottom.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	bottom.X.Tick.Label.Font.Size = vg.Points(8)

	// The crossing and the target.
	var lines []*plotter.Line
	for _, h := range []struct {
		y    float64
		dash bool
	}{{0, false}, {float64(TargetDetectionP99) / 1e6, true}} {
		l, err := plotter.NewLine(plotter.XYs{{X: xlo, Y: h.y}, {X: xhi, Y: h.y}})
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		l.LineStyle.Color = color.Gray{Y: 0x60}
		if h.dash {
			l.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		top.Add(l)
		lines = append(lines, l)
	}
	silent := []string{}
	for si, s := range d.Strategies {
		var pts plotter.XYs
		for _, p := range d.Points {
			if p.Strategy == si {
				pts = append(pts, plotter.XY{X: p.X, Y: p.Ms})
			}
		}
		if len(pts) == 0 {
			silent = append(silent, s)
			continue
		}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Shape = plotutil.Color(si), plotutil.Shape(si)
		sc.GlyphStyle.Radius = vg.Points(3)
		top.Add(sc)
		top.Legend.Add(s, sc)
		for _, m := range d.Medians {
			if m.Strategy != si {
				continue
			}
			l, err := plotter.NewLine(plotter.XYs{{X: m.X - d.BarWidth/2, Y: m.Ms}, {X: m.X + d.BarWidth/2, Y: m.Ms}})
			if err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			l.LineStyle.Color, l.LineStyle.Width = plotutil.Color(si), vg.Points(2)
			top.Add(l)
		}
	}
	if len(silent) > 0 {
		top.Legend.Add("never in time: " + strings.Join(silent, ", "))
	}
	top.Legend.Add("0: the crossing (hog's log); bar: median", lines[0])
	top.Legend.Add(fmt.Sprintf("target: p99 <= %s", fmtMs(TargetDetectionP99)), lines[1])
	top.Legend.Top, top.Legend.Left = true, true
	top.Legend.TextStyle.Font.Size = vg.Points(9)

	maxTrials := 1
	for _, b := range d.Bars {
		n := 0
		for _, c := range b.Counts {
			n += c
		}
		maxTrials = max(maxTrials, n)
		y := 0.0
		for o := range numOutcomes {
			c := float64(b.Counts[o])
			if c == 0 {
				continue
			}
			x0, x1 := b.X-d.BarWidth/2, b.X+d.BarWidth/2
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: y}, {X: x1, Y: y}, {X: x1, Y: y + c}, {X: x0, Y: y + c}})
			if err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			poly.Color = outcomeColors[o]
			poly.LineStyle.Color = color.White
			bottom.Add(poly)
			y += c
		}
	}
	for o := range numOutcomes {
		used := false
		for _, b := range d.Bars {
			used = used || b.Counts[o] > 0
		}
		if !used {
			continue
		}
		sw, err := plotter.NewPolygon(plotter.XYs{{X: 0, Y: 0}})
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		sw.Color = outcomeColors[o]
		bottom.Legend.Add(o.String(), sw)
	}
	// The rate of each group, above its bars.
	var labels plotter.XYLabels
	for i, r := range d.Rates {
		labels.XYs = append(labels.XYs, plotter.XY{X: float64(i), Y: float64(maxTrials) + 0.4})
		labels.Labels = append(labels.Labels, FormatRate(r))
	}
	if len(labels.XYs) > 0 {
		lb, err := plotter.NewLabels(labels)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].XAlign = draw.XCenter
		}
		bottom.Add(lb)
	}
	bottom.Y.Min, bottom.Y.Max = 0, float64(maxTrials)+1
	bottom.Y.Tick.Marker = plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var out []plot.Tick
		for v := 0; v <= maxTrials; v++ {
			out = append(out, plot.Tick{Value: float64(v), Label: fmt.Sprint(v)})
		}
		return out
	})
	bottom.Legend.Top = true
	bottom.Legend.TextStyle.Font.Size = vg.Points(9)

	img := vgimg.New(10*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadX: vg.Points(6), PadY: vg.Points(16)}
	canvases := plot.Align([][]*plot.Plot{{top}, {bottom}}, tiles, dc)
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	return writePNG(path, img)
}
