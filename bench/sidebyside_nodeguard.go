package bench

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/nodeguard/nodeguard/bench/agentproc"
)

// NodeguardCompetitor is nodeguard as the side-by-side benchmark runs it:
// `nodeguard run` from bin (empty: this process's executable) on the
// turn's containerd and network, its static pods from the turn's manifest
// directory, maxPods the turn's, metrics on a loopback port (for its probe
// totals), logging warnings and errors only, as the kubelet beside it
// logs at its default verbosity.
func NodeguardCompetitor(bin string) Competitor {
	return Competitor{Name: overheadAgentName, Start: func(ctx context.Context, s Setup) (Contender, error) {
		if bin == "" {
			self, err := os.Executable()
			if err != nil {
				return nil, fmt.Errorf("find this binary: %w", err)
			}
			bin = self
		}
		addr, err := agentproc.FreeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		flags := []string{"--runtime-endpoint", s.Env.Endpoint(), "--cgroup-root", s.Env.CgroupParent() + "/ng",
			"--metrics-addr", addr, "--log-level", "warn"}
		a, err := agentproc.New(bin, s.Dir, "", flags)
		if err != nil {
			return nil, err
		}
		network := agentproc.PrivateNetwork(s.Env)
		network["maxPods"] = s.MaxPods
		progressf(s.Progress, "side by side: nodeguard: starting; waiting for its API at %s", a.Socket())
		if err := a.Start(ctx, map[string]any{"network": network, "podManifestPath": s.ManifestDir}); err != nil {
			return nil, errors.Join(err, a.Close())
		}
		return &nodeguardContender{Agent: a, metricsAddr: addr}, nil
	}}
}

// nodeguardContender is a running nodeguard of one turn.
type nodeguardContender struct {
	*agentproc.Agent
	metricsAddr string
}

func (n *nodeguardContender) ProbeTotals(ctx context.Context) (ProbeTotals, error) {
	return scrapeProbeTotals(ctx, n.metricsAddr)
}
