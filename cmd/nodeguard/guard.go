package main

// nodeguard guard: nodeguard beside a kubelet. The kubelet runs the pods;
// nodeguard senses and decides exactly as nodeguard run does (the same
// eBPF pipeline, snapshots, tripwire, PSI rules, thresholds and ranking)
// and acts on the kubelet's pods through their cgroups and the API
// server (package guard).

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/agent"
	"github.com/nodeguard/nodeguard/config"
)

func newGuardCmd(g *globalFlags) *cobra.Command {
	var (
		configFlag string
		flags      config.Guard
		output     string
	)
	load := func(cmd *cobra.Command) (config.Guard, string, error) {
		fs := cmd.Flags()
		p, err := config.Path(configFlag, fs.Changed("config"), config.DefaultGuardPath)
		if err != nil {
			return config.Guard{}, "", err
		}
		cfg, err := config.LoadGuard(p)
		if err != nil {
			return cfg, p, err
		}
		o := flagOverrides{fs}
		o.set("runtime-endpoint", &cfg.RuntimeEndpoint, flags.RuntimeEndpoint)
		o.set("cgroup-driver", &cfg.CgroupDriver, flags.CgroupDriver)
		o.set("cgroup-root", &cfg.CgroupRoot, flags.CgroupRoot)
		o.set("kubeconfig", &cfg.Kubeconfig, flags.Kubeconfig)
		o.set("node-name", &cfg.NodeName, flags.NodeName)
		o.set("root-dir", &cfg.RootDir, flags.RootDir)
		o.set("metrics-addr", &cfg.MetricsAddr, flags.MetricsAddr)
		o.logging(g, &cfg.Logging)
		return cfg, p, validateConfig(p, cfg)
	}
	cmd := &cobra.Command{
		Use:   "guard",
		Short: "Guard the node beside a kubelet: sense and evict the kubelet's pods as nodeguard run does, running none",
		Long: `nodeguard guard runs beside the kubelet and the node's containerd. It finds the
kubelet's pods in the runtime (its sandboxes) and its cgroups (kubepods), learns
their QoS, priority and requests (from the API server, else from the node), and
senses and decides exactly as nodeguard run: hard thresholds kill the victim's
pod cgroup at once and then remove the pod through the API server; soft ones ask
the Eviction API, which PodDisruptionBudgets may refuse.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// SIGHUP would end the process: it is logged instead.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			log, err := g.logger()
			if err != nil {
				return err
			}
			notify := agent.NewNotifier(log)
			cfg, p, err := load(cmd)
			if err != nil {
				return err
			}
			configLoaded(g, log, cfg.Logging, p)
			return agent.RunGuard(cmd.Context(), cfg, log, agent.Options{Notifier: notify, HUP: hup, Logs: g.logs, ConfigPath: p, Version: version})
		},
	}
	pods := &cobra.Command{
		Use:   "pods",
		Short: "List the kubelet's pods as guard mode finds them (QoS, priority, memory request, cgroup) and exit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg, _, err := load(cmd)
			if err != nil {
				return err
			}
			if output != "table" && output != "json" {
				return fmt.Errorf("--output %q: want table or json", output)
			}
			return agent.GuardPods(cmd.Context(), cfg, version, log, cmd.OutOrStdout(), output == "json")
		},
	}
	for _, c := range []*cobra.Command{cmd, pods} {
		f := c.Flags()
		f.StringVar(&configFlag, "config", config.DefaultGuardPath, "configuration file (YAML; the default is read only if it exists); flags override it")
		f.StringVar(&flags.RuntimeEndpoint, "runtime-endpoint", "", "the kubelet's CRI socket (default unix:///run/containerd/containerd.sock)")
		f.StringVar(&flags.CgroupDriver, "cgroup-driver", "", "the kubelet's cgroup driver: systemd or cgroupfs (default: found from kubepods.slice or kubepods)")
		f.StringVar(&flags.CgroupRoot, "cgroup-root", "/", "the kubelet's cgroupRoot")
		f.StringVar(&flags.Kubeconfig, "kubeconfig", "", "the API server's kubeconfig (default: the service account in a pod; none otherwise)")
		f.StringVar(&flags.NodeName, "node-name", "", "the node's name (default: the lower-cased hostname)")
		f.StringVar(&flags.RootDir, "root-dir", "/var/lib/nodeguard-guard", "state directory (the state store beneath it, state/)")
		f.StringVar(&flags.MetricsAddr, "metrics-addr", DefaultMetricsAddr, "address to serve /metrics on (empty: off)")
	}
	pods.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	cmd.AddCommand(pods)
	return cmd
}
