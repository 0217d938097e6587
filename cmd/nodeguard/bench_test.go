package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// The race's contract with the agent, tested here because the agent's
// configuration decoder and its eviction observer live in this package;
// the race itself is package bench's, and its tests are there.

// TestRaceAgentConfig: the race's agent configuration is the shipped
// defaults with node allocatable at the budget and the hard memory
// threshold at the race's, and nothing else changed.
func TestRaceAgentConfig(t *testing.T) {
	const memTotal, budget, threshold = 24 << 30, 1 << 30, 107374182
	for _, disabled := range []bool{false, true} {
		t.Run(map[bool]string{false: "with eviction on", true: "with eviction off"}[disabled], func(t *testing.T) {
			c := bench.RaceAgentConfig(memTotal, budget, threshold, disabled)
			b, err := yaml.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			cfg.RuntimeEndpoint = "unix:///run/containerd/containerd.sock" // a flag of the race's agent
			if err := cfg.Validate(); err != nil {
				t.Fatalf("the race's configuration does not validate: %v\n%s", err, b)
			}
			t.Run("node allocatable is the budget", func(t *testing.T) {
				capacity := corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(memTotal, resource.BinarySI)}
				rc := kubepods.KubepodsResources(capacity, cfg.SystemReserved, cfg.KubeReserved, false)
				if rc.Memory == nil || *rc.Memory != budget {
					t.Errorf("kubepods memory limit %v, want %d", rc.Memory, budget)
				}
			})
			t.Run("allocatableMemory.available's hard threshold is the race's, the other defaults stay", func(t *testing.T) {
				pc, err := cfg.Eviction.Policy()
				if err != nil {
					t.Fatal(err)
				}
				got := map[nodestats.Signal]int64{}
				for _, th := range pc.Thresholds {
					if th.Hard() {
						got[th.Signal] = th.Value.Amount(1 << 40)
					}
				}
				if got[nodestats.SignalAllocatableMemoryAvailable] != threshold || got[nodestats.SignalMemoryAvailable] != threshold {
					t.Errorf("memory thresholds %v, want %d", got, threshold)
				}
				for s := range eviction.DefaultEvictionHard() {
					if _, ok := got[nodestats.Signal(s)]; !ok {
						t.Errorf("default threshold %s dropped", s)
					}
				}
			})
			t.Run("the rest is the shipped defaults", func(t *testing.T) {
				want := config.Default()
				want.RuntimeEndpoint = cfg.RuntimeEndpoint
				want.SystemReserved = cfg.SystemReserved
				want.Eviction.EvictionHard = cfg.Eviction.EvictionHard
				want.Eviction.Disabled = disabled
				if g, w := mustJSON(t, cfg), mustJSON(t, want); g != w {
					t.Errorf("configuration differs from the defaults beyond the race's keys:\n got %s\nwant %s", g, w)
				}
			})
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
