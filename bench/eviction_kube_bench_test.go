package bench

import (
	"strings"
	"testing"
)

func TestNodeModeRaceConfig(t *testing.T) {
	race := RaceAgentConfig(8<<30, 1<<30, 100<<20, false)
	t.Run("the race's runtime, cgroups, reservation and eviction keys are written over the node's, its other keys stay", func(t *testing.T) {
		base := []byte(`kubeconfig: /etc/nodeguard/kubelet.conf
nodeName: n1
runtimeEndpoint: unix:///old.sock
eviction:
  evictionSoft: {memory.available: 500Mi}
  evictionHard: {memory.available: 1Mi}
`)
		conf, err := nodeModeRaceConfig(base, race, "unix:///run/containerd/containerd.sock", "systemd", "/")
		if err != nil {
			t.Fatal(err)
		}
		if conf["nodeName"] != "n1" || conf["kubeconfig"] != "/etc/nodeguard/kubelet.conf" {
			t.Errorf("node keys lost: %v", conf)
		}
		if conf["runtimeEndpoint"] != "unix:///run/containerd/containerd.sock" || conf["cgroupDriver"] != "systemd" || conf["cgroupRoot"] != "/" {
			t.Errorf("runtime and cgroups %v %v %v, want the race's", conf["runtimeEndpoint"], conf["cgroupDriver"], conf["cgroupRoot"])
		}
		ev := conf["eviction"].(map[string]any)
		if _, ok := ev["evictionSoft"]; !ok {
			t.Errorf("the node's evictionSoft dropped: %v", ev)
		}
		hard := ev["evictionHard"].(map[string]string)
		if hard["memory.available"] != "104857600" || ev["disabled"] != false {
			t.Errorf("eviction %v, want the race's hard threshold, enabled", ev)
		}
		if r := conf["systemReserved"].(map[string]string); r["memory"] != "7516192768" {
			t.Errorf("systemReserved %v, want MemTotal - budget", r)
		}
	})
	t.Run("a configuration without a kubeconfig is not node mode", func(t *testing.T) {
		if _, err := nodeModeRaceConfig([]byte("nodeName: n1\n"), race, "e", "cgroupfs", "/"); err == nil || !strings.Contains(err.Error(), "not a node-mode configuration") {
			t.Errorf("err %v, want it refused", err)
		}
	})
	t.Run("malformed YAML is an error", func(t *testing.T) {
		if _, err := nodeModeRaceConfig([]byte("kubeconfig: [\n"), race, "e", "cgroupfs", "/"); err == nil {
			t.Error("malformed YAML accepted")
		}
	})
}
