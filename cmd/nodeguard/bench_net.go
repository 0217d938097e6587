package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/bench"
)

func newBenchNetCmd(g *globalFlags) *cobra.Command {
	cfg := bench.NetConfig{Pods: 50, Parallel: 1}
	cmd := &cobra.Command{
		Use:   "net",
		Short: "Pod network ADD and DEL latency through netplumb (bridge, host-local, portmap, bandwidth)",
		Long: `Creates a node network namespace of its own (never touching the machine's),
attaches --pods pods to nodeguard's CNI chain with netplumb.Direct (a netns
per pod, then ADD of bridge + host-local + portmap + bandwidth, run inside
the node namespace), verifies each pod's veth, address and route through
netlink, and detaches them (DEL, netns removed). Prints p50/p99/max per
operation. --out DIR writes net.csv, net-add.png and net-del.png. Needs
root and the CNI plugins (/opt/cni/bin or /usr/lib/cni).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(); err != nil {
				return err
			}
			if cfg.Pods <= 0 || cfg.Parallel <= 0 {
				return fmt.Errorf("--pods and --parallel must be positive")
			}
			if euid := os.Geteuid(); euid != 0 {
				return fmt.Errorf("bench net creates network namespaces and needs root (euid %d)", euid)
			}
			cfg.Progress = cmd.ErrOrStderr()
			rep, err := bench.RunNet(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			bench.WriteNetTable(cmd.OutOrStdout(), rep)
			for _, f := range rep.Files {
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", f)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&cfg.Pods, "pods", cfg.Pods, "pods to attach and detach")
	cmd.Flags().IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "ADDs (and DELs) in flight at once")
	cmd.Flags().StringVar(&cfg.Out, "out", "", "directory for net.csv and the PNG histograms")
	return cmd
}
