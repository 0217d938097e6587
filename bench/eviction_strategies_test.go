package bench

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
)

// fakePodRoot is a v1 memory cgroup directory in a temp dir.
func fakePodRoot(t *testing.T, usage, inactiveFile uint64) (cgroups.Dir, func(usage uint64)) {
	t.Helper()
	dir := t.TempDir()
	// Written by rename, as the kernel's file never reads torn: a poll
	// racing an os.WriteFile (truncate, then write) reads it empty, which
	// is a malformed pod root and ends the strategy.
	write := func(usage uint64) {
		tmp := filepath.Join(dir, ".memory.usage_in_bytes")
		if err := os.WriteFile(tmp, fmt.Appendf(nil, "%d\n", usage), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
			t.Fatal(err)
		}
	}
	write(usage)
	stat := fmt.Sprintf("cache 0\nrss 0\ninactive_file 0\ntotal_inactive_file %d\ntotal_active_file 0\n", inactiveFile)
	if err := os.WriteFile(filepath.Join(dir, "memory.stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &cgroups.Hierarchy{ID: 4, Controllers: []string{"memory"}, Mount: dir, Root: "/", Own: "/"}
	return cgroups.Dir{Hierarchy: h, Path: dir, Rel: "/"}, write
}

type evictRecorder struct {
	mu       sync.Mutex
	detected []time.Time
	reasons  []string
}

func (r *evictRecorder) env(d cgroups.Dir, budget, threshold uint64) *TrialEnv {
	return &TrialEnv{
		Dirs: []cgroups.Dir{d}, Budget: budget, Threshold: threshold,
		Detected: func(at time.Time) { r.mu.Lock(); r.detected = append(r.detected, at); r.mu.Unlock() },
		Evict: func(_ context.Context, reason string) (string, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.reasons = append(r.reasons, reason)
			return "ns/hog", nil
		},
		Log:  slog.New(slog.DiscardHandler),
		Rand: rand.New(rand.NewPCG(1, 2)),
	}
}

func (r *evictRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reasons)
}

func TestPollStrategy(t *testing.T) {
	const mi = 1 << 20
	t.Run("stays quiet while the working set is below the line", func(t *testing.T) {
		// usage 950Mi, inactive_file 100Mi: working set 850Mi, available
		// 150Mi against a 100Mi threshold.
		d, _ := fakePodRoot(t, 950*mi, 100*mi)
		var rec evictRecorder
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if err := NewPollStrategy("poll", 5*time.Millisecond).Run(ctx, rec.env(d, 1000*mi, 100*mi)); err != context.DeadlineExceeded {
			t.Fatalf("Run = %v, want the context's error", err)
		}
		if rec.count() != 0 {
			t.Errorf("evicted %d times with inactive file pages keeping available above the threshold", rec.count())
		}
	})
	t.Run("evicts at the first poll after the working set crosses", func(t *testing.T) {
		d, set := fakePodRoot(t, 500*mi, 0)
		var rec evictRecorder
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- NewPollStrategy("poll", 5*time.Millisecond).Run(ctx, rec.env(d, 1000*mi, 100*mi)) }()
		time.Sleep(30 * time.Millisecond)
		if rec.count() != 0 {
			t.Fatal("evicted below the line")
		}
		crossed := time.Now()
		set(901 * mi)
		deadline := time.Now().Add(5 * time.Second)
		for rec.count() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		cancel()
		<-done
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.detected) == 0 || len(rec.reasons) == 0 {
			t.Fatal("no detection after the crossing")
		}
		if lat := rec.detected[0].Sub(crossed); lat < 0 || lat > time.Second {
			t.Errorf("detected %v after the crossing, want within a few polls", lat)
		}
		if want := "allocatableMemory.available<104857600 (observed 103809024)"; rec.reasons[0] != want {
			t.Errorf("reason %q, want %q", rec.reasons[0], want)
		}
	})
	t.Run("an unreadable pod root is an error, not zero usage", func(t *testing.T) {
		d, _ := fakePodRoot(t, 1, 0)
		if err := os.Remove(filepath.Join(d.Path, "memory.stat")); err != nil {
			t.Fatal(err)
		}
		var rec evictRecorder
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := NewPollStrategy("poll", time.Millisecond).Run(ctx, rec.env(d, 1000*mi, 100*mi)); err == nil || err == context.DeadlineExceeded {
			t.Fatalf("Run = %v, want a read error", err)
		}
	})
}
