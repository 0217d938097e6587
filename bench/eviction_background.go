// The OOM race's setup: the pods, the pod root's budget, the agent a
// strategy needs, and the quiet state every trial starts from.

package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/psi"
	"github.com/nodeguard/nodeguard/qos"
)

func quantity(s string) resource.Quantity { return resource.MustParse(s) }

// DefaultEvictionBackground is the pods that share the budget with the
// hog: every QoS class, idle and busy. Busy pods run the hog in steady
// mode (hold N MiB, rewrite every page every 20 ms).
//
//	g-idle, g-busy    Guaranteed, 48Mi (busy holds 32Mi)
//	b-idle, b-busy    Burstable, requests 16Mi, limits 96Mi (busy holds 40Mi)
//	be-idle-1, -2     BestEffort, idle
func DefaultEvictionBackground(busybox, hog string) []*corev1.Pod {
	zero := int64(0)
	pod := func(name string, image string, cmd []string, res corev1.ResourceRequirements) *corev1.Pod {
		return &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: evictionNamespace},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &zero,
				Containers:                    []corev1.Container{{Name: "main", Image: image, Command: cmd, Resources: res}},
			},
		}
	}
	sleep := []string{"sleep", "86400"}
	steady := func(n string) []string { return []string{"/hog", "--steady", n} }
	guaranteed := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: quantity("48Mi"), corev1.ResourceCPU: quantity("100m")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: quantity("48Mi"), corev1.ResourceCPU: quantity("100m")},
	}
	burstable := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: quantity("16Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: quantity("96Mi")},
	}
	return []*corev1.Pod{
		pod("g-idle", busybox, sleep, guaranteed),
		pod("g-busy", hog, steady("32Mi"), guaranteed),
		pod("b-idle", busybox, sleep, burstable),
		pod("b-busy", hog, steady("40Mi"), burstable),
		pod("be-idle-1", busybox, sleep, corev1.ResourceRequirements{}),
		pod("be-idle-2", busybox, sleep, corev1.ResourceRequirements{}),
	}
}

// hogPod is the trial's BestEffort hog: allocate at rate in steps up to the
// budget (it is OOM-killed or evicted before), never restarted.
func hogPod(name, image string, rate, step, budget uint64) *corev1.Pod {
	return hogPodDelay(name, image, rate, step, budget, hogDelay)
}

// hogPodDelay is hogPod with the hog waiting delay between its first line
// and its first allocation.
func hogPodDelay(name, image string, rate, step, budget uint64, delay time.Duration) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: evictionNamespace},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			RestartPolicy:                 corev1.RestartPolicyNever,
			Containers: []corev1.Container{{Name: hogContainer, Image: image, Command: []string{"/hog",
				"--rate", strconv.FormatUint(rate, 10), "--step", strconv.FormatUint(step, 10),
				"--max", strconv.FormatUint(budget, 10), "--delay", delay.String()}}},
		},
	}
}

// hogName names a trial's hog pod: hog-<rate>-<strategy>-<trial>, DNS-1123.
func hogName(rate uint64, strategy string, trial int) string {
	clean := func(s string) string {
		var b strings.Builder
		for _, r := range strings.ToLower(s) {
			if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
				b.WriteRune(r)
			} else {
				b.WriteByte('-')
			}
		}
		return strings.Trim(b.String(), "-")
	}
	return fmt.Sprintf("hog-%s-%s-%d", clean(FormatBytes(rate)), clean(strategy), trial)
}

