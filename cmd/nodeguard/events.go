package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/loader/event"
)

type eventsFlags struct {
	json       bool
	cgroup     string
	duration   time.Duration
	minReclaim time.Duration
	stats      bool
	// agent: read the running agent's decisions through its API instead
	// of the kernel's events.
	agent     bool
	apiSocket string
}

func newEventsCmd(g *globalFlags) *cobra.Command {
	f := &eventsFlags{}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Stream decoded kernel events (OOM kills, reclaim stalls, cgroups, exits, oom_score_adj)",
		Long: `Stream the kernel events nodeguard's BPF programs see.

Without --cgroup every cgroup on the machine is reported. With --cgroup PATH
only PATH and the cgroups beneath it: a relative PATH resolves against
nodeguard's own cgroup in each hierarchy, an absolute PATH is a path within
each hierarchy (e.g. /kubepods). Filtering happens in the kernel, and cgroups
made beneath PATH later are followed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if f.agent {
				return runAgentEvents(cmd.Context(), f, cmd.OutOrStdout())
			}
			return runEvents(cmd.Context(), f, log, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "one JSON object per line")
	cmd.Flags().StringVar(&f.cgroup, "cgroup", "", "monitor only this cgroup subtree")
	cmd.Flags().DurationVar(&f.duration, "duration", 0, "stop after this long (0: until interrupted)")
	cmd.Flags().DurationVar(&f.minReclaim, "min-reclaim", loader.DefaultMinReclaimEpisode, "report reclaim episodes at least this long (shorter ones are only aggregated)")
	cmd.Flags().BoolVar(&f.stats, "stats", true, "print ring-buffer accounting to stderr at the end")
	cmd.Flags().BoolVar(&f.agent, "agent", false, "stream the running agent's decisions and pod events (evictions, attributed OOM kills, node conditions, failed probes and the kills they cause) from its API instead")
	cmd.Flags().StringVar(&f.apiSocket, "api-socket", DefaultAPISocket, "the agent's API socket (with --agent)")
	return cmd
}

// runAgentEvents follows the agent's event log by long polls.
func runAgentEvents(ctx context.Context, f *eventsFlags, stdout io.Writer) error {
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	c := api.NewClient(f.apiSocket)
	defer c.Close()
	var since uint64
	for ctx.Err() == nil {
		evs, err := c.Events(ctx, since, 15*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, e := range evs {
			since = e.Seq
			if f.json {
				b, _ := json.Marshal(e)
				fmt.Fprintf(stdout, "%s\n", b)
				continue
			}
			fmt.Fprintf(stdout, "%s %-14s %s\n", e.Time.Format("15:04:05.000000"), e.Kind, e.Object)
		}
	}
	return nil
}

func runEvents(ctx context.Context, f *eventsFlags, log loggerT, stdout, stderr io.Writer) error {
	layout, err := cgroups.Discover()
	if err != nil {
		return fmt.Errorf("discover cgroups: %w", err)
	}
	var dirs []cgroups.Dir
	if f.cgroup != "" {
		dirs, err = layout.ResolveMonitored(f.cgroup)
		if err != nil {
			return fmt.Errorf("--cgroup %q: %w", f.cgroup, err)
		}
		for _, d := range dirs {
			if _, err := os.Stat(d.Path); err != nil {
				return fmt.Errorf("--cgroup %q: %w", f.cgroup, err)
			}
		}
	}

	p, err := loader.Open(loader.Options{Logger: log, MonitorAll: f.cgroup == "", MinReclaimEpisode: f.minReclaim})
	if err != nil {
		return err
	}
	defer p.Close()

	mounts := map[uint32]string{}
	for _, h := range layout.Hierarchies {
		mounts[h.ID] = h.Mount
	}
	names := cgroups.NewPathResolver(mounts)
	for _, d := range dirs {
		if _, err := p.MonitorTree(d.Hierarchy.ID, d.Path, d.Rel); err != nil {
			return err
		}
		_ = filepath.WalkDir(d.Path, func(path string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				if id, err := cgroups.ID(path); err == nil {
					names.Learn(d.Hierarchy.ID, id, path)
				}
			}
			return nil
		})
	}
	for _, h := range p.Hooks() {
		if h.Path == loader.PathOff {
			fmt.Fprintf(stderr, "warning: hook %s not attached: %s\n", h.Name, h.Failures)
		}
	}

	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	memHier := uint32(0)
	if layout.Memory != nil {
		memHier = layout.Memory.ID
	}
	boot := bootWallClock()

	for {
		select {
		case <-ctx.Done():
			w.Flush()
			if f.stats {
				printRingStats(p, stderr)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return ctx.Err()
		case ev, ok := <-p.Events():
			if !ok {
				return nil
			}
			path := eventPath(ev, names, layout, memHier)
			wall := boot.Add(time.Duration(ev.Hdr().TimestampNS))
			if f.json {
				if err := enc.Encode(event.ToRecord(ev, wall, path)); err != nil {
					return fmt.Errorf("write event: %w", err)
				}
			} else {
				fmt.Fprintf(w, "%s %s\n", wall.Format("15:04:05.000000"), event.Human(ev, path))
			}
			if err := w.Flush(); err != nil {
				return fmt.Errorf("write event: %w", err)
			}
		}
	}
}

// eventPath names the cgroup an event is about: for cgroup events the
// directory itself, otherwise the task's memory cgroup (or its cgroup2
// cgroup when it has none).
func eventPath(ev event.Event, names *cgroups.PathResolver, layout *cgroups.Layout, memHier uint32) string {
	if c, ok := ev.(*event.Cgroup); ok {
		h, ok := layout.ByID(c.HierarchyID)
		if !ok {
			return c.Path
		}
		p := filepath.Join(h.Mount, c.Path)
		if c.Kind == event.KindCgroupMkdir {
			names.Learn(c.HierarchyID, c.ID, p)
		} else {
			names.Forget(c.HierarchyID, c.ID)
		}
		return p
	}
	h := ev.Hdr()
	if h.MemcgID != 0 {
		if p, err := names.Path(memHier, h.MemcgID); err == nil {
			return p
		}
	}
	if h.CgroupID != 0 {
		if p, err := names.Path(0, h.CgroupID); err == nil {
			return p
		}
	}
	return ""
}

func printRingStats(p *loader.Pipeline, w io.Writer) {
	st, err := p.Stats()
	if err != nil {
		fmt.Fprintln(w, "ring stats:", err)
		return
	}
	for _, s := range st {
		fmt.Fprintf(w, "ring %-9s submitted=%d read=%d delivered=%d reserve_failed=%d queue_dropped=%d malformed=%d\n",
			s.Ring, s.Submitted, s.Read, s.Delivered, s.ReserveFailed, s.QueueDropped, s.Malformed)
	}
}
