package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/loader"
)

func newBenchCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that print their figures (events)",
	}
	cmd.AddCommand(newBenchEventsCmd(g))
	return cmd
}

func newBenchEventsCmd(g *globalFlags) *cobra.Command {
	cfg := bench.DefaultEventsConfig()
	var out string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Kernel-to-Go delivery latency, sustained events/s with zero loss, and decode cost",
		Long: `Loads bench.bpf.c next to the production programs and drives synthetic
records through the whole pipeline: BPF program -> ring buffer -> reader ->
Decode -> bounded queue -> consumer. Latency is the BPF timestamp
(bpf_ktime_get_ns, CLOCK_MONOTONIC) against CLOCK_MONOTONIC when the consumer
receives the event. --out DIR writes events-latency.csv and events-latency.png.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if cfg.LatencySamples <= 0 || cfg.ThroughputEvents <= 0 || cfg.Batch <= 0 || cfg.Window < cfg.Batch {
				return fmt.Errorf("--samples, --events and --batch must be positive and --window >= --batch")
			}
			p, err := loader.Open(loader.Options{
				Logger:    log,
				Families:  []string{loader.FamilyBench},
				RingSizes: map[loader.Ring]int{loader.RingBench: 4 << 20},
				QueueSize: 2 * cfg.Window,
			})
			if err != nil {
				return err
			}
			defer p.Close()
			cfg.Progress = cmd.ErrOrStderr()
			res, err := bench.RunEvents(cmd.Context(), p, cfg)
			if err != nil {
				return err
			}
			bench.WriteEventsTable(cmd.OutOrStdout(), res)
			if out != "" {
				if err := writeEventsFiles(out, res); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", filepath.Join(out, "events-latency.csv"), filepath.Join(out, "events-latency.png"))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&cfg.LatencySamples, "samples", cfg.LatencySamples, "latency samples")
	cmd.Flags().IntVar(&cfg.ThroughputEvents, "events", cfg.ThroughputEvents, "events in the throughput phase")
	cmd.Flags().IntVar(&cfg.Batch, "batch", cfg.Batch, "records per trigger in the throughput phase")
	cmd.Flags().IntVar(&cfg.Window, "window", cfg.Window, "most records in flight in the throughput phase")
	cmd.Flags().StringVar(&out, "out", "", "directory for the CSV and PNG")
	return cmd
}

func writeEventsFiles(dir string, res bench.EventsResult) error {
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
	return bench.LatencyHistogramPNG(filepath.Join(dir, "events-latency.png"), "nodeguard: kernel-to-Go event delivery", res.Samples)
}