// checkLimit verifies that the pod root's limit is the budget (the kernel
// rounds a v1 limit down to whole pages).
func checkLimit(d cgroups.Dir, budget uint64) error {
	b, err := os.ReadFile(filepath.Join(d.Path, d.Hierarchy.MemoryLimitFile()))
	if err != nil {
		return fmt.Errorf("read the budget back: %w", err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || v > budget || budget-v >= uint64(os.Getpagesize()) {
		return fmt.Errorf("pod root %s limit reads %q, want %d", d.Path, bytes.TrimSpace(b), budget)
	}
	return nil
}

// agentFor makes sure the agent runs in the mode the strategy needs
// (RunEviction says when it restarts it), and that the background pods run
// on it again after a restart.
func (r *evictionRun) agentFor(ctx context.Context, strategy string) error {
	if r.rt.Agent == nil {
		return nil
	}
	s, err := r.reg.New(strategy)
	if err != nil {
		return err
	}
	want := evictsThroughAgent(s)
	if r.agentStarted && r.agentEvicting == want && (!want || r.agentFresh) {
		return nil
	}
	mode := "eviction off"
	if want {
		mode = "eviction on"
	}
	t0 := time.Now()
	if err := r.rt.Agent.Restart(ctx, want); err != nil {
		return fmt.Errorf("eviction benchmark: (re)start the agent with %s: %w", mode, err)
	}
	r.agentStarted, r.agentEvicting, r.agentFresh = true, want, want
	for _, p := range r.cfg.Background {
		if _, ok := r.background[evictionNamespace+"/"+p.Name]; !ok {
			continue // not started yet
		}
		if err := r.wait(ctx, p.Name, "ran on the restarted agent", running); err != nil {
			return err
		}
	}
	progressf(r.cfg.Progress, "agent (re)started with %s in %s", mode, time.Since(t0).Round(time.Millisecond))
	return nil
}

func (r *evictionRun) workingSet() (uint64, error) {
	m, err := readCgroupMemory(r.memDir)
	if err != nil {
		return 0, err
	}
	return m.WorkingSet(), nil
}

func (r *evictionRun) startBackground(ctx context.Context) error {
	if len(r.cfg.Background) == 0 {
		return nil
	}
	if _, err := r.rt.Pods.Apply(ctx, r.cfg.Background, lifecycle.SourceAPI); err != nil {
		return fmt.Errorf("start background pods: %w", err)
	}
	for _, p := range r.cfg.Background {
		r.background[evictionNamespace+"/"+p.Name] = p
	}
	for _, p := range r.cfg.Background {
		if err := r.wait(ctx, p.Name, "ran", running); err != nil {
			return err
		}
	}
	return nil
}

// settle waits until the pod root's working set holds still below the
// threshold line and, where the pod root has a memory.pressure file, until
// no memory stall has been added for psiQuiet: a stall of the previous
// trial still inside a PSI trigger's window would fire the next trial's
// trigger before its hog allocates anything.
func (r *evictionRun) settle(ctx context.Context) (uint64, error) {
	deadline := time.Now().Add(settleTimeout)
	line := r.cfg.Budget - r.cfg.Threshold
	pressure := pressureFile(r.dirs)
	var (
		hist       []uint64
		lastStall  time.Duration
		stallSince time.Time
	)
	for {
		ws, err := r.workingSet()
		if err != nil {
			return 0, err
		}
		quiet := true
		if pressure != "" {
			b, err := os.ReadFile(pressure)
			if err != nil {
				return 0, fmt.Errorf("read %s: %w", pressure, err)
			}
			st, err := psi.Parse(b, pressure)
			if err != nil {
				return 0, err
			}
			if st.Some.Total != lastStall || stallSince.IsZero() {
				lastStall, stallSince = st.Some.Total, time.Now()
			}
			quiet = time.Since(stallSince) >= psiQuiet
		}
		hist = append(hist, ws)
		if n := len(hist); n >= settleSamples {
			lo, hi := hist[n-settleSamples], hist[n-settleSamples]
			for _, v := range hist[n-settleSamples:] {
				lo, hi = min(lo, v), max(hi, v)
			}
			if hi-lo <= settleSlack && hi+settleMargin < line && quiet {
				return ws, nil
			}
		}
		if time.Now().After(deadline) {
			return ws, fmt.Errorf("pod root did not settle in %v: working set %s, line %s, memory stall quiet %v", settleTimeout, FormatBytes(ws), FormatBytes(line), quiet)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(settlePoll):
		}
	}
}

// pressureFile returns the pod root's cgroup2 memory.pressure, or "".
func pressureFile(dirs []cgroups.Dir) string {
	for _, d := range dirs {
		if d.Hierarchy.V2() {
			p := filepath.Join(d.Path, psi.Memory.CgroupFile())
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}

// candidates lists the running pods with their memory.
func (r *evictionRun) candidates(ctx context.Context) ([]EvictionCandidate, error) {
	pods, err := r.rt.Pods.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var out []EvictionCandidate
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		parent, err := r.rt.Cgroups.Parent(p)
		if err != nil {
			return nil, err
		}
		dirs, err := r.rt.Cgroups.Dirs(parent)
		if err != nil {
			return nil, err
		}
		d, err := memoryDir(dirs)
		if err != nil {
			return nil, err
		}
		m, err := readCgroupMemory(d)
		if cgroups.Gone(err) {
			continue // removed since List
		}
		if err != nil {
			return nil, fmt.Errorf("read pod %s/%s memory: %w", p.Namespace, p.Name, err)
		}
		req := qos.PodRequests(p)[corev1.ResourceMemory]
		c := EvictionCandidate{UID: p.UID, Namespace: p.Namespace, Name: p.Name, QOS: qos.Class(p), Priority: qos.Priority(p),
			MemoryRequest: req.Value(), MemoryUsage: int64(m.WorkingSet()), CgroupParent: parent}
		out = append(out, c)
	}
	return out, nil
}
