package bench

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nodeguard/nodeguard/loader"
)

// EventsOptions is one run of `nodeguard bench events`.
type EventsOptions struct {
	Config EventsConfig
	// OutDir, when set, gets events-latency.csv and events-latency.png.
	OutDir string
	Log    *slog.Logger
	// Report gets the table and the files written; Progress one line per
	// phase.
	Report, Progress io.Writer
}

// EventsBench loads the loader's bench family (bpf/bench.bpf.c) and
// measures the event pipeline with RunEvents: kernel-to-Go delivery
// latency, sustained events/s with zero loss, and decode cost.
func EventsBench(ctx context.Context, o EventsOptions) error {
	cfg := o.Config
	p, err := loader.Open(loader.Options{
		Logger:    o.Log,
		Families:  []string{loader.FamilyBench},
		RingSizes: map[loader.Ring]int{loader.RingBench: 4 << 20},
		QueueSize: 2 * cfg.Window,
	})
	if err != nil {
		return err
	}
	defer p.Close()
	cfg.Progress = o.Progress
	res, err := RunEvents(ctx, p, cfg)
	if err != nil {
		return err
	}
	WriteEventsTable(o.Report, res)
	if o.OutDir != "" {
		if err := writeEventsFiles(o.OutDir, res); err != nil {
			return err
		}
		fmt.Fprintf(o.Report, "wrote %s and %s\n", filepath.Join(o.OutDir, "events-latency.csv"), filepath.Join(o.OutDir, "events-latency.png"))
	}
	return nil
}

func writeEventsFiles(dir string, res EventsResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, "events-latency.csv")
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"sample", "latency_ns"})
	for i, d := range res.Samples {
		_ = w.Write([]string{strconv.Itoa(i), strconv.FormatInt(int64(d), 10)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return LatencyHistogramPNG(filepath.Join(dir, "events-latency.png"), "nodeguard: kernel-to-Go event delivery", res.Samples)
}
