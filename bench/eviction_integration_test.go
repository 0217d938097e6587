package bench_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// inProcessPods is a lifecycle.Manager as bench.EvictionPods.
type inProcessPods struct{ *lifecycle.Manager }

func (p inProcessPods) List(context.Context) ([]*corev1.Pod, error) { return p.Manager.List(), nil }

// TestEvictionTrialAgainstARealContainerd runs one trial of the OOM race
// with the poll1s strategy: a 256Mi budget, a hog at 100Mi/s. The
// threshold is 128Mi so that the window between the crossing and the
// budget (1.28 s at 100Mi/s) is longer than the poll interval: poll1s must
// catch the hog every time, which makes the victim and the record
// assertable.
func TestEvictionTrialAgainstARealContainerd(t *testing.T) {
	env := crienv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	client, err := cri.Dial(ctx, env.Endpoint(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	set, err := images.Cached(ctx, images.DefaultCacheDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.ImportImage(ctx, client, env.Socket(), set.Hog); err != nil {
		t.Fatal(err)
	}
	layout, err := cgroups.Discover()
	if err != nil {
		t.Fatal(err)
	}
	cg, err := kubepods.New(t.Context(), layout, kubepods.Cgroupfs, env.CgroupParent(), kubepods.Options{})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	mgr, err := lifecycle.New(lifecycle.Config{Runtime: client, Cgroups: cg, RootDir: root, MemoryCapacity: 8 << 30,
		CgroupV2: layout.Memory.V2(), MinOOMScoreAdj: -999, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	mgr.SourcesReady()
	mctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { mgr.Run(mctx); close(done) }()
	defer func() { stop(); <-done }()

	// A lighter background than the default: a busy Burstable pod over its
	// request (a ranking candidate after the hog) and an idle BestEffort.
	var background []*corev1.Pod
	for _, p := range bench.DefaultEvictionBackground(env.BusyboxImage(), images.HogName) {
		if p.Name == "b-busy" || p.Name == "be-idle-1" {
			background = append(background, p)
		}
	}
	const budget = 256 << 20
	var progress strings.Builder
	cfg := bench.EvictionConfig{
		Budget: budget, Threshold: 128 << 20, Rates: []uint64{100 << 20}, Trials: 1,
		Strategies: []string{bench.StrategyPoll1s}, Step: 1 << 20,
		HogImage: images.HogName, BusyboxImage: env.BusyboxImage(), Background: background,
		Seed: 1, Progress: &progress, Log: log,
	}
	// No agent here (bench's TestBenchEvictionOnTheRealAgent races
	// on one): the test sets the budget itself, as the agent's node
	// allocatable would.
	if _, err := cg.EnforceAllocatable(ctx, corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(budget, resource.BinarySI)}, nil, nil); err != nil {
		t.Fatal(err)
	}
	rt := bench.EvictionRuntime{Pods: inProcessPods{mgr}, Cgroups: cg, LogDir: filepath.Join(root, "logs")}
	trials, err := bench.RunEviction(ctx, rt, bench.NewEvictionStrategies(), cfg)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(trials) != 1 {
		t.Fatalf("%d trials, want 1", len(trials))
	}
	tr := trials[0]
	t.Logf("trial: %s", tr.Outcome())

	t.Run("the hog is the only victim, evicted before the kernel's OOM killer", func(t *testing.T) {
		if !slices.Equal(tr.Victims, []string{tr.Hog}) || tr.Collateral != 0 {
			t.Errorf("victims %v (collateral %d), want only %s", tr.Victims, tr.Collateral, tr.Hog)
		}
		if tr.Missed || tr.KernelOOMFirst || !tr.KernelOOM.IsZero() || tr.TimedOut || tr.Err != "" {
			t.Errorf("missed %v, kernel OOM first %v at %v, timed out %v, err %q", tr.Missed, tr.KernelOOMFirst, tr.KernelOOM, tr.TimedOut, tr.Err)
		}
	})
	t.Run("the record is complete and ordered", func(t *testing.T) {
		for name, at := range map[string]time.Time{"baseline": tr.BaselineAt, "alloc start": tr.AllocStart, "crossed": tr.Crossed,
			"detected": tr.Detected, "kill sent": tr.KillSent, "kill returned": tr.KillReturned, "released": tr.Released} {
			if at.IsZero() {
				t.Errorf("%s is missing", name)
			}
		}
		if !(tr.BaselineAt.Before(tr.AllocStart) && tr.AllocStart.Before(tr.Crossed) && !tr.KillSent.Before(tr.Detected) &&
			!tr.KillReturned.Before(tr.KillSent) && !tr.Released.Before(tr.KillSent)) {
			t.Errorf("events out of order: baseline %v, start %v, crossed %v, detected %v, kill %v..%v, released %v",
				tr.BaselineAt, tr.AllocStart, tr.Crossed, tr.Detected, tr.KillSent, tr.KillReturned, tr.Released)
		}
		// The 1 s poller sees the crossing within one interval (plus a
		// read); the window to the budget is 1.28 s.
		if d, _ := tr.DetectionLatency(); d < -50*time.Millisecond || d > 1100*time.Millisecond {
			t.Errorf("detection latency %v, want within the poll interval", d)
		}
		if tr.Baseline == 0 || tr.Baseline >= budget-128<<20 {
			t.Errorf("baseline %d", tr.Baseline)
		}
		if r := tr.AchievedRate / (1 << 20); r < 50 || r > 150 {
			t.Errorf("hog rate %.0f MiB/s, want ~100", r)
		}
		if tr.Note != "" {
			t.Errorf("note %q", tr.Note)
		}
	})
	t.Run("nothing is left: pods, pod cgroups", func(t *testing.T) {
		if pods := mgr.List(); len(pods) != 0 {
			var names []string
			for _, p := range pods {
				names = append(names, p.Namespace+"/"+p.Name)
			}
			t.Errorf("pods left: %v", names)
		}
		kube, err := kubepods.Name(kubepods.Cgroupfs, env.CgroupParent())
		if err != nil {
			t.Fatal(err)
		}
		dirs, err := cg.Dirs(kube)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			err := cgroups.Walk(d.Path, func(p string) error {
				if strings.HasPrefix(filepath.Base(p), "pod") {
					t.Errorf("pod cgroup left: %s", p)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
			if d.Hierarchy.Has("memory") {
				b, err := os.ReadFile(filepath.Join(d.Path, d.Hierarchy.MemoryLimitFile()))
				if err == nil && strings.TrimSpace(string(b)) != "268435456" {
					t.Errorf("pod root limit %s, want the 256Mi budget", b)
				}
			}
		}
	})
}
