package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/agent"
	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/pressure"
)

// DefaultMetricsAddr is the configuration's (loopback only).
const DefaultMetricsAddr = config.DefaultMetricsAddr

// newMetricsCmd is `nodeguard metrics`: sensing and the exporter alone.
func newMetricsCmd(g *globalFlags) *cobra.Command {
	o := agent.SenseOptions{Version: version}
	cmd := &cobra.Command{
		Use:   "metrics",
		Short: "Sense only: serve node and cgroup pressure, kernel events and nodeguard's own health to Prometheus",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			return agent.Sense(cmd.Context(), o, log)
		},
	}
	senseFlags(cmd, &o)
	return cmd
}

// senseFlags are the flags of sensing alone (nodeguard metrics, top).
func senseFlags(cmd *cobra.Command, o *agent.SenseOptions) {
	f := cmd.Flags()
	f.StringVar(&o.MetricsAddr, "metrics-addr", DefaultMetricsAddr, "address to serve /metrics on")
	f.StringArrayVar(&o.Roots, "cgroup-root", nil, "cgroup subtree to monitor (repeatable; relative paths resolve against nodeguard's own cgroup)")
	f.StringVar(&o.PodsRoot, "pods-root", "", "pod cgroup root for allocatableMemory.available (default: the first --cgroup-root)")
	f.StringVar(&o.RootDir, "root-dir", "/var/lib/nodeguard", "nodeguard's state directory: its filesystem is nodefs")
	f.StringVar(&o.ImageFS, "image-fs", "/var/lib/containerd", "a path on the runtime's image filesystem (imagefs); skipped when missing")
	f.DurationVar(&o.Tick, "tick", time.Second, "snapshot interval (the safety tick; PSI triggers and OOM events wake it earlier)")
	f.DurationVar(&o.FullEvery, "full-stats-every", pressure.DefaultFullEvery, "how long the full cgroup statistics (cpu, io, pids) a scrape reads are reused by the next ones")
	f.BoolVar(&o.NoBPF, "no-bpf", false, "sense without the eBPF pipeline (PSI and cgroup statistics only)")
	f.BoolVar(&o.Profiling, "enable-profiling", false, "serve Go's /debug/pprof/ on the metrics address")
}
