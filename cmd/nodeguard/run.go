package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/agent"
	"github.com/nodeguard/nodeguard/config"
)

// DefaultAPISocket is where the local API listens.
const DefaultAPISocket = config.DefaultAPISocket

func newRunCmd(g *globalFlags) *cobra.Command {
	var (
		configFlag     string
		flags          config.Run
		privateRuntime bool
		privateNet     bool
		nodeLabelsFlag map[string]string
		taintsFlag     string
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the node agent: pods from a manifest directory and the local API, pressure sensing and metrics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// SIGHUP reloads (see reloader); caught from the start, so that
			// one sent while the agent starts waits instead of killing it.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			log, err := g.logger()
			if err != nil {
				return err
			}
			// Before any child process starts: it takes systemd's
			// variables out of the environment.
			notify := agent.NewNotifier(log)
			fs := cmd.Flags()
			path, err := config.Path(configFlag, fs.Changed("config"), config.DefaultPath)
			if err != nil {
				return err
			}
			var private *agent.PrivateRuntime
			// load is the configuration in force: the file, then the
			// flags, then the private runtime. At start and every SIGHUP.
			load := func() (config.Run, error) {
				cfg, err := config.Load(path)
				if err != nil {
					return cfg, err
				}
				o := flagOverrides{fs}
				o.set("runtime-endpoint", &cfg.RuntimeEndpoint, flags.RuntimeEndpoint)
				o.set("root-dir", &cfg.RootDir, flags.RootDir)
				o.set("cgroup-driver", &cfg.CgroupDriver, flags.CgroupDriver)
				o.set("cgroup-root", &cfg.CgroupRoot, flags.CgroupRoot)
				o.set("pod-manifest-path", &cfg.PodManifestPath, flags.PodManifestPath)
				o.set("api-socket", &cfg.APISocket, flags.APISocket)
				o.set("metrics-addr", &cfg.MetricsAddr, flags.MetricsAddr)
				o.set("kubeconfig", &cfg.Kubeconfig, flags.Kubeconfig)
				o.set("node-name", &cfg.NodeName, flags.NodeName)
				o.set("node-ip", &cfg.NodeIP, flags.NodeIP)
				if fs.Changed("node-labels") {
					cfg.NodeLabels = nodeLabelsFlag
				}
				if fs.Changed("register-with-taints") {
					t, err := parseTaints(taintsFlag)
					if err != nil {
						return cfg, fmt.Errorf("--register-with-taints: %w", err)
					}
					cfg.RegisterWithTaints = t
				}
				if fs.Changed("enable-profiling") {
					cfg.EnableProfiling = flags.EnableProfiling
				}
				o.logging(g, &cfg.Logging)
				if private != nil {
					private.Apply(&cfg)
				}
				return cfg, nil
			}
			cfg, err := load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if privateRuntime {
				if cfg.RuntimeEndpoint != "" {
					return errors.New("--private-runtime and --runtime-endpoint exclude each other")
				}
				notify.Status("starting the private containerd")
				private, err = agent.StartPrivateRuntime(ctx, log)
				if err != nil {
					return err
				}
				defer func() { private.Close(ctx, cfg.RootDir) }()
				if cfg, err = load(); err != nil {
					return err
				}
				privateNet = true
				fmt.Fprintf(cmd.ErrOrStderr(), "private containerd: %s (crictl --runtime-endpoint %s ps)\n", private.Endpoint(), private.Endpoint())
			}
			if err := validateConfig(path, cfg); err != nil {
				return err
			}
			configLoaded(g, log, cfg.Logging, path)
			return agent.Run(ctx, cfg, log, agent.Options{
				Notifier: notify, HUP: hup, Logs: g.logs, ConfigPath: path, Version: version, CheckNetwork: privateNet,
				Reload: func() (config.Run, error) {
					cfg, err := load()
					if err == nil {
						err = cfg.Validate()
					}
					return cfg, err
				},
			})
		},
	}
	cmd.Flags().StringVar(&configFlag, "config", config.DefaultPath, "configuration file (YAML; the default is read only if it exists); flags override it")
	cmd.Flags().StringVar(&flags.RuntimeEndpoint, "runtime-endpoint", "", "the CRI socket, e.g. unix:///run/containerd/containerd.sock")
	cmd.Flags().StringVar(&flags.RootDir, "root-dir", "/var/lib/nodeguard", "state directory (pod logs, API pods, volumes)")
	cmd.Flags().StringVar(&flags.CgroupDriver, "cgroup-driver", "", "cgroup driver: cgroupfs or systemd (default: the runtime's as CRI RuntimeConfig reports it, else cgroupfs)")
	cmd.Flags().StringVar(&flags.CgroupRoot, "cgroup-root", "/", "cgroup root for kubepods: / on a node (relative: beneath nodeguard's own cgroup, for a runtime that shares it)")
	cmd.Flags().StringVar(&flags.PodManifestPath, "pod-manifest-path", "", "directory of static pod manifests, watched")
	cmd.Flags().StringVar(&flags.APISocket, "api-socket", DefaultAPISocket, "local API socket (root only)")
	cmd.Flags().StringVar(&flags.MetricsAddr, "metrics-addr", DefaultMetricsAddr, "address to serve /metrics on (empty: off)")
	cmd.Flags().BoolVar(&flags.EnableProfiling, "enable-profiling", false, "serve Go's /debug/pprof/ on the metrics address")
	cmd.Flags().StringVar(&flags.Kubeconfig, "kubeconfig", "", "join the cluster of this kubeconfig as its node agent (node mode); empty: standalone")
	cmd.Flags().StringVar(&flags.NodeName, "node-name", "", "the node's name (default: the lower-cased hostname)")
	cmd.Flags().StringVar(&flags.NodeIP, "node-ip", "", "the node's IP address, or an IPv4 and an IPv6 one separated by a comma (default: found)")
	cmd.Flags().StringToStringVar(&nodeLabelsFlag, "node-labels", nil, "labels the node registers with, key=value,... (over nodeLabels)")
	cmd.Flags().StringVar(&taintsFlag, "register-with-taints", "", "taints the node registers with, key[=value]:effect,...")
	cmd.Flags().BoolVar(&privateRuntime, "private-runtime", false, "start a private containerd in its own network namespace (demo, tests)")
	return cmd
}

// parseTaints reads --register-with-taints: key[=value]:Effect, comma
// separated.
func parseTaints(s string) ([]corev1.Taint, error) {
	var out []corev1.Taint
	for _, spec := range strings.Split(s, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok {
			return nil, fmt.Errorf("taint %q: want key[=value]:effect", spec)
		}
		k, v, _ := strings.Cut(kv, "=")
		t := corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)}
		if err := config.ValidateTaint(t); err != nil {
			return nil, fmt.Errorf("taint %q: %w", spec, err)
		}
		out = append(out, t)
	}
	return out, nil
}
