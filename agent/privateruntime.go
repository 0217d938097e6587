package agent

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/mounts"
)

// PrivateRuntime is nodeguard run --private-runtime's containerd: started
// in a network namespace of its own, with a pod network it renders
// itself (the demo and the tests; layering_test.go names this import of
// the lab).
type PrivateRuntime struct {
	env *crienv.Env
	log *slog.Logger
}

// StartPrivateRuntime starts the private containerd.
func StartPrivateRuntime(ctx context.Context, log *slog.Logger) (*PrivateRuntime, error) {
	env, err := crienv.Start(ctx, crienv.Options{Log: log})
	if err != nil {
		return nil, fmt.Errorf("start the private containerd: %w", err)
	}
	return &PrivateRuntime{env: env, log: log}, nil
}

// Endpoint is the private containerd's CRI socket.
func (p *PrivateRuntime) Endpoint() string { return p.env.Endpoint() }

// Apply points cfg at the private runtime: its socket, its cgroup parent
// and its pod network. The env's containerd reads the conflist the env
// rendered through netplumb; nodeguard checks and collects it there
// (Options.CheckNetwork).
func (p *PrivateRuntime) Apply(cfg *config.Run) {
	env := p.env
	cfg.RuntimeEndpoint = env.Endpoint()
	cfg.CgroupRoot = env.CgroupParent()
	nc := env.NetworkConfig()
	cfg.Network = config.Network{
		Manage: false, Name: nc.Name, Bridge: nc.Bridge, Subnet: nc.Subnet.String(), CNIBinDirs: nc.BinDirs,
		CNIConfDir: nc.ConfDir, IPAMDir: nc.IPAMDir, NodeNetNS: env.NetNS(), NetNSDirs: []string{env.NetNSDir()},
	}
}

// Close stops the private runtime. It takes every pod with it; their
// volumes beneath rootDir (tmpfs mounts among them) go too.
func (p *PrivateRuntime) Close(ctx context.Context, rootDir string) {
	p.env.Close()
	if vols, err := mounts.New(mounts.Config{RootDir: rootDir, Logger: p.log}); err == nil {
		if _, err := vols.GC(context.WithoutCancel(ctx), nil); err != nil {
			p.log.Warn("remove the volumes of the private runtime's pods", "err", err)
		}
	}
}
