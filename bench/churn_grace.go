package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ChurnGraceRow is the start latency of one batch of pods in the grace
// scenario, with the deletions that overlapped it.
type ChurnGraceRow struct {
	Name     string
	Startup  Summary // apply -> Running
	Deletion Summary // delete -> gone, of the batch deleted meanwhile
	// InFlight: the fewest deletions still in their grace period when a
	// counted pod of this batch was applied (Startup.N of them).
	InFlight int
}

// gracePod is a churn pod with terminationGracePeriodSeconds g whose
// container ignores SIGTERM, so that the runtime's StopContainer waits
// all of g before it kills.
func gracePod(image, name string, g time.Duration) *corev1.Pod {
	p := churnPod(image, name)
	secs := int64(g / time.Second)
	p.Spec.TerminationGracePeriodSeconds = &secs
	p.Spec.Containers[0].Command = []string{"sh", "-c", "trap '' TERM; sleep 3600"}
	return p
}

// RunChurnGrace measures what deletions in their grace period cost the
// pods started meanwhile. Pods pods (cfg.Grace, ignoring SIGTERM) are
// started cfg.Parallel at a time with nothing else going on (the first
// row), then as many more beside them, nothing deleting (the floor: the
// node holds Pods pods, as it does in the next row); those are deleted and
// waited for. Then the first batch is deleted at once (as a ReplicaSet's
// pods are), and while it waits out its grace period as many new pods are
// started the same way; only the pods applied while a deletion was still
// in flight are counted there. Last the new pods are deleted at once, with
// nothing starting. Each row's Deletion is the batch deleted after it
// started (the first row's: the last batch).
func RunChurnGrace(ctx context.Context, r ChurnRunner, cfg ChurnConfig) ([]ChurnGraceRow, error) {
	if cfg.Grace < time.Second || cfg.Grace%time.Second != 0 {
		return nil, fmt.Errorf("churn with grace %v: want whole seconds, at least 1s (terminationGracePeriodSeconds)", cfg.Grace)
	}
	// A runtime slot held for a grace period delays the others by one
	// grace per round of Parallel pods: the bound lets that be measured.
	rounds := time.Duration((cfg.Pods + cfg.Parallel - 1) / cfg.Parallel)
	timeout := 2*time.Minute + rounds*cfg.Grace
	// start starts a batch; it returns each pod's apply -> Running and the
	// deletions in flight (inFlight) when it was applied.
	start := func(prefix string, inFlight *atomic.Int64) ([]time.Duration, []int64, error) {
		at := make([]int64, cfg.Pods)
		up, err := parallel(ctx, cfg.Pods, cfg.Parallel, func(ctx context.Context, i int) error {
			p := gracePod(cfg.Image, fmt.Sprintf("%s-%d", prefix, i), cfg.Grace)
			at[i] = inFlight.Load()
			if _, err := r.Apply(ctx, []*corev1.Pod{p}, "api"); err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return r.Wait(wctx, p.Namespace, p.Name, func(p *corev1.Pod, ok bool) bool {
				return ok && p.Status.Phase == corev1.PodRunning
			})
		})
		return up, at, err
	}
	// deleteAll deletes a batch at once and returns at once; inFlight
	// counts its pods not yet gone; the returned wait gives their
	// delete -> gone latencies.
	deleteAll := func(prefix string, inFlight *atomic.Int64) (wait func() ([]time.Duration, error)) {
		out := make([]time.Duration, cfg.Pods)
		errs := make([]error, cfg.Pods)
		var wg sync.WaitGroup
		inFlight.Store(int64(cfg.Pods))
		for i := range cfg.Pods {
			name := fmt.Sprintf("%s-%d", prefix, i)
			t0 := time.Now()
			if err := r.Delete(ctx, "bench", name); err != nil {
				errs[i] = err
				inFlight.Add(-1)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer inFlight.Add(-1)
				errs[i] = waitGone(ctx, r, name, timeout)
				out[i] = time.Since(t0)
			}()
		}
		return func() ([]time.Duration, error) {
			wg.Wait()
			return out, errors.Join(errs...)
		}
	}

	quiet := ChurnGraceRow{Name: "nodeguard, empty node"}
	dense := ChurnGraceRow{Name: fmt.Sprintf("nodeguard, %d running", cfg.Pods)}
	during := ChurnGraceRow{Name: fmt.Sprintf("nodeguard, %d in grace", cfg.Pods)}
	progressf(cfg.Progress, "grace %v: %d pods, %d at a time, nothing else going on", cfg.Grace, cfg.Pods, cfg.Parallel)
	var none atomic.Int64
	up, _, err := start("grace-quiet", &none)
	if err != nil {
		return nil, err
	}
	quiet.Startup = Summarize(up)

	progressf(cfg.Progress, "grace %v: %d more beside them, nothing deleting (the floor)", cfg.Grace, cfg.Pods)
	up, _, err = start("grace-dense", &none)
	if err != nil {
		return nil, err
	}
	dense.Startup = Summarize(up)
	progressf(cfg.Progress, "grace %v: deleting those %d, waiting for them to go", cfg.Grace, cfg.Pods)
	var dropping atomic.Int64
	down, err := deleteAll("grace-dense", &dropping)()
	if err != nil {
		return nil, err
	}
	dense.Deletion = Summarize(down)

	progressf(cfg.Progress, "grace %v: deleting the first %d at once; %d new pods meanwhile", cfg.Grace, cfg.Pods, cfg.Pods)
	var deleting atomic.Int64
	waitQuiet := deleteAll("grace-quiet", &deleting)
	up, at, err := start("grace-during", &deleting)
	down, derr := waitQuiet()
	if err := errors.Join(err, derr); err != nil {
		return nil, err
	}
	var counted []time.Duration
	during.InFlight = cfg.Pods
	for i, d := range up {
		if at[i] > 0 {
			counted = append(counted, d)
			during.InFlight = min(during.InFlight, int(at[i]))
		}
	}
	during.Startup, during.Deletion = Summarize(counted), Summarize(down)

	progressf(cfg.Progress, "grace %v: deleting the new %d at once, nothing starting", cfg.Grace, cfg.Pods)
	var last atomic.Int64
	down, err = deleteAll("grace-during", &last)()
	if err != nil {
		return nil, err
	}
	quiet.Deletion = Summarize(down)
	if len(counted) == 0 {
		return nil, fmt.Errorf("churn with grace %v: every deletion had ended before the first new pod was applied", cfg.Grace)
	}
	return []ChurnGraceRow{quiet, dense, during}, nil
}

