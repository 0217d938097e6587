package main

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/agent"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

func newTopCmd(g *globalFlags) *cobra.Command {
	o := agent.SenseOptions{Version: version}
	var (
		once     bool
		interval time.Duration
		rows     int
		sortBy   string
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "A live view of node pressure and the cgroups under the most memory pressure",
		Long: `Shows node PSI and the kubelet's signals, then the monitored cgroups ranked by
memory pressure (full avg10), with working set, reclaim stall (from the eBPF
aggregates, per second of the last interval) and OOM kills. --once prints
one frame (two snapshots --interval apart, for the rates) and exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			switch sortBy {
			case "pressure", "workingset", "reclaim":
			default:
				return fmt.Errorf("--sort %q: want pressure, workingset or reclaim", sortBy)
			}
			s, err := agent.OpenSensor(cmd.Context(), o, log)
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			ctx := cmd.Context()
			prev := s.Snapshot(ctx, time.Now())
			prevReclaim := reclaimByKey(s.Pipeline())
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(interval):
				}
				cur := s.Snapshot(ctx, time.Now())
				curReclaim := reclaimByKey(s.Pipeline())
				var b strings.Builder
				if !once {
					b.WriteString("\x1b[H\x1b[2J")
				}
				renderTop(&b, prev, cur, prevReclaim, curReclaim, rows, sortBy)
				io.WriteString(out, b.String())
				if once {
					return nil
				}
				prev, prevReclaim = cur, curReclaim
			}
		},
	}
	senseFlags(cmd, &o)
	cmd.Flags().Lookup("metrics-addr").Hidden = true
	cmd.Flags().BoolVar(&once, "once", false, "print one frame and exit (for scripts)")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "refresh interval (and the rate window)")
	cmd.Flags().IntVarP(&rows, "rows", "n", 15, "cgroups shown")
	cmd.Flags().StringVar(&sortBy, "sort", "pressure", "rank by pressure, workingset or reclaim")
	return cmd
}

// reclaimByKey sums the eBPF reclaim aggregates per cgroup (memcg and
// direct reclaim) and per node (kswapd, key id = node).
func reclaimByKey(p *loader.Pipeline) map[pressure.CgroupKey]time.Duration {
	out := map[pressure.CgroupKey]time.Duration{}
	if p == nil {
		return out
	}
	st, err := p.ReclaimStats()
	if err != nil {
		return out
	}
	for _, s := range st {
		if s.Type == 3 {
			continue
		}
		out[pressure.CgroupKey{ID: s.Cgroup.ID, HierarchyID: s.Cgroup.HierarchyID}] += s.Total
	}
	return out
}

func pct(d time.Duration, over time.Duration) float64 {
	if over <= 0 {
		return 0
	}
	return 100 * d.Seconds() / over.Seconds()
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func renderTop(w io.Writer, prev, cur *pressure.Snapshot, prevR, curR map[pressure.CgroupKey]time.Duration, rows int, sortBy string) {
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	dt := cur.Time.Sub(prev.Time)
	fmt.Fprintf(bw, "nodeguard top  %s  snapshot %.2f ms, %d cgroups\n\n", cur.Time.Format("15:04:05"), float64(cur.Took)/1e6, len(cur.Cgroups))
	fmt.Fprintf(bw, "%-8s %10s %10s %10s %10s\n", "PSI", "some10", "full10", "some/s", "full/s")
	for _, r := range []psi.Resource{psi.CPU, psi.Memory, psi.IO} {
		st, ok := cur.Node.PSI[r]
		if !ok {
			continue
		}
		ps := prev.Node.PSI[r]
		fmt.Fprintf(bw, "%-8s %9.2f%% %9.2f%% %9.2f%% %9.2f%%\n", r, st.Some.Avg10, st.Full.Avg10,
			pct(st.Some.Total-ps.Some.Total, dt), pct(st.Full.Total-ps.Full.Total, dt))
	}
	fmt.Fprintln(bw)
	for _, o := range cur.Signals {
		unit := func(v int64) string { return fmt.Sprint(v) }
		if strings.Contains(string(o.Signal), "emory") || strings.HasSuffix(string(o.Signal), "fs.available") {
			unit = func(v int64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }
		}
		fmt.Fprintf(bw, "%-28s %14s of %s\n", o.Signal, unit(o.Available), unit(o.Capacity))
	}
	if len(cur.Signals) == 0 {
		fmt.Fprintln(bw, "(no eviction signals: inputs unreadable)")
	}
	_ = nodestats.SignalMemoryAvailable

	type row struct {
		c       *pressure.Cgroup
		full10  float64
		reclaim float64
	}
	var rs []row
	for i := range cur.Cgroups {
		c := &cur.Cgroups[i]
		if c.Err != nil {
			continue
		}
		rs = append(rs, row{c: c, full10: c.Memory.PSI.Full.Avg10, reclaim: pct(curR[c.Key]-prevR[c.Key], dt)})
	}
	slices.SortStableFunc(rs, func(a, b row) int {
		var x, y float64
		switch sortBy {
		case "workingset":
			x, y = float64(a.c.Memory.WorkingSet()), float64(b.c.Memory.WorkingSet())
		case "reclaim":
			x, y = a.reclaim, b.reclaim
		default:
			x, y = a.full10, b.full10
		}
		switch {
		case x > y:
			return -1
		case x < y:
			return 1
		}
		return strings.Compare(a.c.Rel, b.c.Rel)
	})
	fmt.Fprintf(bw, "\n%-9s %-9s %12s %12s %9s %6s  %s\n", "MEM full", "MEM some", "WORKING SET", "LIMIT", "RECLAIM", "OOMS", "CGROUP")
	for i, r := range rs {
		if i >= rows {
			break
		}
		m := &r.c.Memory
		limit := "-"
		if m.Limit != ^uint64(0) {
			limit = mib(m.Limit)
		}
		fmt.Fprintf(bw, "%8.2f%% %8.2f%% %12s %12s %8.2f%% %6d  %s\n", r.full10, m.PSI.Some.Avg10, mib(m.WorkingSet()), limit, r.reclaim, m.Events.OOMKill, r.c.Rel)
	}
	if len(rs) == 0 {
		fmt.Fprintln(bw, "(no cgroups monitored: pass --cgroup-root)")
	}
}
