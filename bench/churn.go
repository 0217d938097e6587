package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// PodRunner is nodeguard's pod manager as the churn benchmark drives it.
type PodRunner interface {
	Apply(ctx context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error)
	Delete(ctx context.Context, namespace, name string) error
	Wait(ctx context.Context, namespace, name string, pred func(*corev1.Pod, bool) bool) error
}

// ChurnConfig chooses the scenario.
type ChurnConfig struct {
	Pods, Parallel int
	Image          string
	// Grace, when set, runs the grace scenario (RunChurnGrace): the pods'
	// terminationGracePeriodSeconds, waited out in full by each deletion.
	Grace    time.Duration
	Progress io.Writer
}

// ChurnRow is one strategy's figures.
type ChurnRow struct {
	Name       string
	Startup    Summary // apply -> Running
	Deletion   Summary // delete -> gone
	Elapsed    time.Duration
	PodsPerSec float64
	MaxRunning int
}

func churnPod(image, name string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []corev1.Container{{Name: "main", Image: image, Command: []string{"sleep", "3600"}}},
		},
	}
}

// parallel runs fn(i) for i < n on p workers and returns each duration.
func parallel(ctx context.Context, n, p int, fn func(ctx context.Context, i int) error) ([]time.Duration, error) {
	out := make([]time.Duration, n)
	jobs := make(chan int)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for w := 0; w < p; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				t0 := time.Now()
				if err := fn(ctx, i); err != nil {
					errc <- err
					continue
				}
				out[i] = time.Since(t0)
			}
		}()
	}
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return out, err
	}
	return out, nil
}

// RunChurnNodeguard applies the pods through nodeguard, waits for each to
// run, then deletes them and waits for each to be gone.
func RunChurnNodeguard(ctx context.Context, r PodRunner, cfg ChurnConfig) (ChurnRow, error) {
	row := ChurnRow{Name: "nodeguard (apply -> Running)"}
	progressf(cfg.Progress, "nodeguard: %d pods, %d at a time", cfg.Pods, cfg.Parallel)
	start := time.Now()
	up, err := parallel(ctx, cfg.Pods, cfg.Parallel, func(ctx context.Context, i int) error {
		p := churnPod(cfg.Image, fmt.Sprintf("churn-%d", i))
		if _, err := r.Apply(ctx, []*corev1.Pod{p}, "api"); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return r.Wait(wctx, p.Namespace, p.Name, func(p *corev1.Pod, ok bool) bool {
			return ok && p.Status.Phase == corev1.PodRunning
		})
	})
	if err != nil {
		return row, err
	}
	row.MaxRunning = cfg.Pods
	progressf(cfg.Progress, "nodeguard: %d pods running; deleting", cfg.Pods)
	down, err := parallel(ctx, cfg.Pods, cfg.Parallel, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("churn-%d", i)
		if err := r.Delete(ctx, "bench", name); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return r.Wait(wctx, "bench", name, func(_ *corev1.Pod, ok bool) bool { return !ok })
	})
	if err != nil {
		return row, err
	}
	row.Elapsed = time.Since(start)
	row.Startup, row.Deletion = Summarize(up), Summarize(down)
	row.PodsPerSec = float64(cfg.Pods) / row.Elapsed.Seconds()
	return row, nil
}

// RunChurnFloor makes the same CRI calls directly (pod cgroup, sandbox,
// container create and start; stop and remove), which is the floor
// nodeguard's figures are judged against.
func RunChurnFloor(ctx context.Context, c *cri.Client, cg *kubepods.Cgroups, cfg ChurnConfig) (ChurnRow, error) {
	row := ChurnRow{Name: "direct CRI calls (floor)"}
	progressf(cfg.Progress, "direct CRI: %d pods, %d at a time", cfg.Pods, cfg.Parallel)
	type made struct {
		sandbox, container, parent string
	}
	pods := make([]made, cfg.Pods)
	start := time.Now()
	up, err := parallel(ctx, cfg.Pods, cfg.Parallel, func(ctx context.Context, i int) error {
		p := churnPod(cfg.Image, fmt.Sprintf("floor-%d", i))
		p.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
		parent, err := cg.Ensure(ctx, p)
		if err != nil {
			return err
		}
		sc := cri.SandboxConfig(p, cri.SandboxOptions{CgroupParent: parent})
		id, err := c.RunPodSandbox(ctx, sc)
		if err != nil {
			return err
		}
		image, err := c.EnsureImage(ctx, cfg.Image, corev1.PullIfNotPresent, sc) // the image is imported, never pulled
		if err != nil {
			return err
		}
		cc, err := cri.ContainerConfig(p, &p.Spec.Containers[0], cri.ContainerOptions{Image: image})
		if err != nil {
			return err
		}
		cid, err := c.CreateContainer(ctx, id, cc, sc)
		if err != nil {
			return err
		}
		pods[i] = made{sandbox: id, container: cid, parent: parent}
		return c.StartContainer(ctx, cid)
	})
	if err != nil {
		return row, err
	}
	row.MaxRunning = cfg.Pods
	progressf(cfg.Progress, "direct CRI: %d pods running; deleting", cfg.Pods)
	down, err := parallel(ctx, cfg.Pods, cfg.Parallel, func(ctx context.Context, i int) error {
		m := pods[i]
		if err := c.StopContainer(ctx, m.container, 0); err != nil {
			return err
		}
		if err := c.StopPodSandbox(ctx, m.sandbox); err != nil {
			return err
		}
		if err := c.RemovePodSandbox(ctx, m.sandbox); err != nil {
			return err
		}
		return cg.Remove(ctx, m.parent)
	})
	if err != nil {
		return row, err
	}
	row.Elapsed = time.Since(start)
	row.Startup, row.Deletion = Summarize(up), Summarize(down)
	row.PodsPerSec = float64(cfg.Pods) / row.Elapsed.Seconds()
	return row, nil
}

// WriteChurnTable prints the rows side by side.
func WriteChurnTable(w io.Writer, rows []ChurnRow) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }
	fmt.Fprintf(w, "%-30s %10s %10s %10s %10s %10s %8s\n", "strategy", "start p50", "start p99", "del p50", "del p99", "pods/s", "running")
	for _, r := range rows {
		fmt.Fprintf(w, "%-30s %10s %10s %10s %10s %10.1f %8d\n", r.Name, ms(r.Startup.P50), ms(r.Startup.P99), ms(r.Deletion.P50), ms(r.Deletion.P99), r.PodsPerSec, r.MaxRunning)
	}
}
