package bench

import (
	"errors"
	"fmt"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
)

// LatencyHistogramPNG writes a histogram of latencies (in µs) to path,
// cut at the 99.9th percentile so that one outlier does not flatten it;
// the title states the cut and the quantiles.
func LatencyHistogramPNG(path, title string, samples []time.Duration) error {
	s := Summarize(samples)
	vals := make(plotter.Values, 0, len(samples))
	for _, d := range samples {
		if d <= s.P999 {
			vals = append(vals, float64(d)/1e3)
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s\np50 %.1f µs  p99 %.1f µs  max %.1f µs  (n=%d, shown up to p99.9)",
		title, float64(s.P50)/1e3, float64(s.P99)/1e3, float64(s.Max)/1e3, s.N)
	p.X.Label.Text = "latency (µs)"
	p.Y.Label.Text = "events"
	h, err := plotter.NewHist(vals, 60)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	p.Add(h)
	if err := p.Save(8*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// writePNG writes a drawn canvas to path as a PNG.
func writePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(f)
	if err := errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
