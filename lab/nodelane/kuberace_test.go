//go:build nodelane

package nodelane

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/lab/nodevm"
)

// The three-way OOM race on the real kubelet's node: its budget and
// threshold, the same for the kubelet, nodeguard guard and nodeguard in
// node mode. Node allocatable (kubepods.slice's memory.max, set by whoever
// owns the node from systemReserved = MemTotal - budget) is the budget; the
// threshold is the kubelet's own default evictionHard memory.available
// 100Mi, which with enforceNodeAllocatable=[pods] is also its
// allocatableMemory.available threshold: the three evict when the pods'
// working set passes budget - 100Mi.
const (
	kubeRaceBudget    = nodevm.RaceBudget
	kubeRaceThreshold = "100Mi"
	// kubeletRestartBound: the kubelet restarted with the race's
	// node allocatable, its Node Ready again.
	kubeletRestartBound = 3 * time.Minute
)

// kubeRaceSets are the three-way race's scenarios by race mode
// (nodevm.EnvRace). Measured under TCG, a trial costs about 70 s on a
// quiet host and 2-2.5 min with another guest beside it: the hog
// Deployment's pod started by the node's owner, its ramp, the
// controller's replacement started, the Deployment and its pods removed,
// the settle; kubelet+guard also starts the guard (5-8 s), and node
// mode's takeover costs about 15 s. Quick (1 GiB/s, one trial per
// strategy) took 5 min 44 s, full (docs/benchmarks.md's figures: 3 rates, 2
// trials per strategy) 20 min 39 s; each Bound is about twice that with
// another guest beside it.
var kubeRaceSets = map[string]nodevm.RaceSet{
	nodevm.RaceQuick: {Rates: "1Gi/s", Trials: 1, Bound: 12 * time.Minute},
	nodevm.RaceFull:  {Rates: "50Mi/s,200Mi/s,1Gi/s", Trials: 2, Bound: 70 * time.Minute},
}

