package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/nodeguard/nodeguard/bench/kubeletproc"
)

// kubeletName is the kubelet's rows in the side-by-side figures.
const kubeletName = "kubelet"

// KubeletCompetitor is the real kubelet as the side-by-side benchmark
// runs it (bench/kubeletproc): standalone, its static pods from the
// turn's manifest directory, on the turn's containerd with the cgroupfs
// driver and a cgroup root of its own beneath this process's cgroup,
// maxPods the turn's, its defaults otherwise (10 s housekeeping, PLEG,
// cAdvisor). It runs in this machine's network namespace (its healthz
// and metrics on loopback there), not the private runtime's: its network
// probes could not reach the pods and would leave by the default route,
// so only exec probes are run beside it (HostNetwork).
func KubeletCompetitor(bin string) Competitor {
	return Competitor{Name: kubeletName, HostNetwork: true, Start: func(ctx context.Context, s Setup) (Contender, error) {
		root, err := kubeletproc.NewCgroupRoot(s.Env)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(s.Dir, "kubelet")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, errors.Join(err, root.Remove())
		}
		progressf(s.Progress, "side by side: kubelet: starting %s; waiting for its healthz", bin)
		k, err := kubeletproc.Start(ctx, kubeletproc.Options{Bin: bin, Dir: dir, RuntimeEndpoint: s.Env.Endpoint(),
			StaticPodDir: s.ManifestDir, CgroupRoot: root.Path(), MaxPods: s.MaxPods})
		if err != nil {
			return nil, errors.Join(err, root.Remove())
		}
		return &kubeletContender{Kubelet: k, root: root}, nil
	}}
}

// kubeletContender is a running kubelet of one turn and its cgroup root.
type kubeletContender struct {
	*kubeletproc.Kubelet
	root *kubeletproc.CgroupRoot
}

// ProbeTotals reads the kubelet's prober_probe_total from its
// /metrics/probes.
func (k *kubeletContender) ProbeTotals(ctx context.Context) (ProbeTotals, error) {
	b, err := k.Get(ctx, "/metrics/probes")
	if err != nil {
		return ProbeTotals{}, err
	}
	return ParseProbeTotals(bytes.NewReader(b))
}

// Close stops the kubelet, removes the pods it left, and then its cgroup
// root.
func (k *kubeletContender) Close() error {
	return errors.Join(k.Kubelet.Close(), k.root.Remove())
}

// FindKubelet is the kubelet binary --kubelet auto takes:
// $NODEGUARD_KUBELET_BIN, else the one scripts/controlplane.sh built
// (kubeletproc.FindBinary).
func FindKubelet() (string, error) { return kubeletproc.FindBinary() }