// goneEvery: how often waitGone looks. Wait looks every 5 ms: a batch of
// deletions in grace waited for so would add Pods pollers at 200 Hz to
// what the starts measured meanwhile compete with, and the floor has
// none; 100 ms is 0.3% of a 30 s grace.
const goneEvery = 100 * time.Millisecond

// waitGone waits for pod bench/name to be gone.
func waitGone(ctx context.Context, r ChurnRunner, name string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(goneEvery)
	defer t.Stop()
	for {
		if _, ok := r.Get("bench", name); !ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for bench/%s to be gone: %w", name, ctx.Err())
		case <-t.C:
		}
	}
}

// ChurnRunner is the pod manager as the grace scenario drives it: it
// also looks pods up.
type ChurnRunner interface {
	PodRunner
	Get(namespace, name string) (*corev1.Pod, bool)
}

// WriteChurnGraceTable prints the grace scenario's rows side by side.
func WriteChurnGraceTable(w io.Writer, rows []ChurnGraceRow) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }
	fmt.Fprintf(w, "%-30s %6s %10s %10s %10s %10s %10s %9s\n", "starts", "n", "start p50", "start p99", "start max", "del p50", "del p99", "in grace")
	for _, r := range rows {
		fmt.Fprintf(w, "%-30s %6d %10s %10s %10s %10s %10s %9d\n", r.Name, r.Startup.N, ms(r.Startup.P50), ms(r.Startup.P99), ms(r.Startup.Max), ms(r.Deletion.P50), ms(r.Deletion.P99), r.InFlight)
	}
}
