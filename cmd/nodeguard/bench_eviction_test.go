package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/oom"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// TestRaceAgentConfig: the race's agent configuration is the shipped
// defaults with node allocatable at the budget and the hard memory
// threshold at the race's, and nothing else changed.
func TestRaceAgentConfig(t *testing.T) {
	const memTotal, budget, threshold = 24 << 30, 1 << 30, 107374182
	for _, disabled := range []bool{false, true} {
		t.Run(map[bool]string{false: "with eviction on", true: "with eviction off"}[disabled], func(t *testing.T) {
			c := raceAgentConfig(memTotal, budget, threshold, disabled)
			b, err := yaml.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadRunConfig(path)
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
				pc, err := cfg.Eviction.policy()
				if err != nil {
					t.Fatal(err)
				}
				got := map[nodestats.Signal]int64{}
				for _, th := range pc.Thresholds {
					if th.Hard() {
						got[th.Signal] = th.Value.Resolve(1 << 40)
					}
				}
				if got[nodestats.SignalAllocatableMemoryAvailable] != threshold || got[nodestats.SignalMemoryAvailable] != threshold {
					t.Errorf("memory thresholds %v, want %d", got, threshold)
				}
				for s := range oom.DefaultEvictionHard() {
					if _, ok := got[nodestats.Signal(s)]; !ok {
						t.Errorf("default threshold %s dropped", s)
					}
				}
			})
			t.Run("the rest is the shipped defaults", func(t *testing.T) {
				want := defaultRunConfig()
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

// TestTheRaceReadsTheAgentsEvictionEvent: what the agent writes into its
// event log for an eviction is what the race's nodeguard strategy reads.
func TestTheRaceReadsTheAgentsEvictionEvent(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.UTC)
	d := oom.Decision{Time: t0.Add(2 * time.Millisecond), ObservedAt: t0.Add(time.Millisecond), Signal: "allocatableMemory.available",
		Threshold: "allocatableMemory.available<107374182", Observed: 105e6, Hard: true,
		Victim: oom.Pod{UID: "u1", Namespace: "bench-eviction", Name: "hog"}}
	tm := oom.Timing{Crossed: t0, Detected: t0.Add(100 * time.Microsecond), Decided: t0.Add(2 * time.Millisecond), KillSent: t0.Add(5 * time.Millisecond)}
	events := api.NewEventLog(8)
	(&evictionObserver{events: events}).OnDecision(d, tm)
	evs := events.EventsSince(t.Context(), 0, 0)
	if len(evs) != 1 {
		t.Fatalf("%d events", len(evs))
	}
	// Through JSON, as the API serves it.
	b, err := json.Marshal(evs[0])
	if err != nil {
		t.Fatal(err)
	}
	var e api.Event
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	ev, err := bench.ParseAgentEviction(e)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Victim != "bench-eviction/hog" || ev.UID != "u1" || !ev.ObservedAt.Equal(d.ObservedAt) || !ev.KillSent.Equal(tm.KillSent) ||
		!ev.Crossed.Equal(tm.Crossed) || ev.Kill != 3*time.Millisecond || ev.Threshold != d.Threshold {
		t.Errorf("read %+v", ev)
	}
}

// TestBenchEvictionOnTheRealAgent runs the race as `bench eviction` does,
// on the real private containerd with the real binary: one trial of the
// agent's own eviction manager and one of each baseline that always
// catches this hog (poll1s: the window from the line to the budget, 1.28 s
// at 100Mi/s, is longer than its period; the kubelet's memcg notifier where
// memory is on cgroup v1), on the same pods and agent, restarted between
// the modes.
func TestBenchEvictionOnTheRealAgent(t *testing.T) {
	cgtest.RequirePrivileged(t)
	bin := buildBinary(t)
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	strategies := []string{bench.StrategyNodeguard, bench.StrategyPoll1s}
	if !layout.Memory.V2() {
		strategies = append(strategies, bench.StrategyKubeletMemcg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	var background []*corev1.Pod
	for _, p := range bench.DefaultEvictionBackground(images.BusyboxName, images.HogName) {
		if p.Name == "b-busy" || p.Name == "be-idle-1" {
			background = append(background, p)
		}
	}
	var progress strings.Builder
	agentLog := filepath.Join(t.TempDir(), "agent.log")
	o := raceOptions{
		bin: bin, agentLog: agentLog, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), progress: &progress,
		cfg: bench.EvictionConfig{Budget: 256 << 20, Threshold: 128 << 20, Rates: []uint64{100 << 20}, Trials: 1,
			Strategies: strategies, Step: 1 << 20, Background: background, Seed: 1},
	}
	o.cfg.Progress, o.cfg.Log = o.progress, o.log
	res, err := runRace(ctx, o)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		logTail(t, agentLog)
		t.Fatal(err)
	}
	if len(res.trials) != len(strategies) {
		t.Fatalf("%d trials, want %d", len(res.trials), len(strategies))
	}
	for _, tr := range res.trials {
		t.Run(tr.Strategy+" evicted the hog alone, before the kernel's OOM killer", func(t *testing.T) {
			t.Log(tr.Outcome())
			if tr.Err != "" || tr.Missed || tr.KernelOOMFirst || !tr.KernelOOM.IsZero() || tr.TimedOut {
				t.Errorf("err %q, missed %v, OOM first %v at %v, timed out %v", tr.Err, tr.Missed, tr.KernelOOMFirst, tr.KernelOOM, tr.TimedOut)
			}
			if !slices.Equal(tr.Victims, []string{tr.Hog}) || tr.Collateral != 0 {
				t.Errorf("victims %v, want only %s", tr.Victims, tr.Hog)
			}
			if tr.Crossed.IsZero() || tr.Detected.IsZero() || tr.KillSent.Before(tr.Detected) || tr.Released.Before(tr.KillSent) || tr.Released.IsZero() {
				t.Errorf("out of order or missing: crossed %v, detected %v, kill %v, released %v", tr.Crossed, tr.Detected, tr.KillSent, tr.Released)
			}
		})
	}
	t.Run("nodeguard's trial was the agent's own decision, the baselines ran with its eviction manager off", func(t *testing.T) {
		if r := res.trials[0].Reason; !strings.HasPrefix(r, "nodeguard: allocatableMemory.available<") {
			t.Errorf("nodeguard's reason %q, want the agent's threshold", r)
		}
		b, err := os.ReadFile(agentLog)
		if err != nil {
			t.Fatal(err)
		}
		log := string(b)
		if n := strings.Count(log, `msg="eviction manager running"`); n != 1 {
			t.Errorf("the eviction manager ran in %d agent runs, want 1 (nodeguard's trial)", n)
		}
		if n := strings.Count(log, `msg="evict pod"`); n != 1 {
			t.Errorf("%d evictions by the agent, want 1", n)
		}
		if n := strings.Count(log, "=== "); n != 2 {
			t.Errorf("%d agent starts, want 2 (eviction on, then off)", n)
		}
	})
}

func logTail(t *testing.T, path string) {
	t.Helper()
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	t.Logf("agent log (last lines):\n%s", strings.Join(lines, "\n"))
}

// TestRaceRefusesARuntimeItCannotOwn: on a runtime it did not start, the
// race wants an absolute cgroup root and the hog and busybox images; it
// says which is missing.
func TestRaceRefusesARuntimeItCannotOwn(t *testing.T) {
	cfg := bench.EvictionConfig{Budget: 256 << 20, Threshold: 64 << 20, Rates: []uint64{100 << 20}, Trials: 1, Step: 1 << 20,
		Strategies: []string{bench.StrategyPoll1s}}
	t.Run("a relative cgroup root", func(t *testing.T) {
		_, err := runRace(t.Context(), raceOptions{cfg: cfg, endpoint: "unix:///nonexistent.sock", driver: "cgroupfs", root: "kubepods-here",
			log: slog.New(slog.DiscardHandler), progress: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "must be absolute") {
			t.Errorf("err %v, want the root refused as relative", err)
		}
	})
	t.Run("a runtime without the hog image", func(t *testing.T) {
		env := crienv.New(t)
		client, err := dialCRI(t.Context(), env.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		err = checkRaceRuntime(t.Context(), client, env.Endpoint(), images.HogName, env.BusyboxImage())
		if err == nil || !strings.Contains(err.Error(), images.HogName) || !strings.Contains(err.Error(), "mkimages") {
			t.Errorf("err %v, want the missing hog image named, with how to make it", err)
		}
		if err := checkRaceRuntime(t.Context(), client, env.Endpoint(), env.BusyboxImage()); err != nil {
			t.Errorf("an idle runtime with the images: %v", err)
		}
	})
}