// kubeRace: `nodeguard bench eviction --kubeconfig` on the lane's node
// with the real kubelet (withKubelet), its configuration given the race's
// node allocatable and threshold: the kubelet alone, the kubelet with
// nodeguard guard started beside it for its trials, then nodeguard in
// node mode (the kubelet stopped, the Node registered afresh by
// nodeguard), the same pods and hogs. It fails when the race errs, a
// strategy has fewer trials than asked, or a trial of nodeguard (guard or
// node mode) was lost to the kernel OOM killer or evicted another pod than
// the hog; the kubelet's losses are what it measures. Latencies are
// printed, not judged (TCG).
func (n *node) kubeRace(t *testing.T) {
	mode, err := nodevm.ParseRace(os.Getenv(nodevm.EnvRace))
	if err != nil {
		t.Fatal(err)
	}
	set, ok := kubeRaceSets[mode]
	if !ok {
		t.Skipf("%s=%s", nodevm.EnvRace, mode)
	}
	outRoot := os.Getenv(nodevm.EnvOutDir)
	if outRoot == "" {
		t.Fatalf("%s is not set: the lane script mounts the output disk and exports where", nodevm.EnvOutDir)
	}
	out := filepath.Join(outRoot, "kube-race-"+mode)
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	n.withKubelet(t, func(k *kubeletNode) {
		budget := resource.MustParse(kubeRaceBudget)
		threshold := resource.MustParse(kubeRaceThreshold)
		total, err := meminfo("MemTotal")
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		reserved := total - budget.Value()
		if err := raceKubeletConfig(k.Config, reserved, kubeRaceThreshold); err != nil {
			t.Fatal(err)
		}
		if out, err := systemctl(kubeletStopBound, "restart", k.Unit); err != nil {
			t.Fatalf("systemctl restart %s: %v %s", k.Unit, err, out)
		}
		var nd corev1.Node
		want := budget.Value() - threshold.Value()
		if _, err := waitFor("node "+k.Name+" Ready with allocatable memory budget - threshold", kubeletRestartBound, func() (bool, string, error) {
			if err := kubeJSON(&nd, "get", "node", k.Name); err != nil {
				return false, err.Error(), nil
			}
			ready := false
			for _, c := range nd.Status.Conditions {
				ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
			}
			got := nd.Status.Allocatable.Memory().Value()
			return ready && got == want, fmt.Sprintf("ready %v, allocatable memory %d, want %d", ready, got, want), nil
		}); err != nil {
			t.Fatalf("%v; journal:\n%s", err, journalText(kubeletUnit, 30))
		}
		limit, err := cgroupFile("/kubepods.slice", "memory.max")
		if err != nil || limit != strconv.FormatInt(budget.Value(), 10) {
			t.Fatalf("kubepods.slice memory.max %q (%v), want the budget %d", limit, err, budget.Value())
		}
		t.Logf("the kubelet restarted with systemReserved memory %d (MemTotal %d - budget %s) and evictionHard memory.available %s: Ready in %.1f s, allocatable memory %s, kubepods.slice memory.max %s",
			reserved, total, kubeRaceBudget, kubeRaceThreshold, time.Since(t0).Seconds(), nd.Status.Allocatable.Memory(), limit)

		// nodeguard in node mode on this node, as the node-mode check
		// runs it; the race writes its runtime, cgroups, allocatable
		// and threshold over it.
		dir := nodevm.ClusterDir
		v := n.values
		v.Set = append(append([]Setting(nil), v.Set...),
			Setting{Path: []string{"kubeconfig"}, Value: filepath.Join(dir, nodevm.ClusterNodeKubeconfig)},
			Setting{Path: []string{"nodeName"}, Value: k.Name},
			Setting{Path: []string{"nodeIP"}, Value: "127.0.0.1"},
			Setting{Path: []string{"port"}, Value: k.Values.Port},
			Setting{Path: []string{"tlsCertFile"}, Value: filepath.Join(dir, nodevm.ClusterServingCert)},
			Setting{Path: []string{"tlsPrivateKeyFile"}, Value: filepath.Join(dir, nodevm.ClusterServingKey)},
			Setting{Path: []string{"authentication", "x509", "clientCAFile"}, Value: filepath.Join(dir, nodevm.ClusterCA)},
		)
		nodeConf, err := NodeConfig(n.installed, v)
		if err != nil {
			t.Fatal(err)
		}
		confPath := filepath.Join(out, "node-mode.yaml")
		if err := os.WriteFile(confPath, nodeConf, 0o600); err != nil {
			t.Fatal(err)
		}

		args := []string{"bench", "eviction", "--kubeconfig", k.Kubeconfig, "--node-name", k.Name,
			"--kubelet-unit", k.Unit, "--node-config", confPath,
			"--runtime-endpoint", RuntimeEndpoint, "--cgroup-driver", CgroupDriver, "--cgroup-root", CgroupRoot,
			"--budget", kubeRaceBudget, "--threshold", kubeRaceThreshold, "--rates", set.Rates, "--trials", strconv.Itoa(set.Trials),
			"--out", out, "--log-level", "warn"}
		t.Logf("race %s: nodeguard %s (bounded by %s); MemAvailable %s, guest load average %s", mode, strings.Join(args, " "), set.Bound,
			memAvailable(), guestLoad())
		report, took, runErr := runRace(t, args, set.Bound, out)
		for _, l := range strings.Split(strings.TrimSpace(reportTable(report)), "\n") {
			t.Log(l)
		}
		t.Logf("race %s took %s; guest load average %s", mode, took.Round(time.Second), guestLoad())
		if runErr != nil {
			t.Errorf("the race failed: %v", runErr)
		}
		b, err := os.ReadFile(filepath.Join(out, "eviction.csv"))
		if err != nil {
			t.Fatalf("the race's CSV: %v", err)
		}
		trials, err := ParseRaceCSV(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range SummarizeRace(trials) {
			t.Log(s.String())
		}
		// The kubelet's losses are what the race measures; nodeguard's,
		// beside it or instead of it, are faults, as in the node lane's
		// race: a trial lost to the kernel OOM killer, a collateral
		// eviction, a failed trial.
		per := len(strings.Split(set.Rates, ",")) * set.Trials
		n := 0
		for _, tr := range trials {
			if tr.Strategy == "kubelet" {
				n++
				if tr.Err != "" {
					t.Errorf("kubelet trial %d at %d MiB/s failed: %s", tr.Trial, tr.Rate>>20, tr.Err)
				}
			}
		}
		if n != per {
			t.Errorf("%d trials of kubelet, want %d", n, per)
		}
		for _, s := range []string{"kubelet+guard", "nodeguard-node"} {
			for _, f := range RaceFaults(trials, s, per) {
				t.Error(f)
			}
		}
		if st, err := os.Stat(filepath.Join(out, "eviction.png")); err != nil || st.Size() == 0 {
			t.Errorf("the race's plot: %v", err)
		}
	})
}

// raceKubeletConfig writes the race's node allocatable and threshold into
// the kubelet's configuration file: systemReserved memory (bytes) and
// evictionHard memory.available, the other keys as they were.
func raceKubeletConfig(path string, reserved int64, threshold string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var c map[string]any
	if err := yaml.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	c["systemReserved"] = map[string]string{"memory": strconv.FormatInt(reserved, 10)}
	hard, _ := c["evictionHard"].(map[string]any)
	if hard == nil {
		hard = map[string]any{}
	}
	hard["memory.available"] = threshold
	c["evictionHard"] = hard
	out, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

func memAvailable() string {
	v, err := meminfo("MemAvailable")
	if err != nil {
		return "unknown"
	}
	return strconv.FormatInt(v>>20, 10) + " MiB"
}
