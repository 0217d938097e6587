package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The shipped guard configurations (the example file and the DaemonSet's
// ConfigMap) load and validate; a bad key or value is named.
func TestGuardConfigs(t *testing.T) {
	// No file: memory alone, above the kubelet's 100Mi.
	def, err := LoadGuard("")
	if err != nil {
		t.Fatal(err)
	}
	if err := def.Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	if p, err := def.Eviction.Policy(); err != nil || len(p.Thresholds) != 2 || p.Thresholds[0].Value.Quantity != 200<<20 {
		t.Errorf("the default thresholds: %+v, %v; want memory.available and allocatableMemory.available at 200Mi", p.Thresholds, err)
	}
	cfg, err := LoadGuard("../deploy/guard.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("deploy/guard.example.yaml: %v", err)
	}
	b, err := os.ReadFile("../deploy/kubernetes/20-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "guard.yaml")
	if err := os.WriteFile(p, []byte(cm.Data["guard.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err = LoadGuard(p); err != nil {
		t.Fatalf("the DaemonSet's guard.yaml: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("the DaemonSet's guard.yaml: %v", err)
	}
	for _, tt := range []struct{ name, yaml, want string }{
		{"an unknown key", "podManifestPath: /etc/kubernetes/manifests\n", "podManifestPath: unknown field"},
		{"an unknown eviction key", "eviction: {respectPDB: true}\n", "eviction.respectPDB: unknown field"},
		{"a bad hard action", "eviction: {hardAction: kill}\n", `eviction.hardAction: hard action "kill"`},
		{"a cgroup root with ..", "cgroupRoot: /a/../b\n", `cgroupRoot: "/a/../b"`},
		{"a bad threshold", "eviction: {evictionHard: {memory.available: 12Zi}}\n", "evictionHard[memory.available]"},
		{"a bad driver", "cgroupDriver: upstart\n", `cgroupDriver: "upstart"`},
		{"a disk threshold", "eviction: {evictionHard: {memory.available: 200Mi, nodefs.available: 10%}}\n", "nodefs.available: guard mode evicts for memory"},
		{"a pid threshold", "eviction: {evictionSoft: {pid.available: 5%}, evictionSoftGracePeriod: {pid.available: 1m}}\n", "pid.available: guard mode evicts for memory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "guard.yaml")
			if err := os.WriteFile(p, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := LoadGuard(p)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%q: %v, want an error naming %q", tt.yaml, err, tt.want)
			}
		})
	}
}
