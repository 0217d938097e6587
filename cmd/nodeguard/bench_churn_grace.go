package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// benchChurnGrace is `bench churn --grace`: the start latency of pods
// started while deletions wait out their grace period, next to that of
// pods started beside as many running pods (the floor: the same number
// of pods on the node, none deleting) and on an empty node, on one
// manager in one run.
func benchChurnGrace(cmd *cobra.Command, cfg bench.ChurnConfig, client *cri.Client, host *benchHost, log *slog.Logger, out string) error {
	ctx := cmd.Context()
	mgr, err := lifecycle.New(lifecycle.Config{Runtime: client, Cgroups: host.cg, RootDir: host.root, MemoryCapacity: int64(host.mi.MemTotal),
		CgroupV2: host.layout.Memory.V2(), Workers: cfg.Parallel, MinOOMScoreAdj: ownOOMScoreAdj(), Logger: log})
	if err != nil {
		return err
	}
	mgr.SourcesReady()
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { mgr.Run(mctx); close(done) }()
	rows, err := bench.RunChurnGrace(ctx, mgr, cfg)
	stop()
	<-done
	if err != nil {
		return fmt.Errorf("nodeguard: %w", err)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "\n%d pods, %d in parallel, grace %v (waited out in full), runtime %s\n", cfg.Pods, cfg.Parallel, cfg.Grace, client.Runtime().Version)
	bench.WriteChurnGraceTable(w, rows)
	quiet, floor, during := rows[0], rows[1], rows[2]
	fmt.Fprintf(w, "startup p99 while %d deletions are in grace / beside %d running pods (the floor) = %.2f (target <= 1.20); / on an empty node = %.2f\n",
		cfg.Pods, cfg.Pods, float64(during.Startup.P99)/float64(floor.Startup.P99), float64(during.Startup.P99)/float64(quiet.Startup.P99))
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(out, "churn-grace.csv")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	_ = cw.Write([]string{"starts", "pods", "parallel", "grace_s", "n", "start_p50_ms", "start_p99_ms", "start_max_ms", "delete_p50_ms", "delete_p99_ms", "min_in_grace"})
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/1e6) }
	for _, r := range rows {
		_ = cw.Write([]string{r.Name, strconv.Itoa(cfg.Pods), strconv.Itoa(cfg.Parallel), strconv.Itoa(int(cfg.Grace.Seconds())), strconv.Itoa(r.Startup.N),
			ms(r.Startup.P50), ms(r.Startup.P99), ms(r.Startup.Max), ms(r.Deletion.P50), ms(r.Deletion.P99), strconv.Itoa(r.InFlight)})
	}
	cw.Flush()
	if err := errors.Join(cw.Error(), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fmt.Fprintf(w, "wrote %s\n", path)
	return nil
}
