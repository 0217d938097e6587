package bench

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/images"
)

// buildNodeguard compiles the nodeguard binary the race's agent starts
// from, as `bench eviction` starts its own.
func buildNodeguard(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nodeguard")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nodeguard/nodeguard/cmd/nodeguard").CombinedOutput(); err != nil {
		t.Fatalf("build nodeguard: %v\n%s", err, out)
	}
	return bin
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
	bin := buildNodeguard(t)
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	strategies := []string{StrategyNodeguard, StrategyPoll1s}
	if !layout.Memory.V2() {
		strategies = append(strategies, StrategyKubeletMemcg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	var background []*corev1.Pod
	for _, p := range DefaultEvictionBackground(images.BusyboxName, images.HogName) {
		if p.Name == "b-busy" || p.Name == "be-idle-1" {
			background = append(background, p)
		}
	}
	var progress strings.Builder
	agentLog := filepath.Join(t.TempDir(), "agent.log")
	o := raceOptions{
		bin: bin, agentLog: agentLog, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), progress: &progress,
		cfg: EvictionConfig{Budget: 256 << 20, Threshold: 128 << 20, Rates: []uint64{100 << 20}, Trials: 1,
			Strategies: strategies, Step: 1 << 20, Background: background, Seed: 1},
	}
	o.cfg.Progress, o.cfg.Log = o.progress, o.log
	res, err := runRace(ctx, o)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		logAgentTail(t, agentLog)
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

// logAgentTail logs the last lines of the agent's log, for a failure.
func logAgentTail(t *testing.T, path string) {
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
	cfg := EvictionConfig{Budget: 256 << 20, Threshold: 64 << 20, Rates: []uint64{100 << 20}, Trials: 1, Step: 1 << 20,
		Strategies: []string{StrategyPoll1s}}
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
