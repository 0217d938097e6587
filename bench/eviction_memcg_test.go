package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

func TestMemcgUsageThreshold(t *testing.T) {
	// The kubelet wants usage to cross where the working set reaches
	// capacity - threshold: it adds the page cache that usage counts and
	// the working set does not.
	for _, tc := range []struct {
		name               string
		usage, inactive    uint64
		budget, thr, wantT uint64
	}{
		{"no page cache: the line itself", 300 << 20, 0, 1 << 30, 100 << 20, 1<<30 - 100<<20},
		{"inactive file pages move it up", 300 << 20, 40 << 20, 1 << 30, 100 << 20, 1<<30 - 60<<20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := cgstat.CgroupMemory{Usage: tc.usage, InactiveFile: tc.inactive}
			if got := MemcgUsageThreshold(tc.budget, tc.thr, mem); got != tc.wantT {
				t.Errorf("threshold %d, want %d", got, tc.wantT)
			}
		})
	}
}

func TestKubeletMemcgRefusesCgroupV2(t *testing.T) {
	dir := t.TempDir()
	h := &cgroups.Hierarchy{ID: 0, Controllers: []string{"memory"}, Mount: dir, Root: "/", Own: "/"}
	env := &TrialEnv{Dirs: []cgroups.Dir{{Hierarchy: h, Path: dir, Rel: "/"}}, Budget: 1 << 30, Threshold: 1 << 20,
		Log: slog.New(slog.DiscardHandler), Rand: rand.New(rand.NewPCG(1, 2))}
	if !h.V2() {
		t.Fatal("the fake hierarchy should be cgroup2")
	}
	err := NewKubeletMemcgStrategy(time.Second).Run(t.Context(), env)
	if !errors.Is(err, ErrMemcgNotifierV2) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("err %v, want ErrMemcgNotifierV2 (unsupported)", err)
	}
}

// buildHog compiles the hog program (lab/hog/cmd/hog) into a temporary
// directory.
func buildHog(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hog")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nodeguard/nodeguard/lab/hog/cmd/hog").CombinedOutput(); err != nil {
		t.Fatalf("build the hog: %v\n%s", err, out)
	}
	return bin
}

// TestKubeletMemcgStrategyAgainstARealCgroup races the kubelet's memcg
// notifier against the kernel on a real v1 memory cgroup (a sandbox with a
// 256 MiB limit standing in for kubepods), twice: the housekeeping period
// is an hour, so only the usage threshold's notification can wake it; the
// second hog shows the threshold still armed after firing both ways (up at
// the first hog, down at its kill).
func TestKubeletMemcgStrategyAgainstARealCgroup(t *testing.T) {
	cgtest.RequireMode(t, cgroups.ModeHybrid, cgroups.ModeV1)
	const budget, threshold = 256 << 20, 64 << 20
	sb := cgtest.New(t, cgtest.WithMemoryLimit(budget))
	hog := buildHog(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	var mu sync.Mutex
	var detected []time.Time
	var reasons []string
	evicted := make(chan struct{}, 4)
	env := &TrialEnv{
		Dirs: sb.Dirs(), Budget: budget, Threshold: threshold,
		Log: slog.New(slog.DiscardHandler), Rand: rand.New(rand.NewPCG(3, 4)),
		Detected: func(at time.Time) { mu.Lock(); detected = append(detected, at); mu.Unlock() },
		Evict: func(_ context.Context, reason string) (string, error) {
			mu.Lock()
			reasons = append(reasons, reason)
			mu.Unlock()
			err := sb.Kill()
			evicted <- struct{}{}
			return "sandbox/hog", err
		},
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	armed := make(chan uint64, 4)
	s := NewKubeletMemcgStrategy(time.Hour)
	s.onArm = func(at uint64) { armed <- at }
	go func() { done <- s.Run(sctx, env) }()
	defer func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("strategy: %v", err)
		}
	}()
	select { // its first synchronize sets the threshold
	case at := <-armed:
		if at != budget-threshold {
			t.Logf("usage threshold at %d: the sandbox holds %d bytes of inactive file pages", at, at-(budget-threshold))
		}
	case <-ctx.Done():
		t.Fatal("the notifier was never armed")
	}
	for round := 1; round <= 2; round++ {
		cmd := exec.Command(hog, "--rate", "200Mi", "--step", "1Mi", "--max", "256Mi", "--delay", "100ms")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := sb.Start(t, cmd); err != nil {
			t.Fatal(err)
		}
		var lines []string
		read := make(chan struct{})
		go func() {
			defer close(read)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
		}()
		select {
		case <-evicted:
		case <-time.After(30 * time.Second):
			mem, merr := readCgroupMemory(cgroups.Dir{Hierarchy: sb.Layout().Memory, Path: sb.MemoryDir()})
			ooms, _ := sb.OOMKills()
			mu.Lock()
			seen := fmt.Sprintf("detections %v, reasons %q", detected, reasons)
			mu.Unlock()
			t.Fatalf("round %d: never evicted in 30 s: sandbox usage %d, working set %d (%v), %d OOM kills, %s",
				round, mem.Usage, mem.WorkingSet(), merr, ooms, seen)
		}
		<-read
		_ = cmd.Wait()
		points, err := ParseProgress(lines)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		at, reason := detected[len(detected)-1], reasons[len(reasons)-1]
		mu.Unlock()
		if !strings.Contains(reason, "memcg notification") {
			t.Errorf("round %d: woken by %q, want the memcg notification", round, reason)
		}
		if start, _, ok := AllocationStart(points); !ok || !at.After(start) {
			t.Errorf("round %d: detected at %v, before the hog allocated (%v)", round, at, start)
		}
		if cross, ok := Crossing(points, 0, budget, threshold); ok {
			t.Logf("round %d: detected %v after the hog's own count crossed budget - threshold", round, at.Sub(cross).Round(10*time.Microsecond))
		}
		if n, err := sb.OOMKills(); err != nil || n != 0 {
			t.Errorf("round %d: %d OOM kills (%v): the notifier should have won", round, n, err)
		}
	}
}
