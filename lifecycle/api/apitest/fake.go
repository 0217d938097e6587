package apitest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/qos"
)

// Fake is an in-memory api.PodService. Set its exported fields before the
// server starts; its methods are safe for concurrent use.
type Fake struct {
	// Now stamps creationTimestamp and startTime of applied pods.
	Now func() time.Time
	// Options is the node policy Apply validates against.
	Options podspec.Options
	// LogsFunc, when set, replaces Logs after the pod was found; opts name
	// the container found.
	LogsFunc func(ctx context.Context, namespace, name string, opts api.LogOptions, w io.Writer) error
	// ExecFunc, when set, replaces Exec after the pod and container were
	// found.
	ExecFunc func(ctx context.Context, namespace, name, container string, cmd []string, timeout time.Duration) (api.ExecResult, error)
	// StreamFunc, when set, answers Stream after the pod (and for exec
	// and attach the container) was found; req names the container
	// found. Without it Stream fails: the fake has no streaming server.
	StreamFunc func(ctx context.Context, namespace, name string, req api.StreamRequest) (api.StreamTarget, error)

	mu      sync.Mutex
	pods    map[string]*corev1.Pod // by namespace/name
	logs    map[string]string      // by namespace/name/container
	nextIP  netip.Addr
	sources map[string]string // pod key -> source of its last Apply
}

var _ api.PodService = (*Fake)(nil)

// NewFake returns an empty Fake whose clock is now.
func NewFake(now func() time.Time) *Fake {
	return &Fake{
		Now:     now,
		pods:    map[string]*corev1.Pod{},
		logs:    map[string]string{},
		sources: map[string]string{},
		nextIP:  netip.MustParseAddr("10.88.0.2"),
	}
}

func key(namespace, name string) string { return namespace + "/" + name }

// Apply validates every pod and stores them all, or none.
func (f *Fake) Apply(_ context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error) {
	var bad []string
	for _, p := range pods {
		_, errs := podspec.Validate(p, f.Options)
		for _, e := range errs {
			bad = append(bad, fmt.Sprintf("pod %s/%s: %s", p.Namespace, p.Name, e.Error()))
		}
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%w:\n%s", api.ErrInvalid, strings.Join(bad, "\n"))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := metav1.NewTime(f.Now().Truncate(time.Second))
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		k := key(p.Namespace, p.Name)
		s := p.DeepCopy()
		if old, ok := f.pods[k]; ok && old.UID == s.UID {
			s.CreationTimestamp, s.Status = old.CreationTimestamp, old.Status
		} else {
			s.CreationTimestamp = now
			s.Status = f.runningStatus(s, now)
		}
		f.pods[k] = s
		f.sources[k] = source
		out = append(out, s.DeepCopy())
	}
	return out, nil
}

// runningStatus is the status of a pod whose containers all run.
func (f *Fake) runningStatus(p *corev1.Pod, now metav1.Time) corev1.PodStatus {
	ip := f.nextIP
	f.nextIP = f.nextIP.Next()
	st := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		PodIP:     ip.String(),
		PodIPs:    []corev1.PodIP{{IP: ip.String()}},
		HostIP:    "192.0.2.1",
		StartTime: &now,
		QOSClass:  qos.Class(p),
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
	for _, c := range p.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: now, FinishedAt: now}},
		})
	}
	for _, c := range p.Spec.Containers {
		started := true
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return st
}

// Delete removes a pod and its logs.
func (f *Fake) Delete(_ context.Context, namespace, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := key(namespace, name)
	if _, ok := f.pods[k]; !ok {
		return fmt.Errorf("pod %s: %w", k, api.ErrNotFound)
	}
	delete(f.pods, k)
	delete(f.sources, k)
	for lk := range f.logs {
		if strings.HasPrefix(lk, k+"/") {
			delete(f.logs, lk)
		}
	}
	return nil
}

// List returns copies of every pod, in no particular order.
func (f *Fake) List() []*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(f.pods))
	for _, p := range f.pods {
		out = append(out, p.DeepCopy())
	}
	return out
}

// Get returns a copy of one pod.
func (f *Fake) Get(namespace, name string) (*corev1.Pod, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pods[key(namespace, name)]
	if !ok {
		return nil, false
	}
	return p.DeepCopy(), true
}

// Source returns the source of the last Apply of a pod.
func (f *Fake) Source(namespace, name string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sources[key(namespace, name)]
	return s, ok
}

// SetLogs stores the log text of a container ("" for the default one, the
// first).
func (f *Fake) SetLogs(namespace, name, container, text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs[key(namespace, name)+"/"+container] = text
}

// container resolves a container name of a stored pod: "" is the first.
func (f *Fake) container(namespace, name, container string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pods[key(namespace, name)]
	if !ok {
		return "", fmt.Errorf("pod %s/%s: %w", namespace, name, api.ErrNotFound)
	}
	if container == "" {
		if len(p.Spec.Containers) == 0 {
			return "", fmt.Errorf("pod %s/%s has no containers: %w", namespace, name, api.ErrNotFound)
		}
		return p.Spec.Containers[0].Name, nil
	}
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for _, c := range list {
			if c.Name == container {
				return container, nil
			}
		}
	}
	return "", fmt.Errorf("container %s in pod %s/%s: %w", container, namespace, name, api.ErrNotFound)
}

// Logs writes the stored text, or its last opts.Tail lines; the other
// options are for LogsFunc.
func (f *Fake) Logs(ctx context.Context, namespace, name string, opts api.LogOptions, w io.Writer) error {
	c, err := f.container(namespace, name, opts.Container)
	if err != nil {
		return err
	}
	if f.LogsFunc != nil {
		opts.Container = c
		return f.LogsFunc(ctx, namespace, name, opts, w)
	}
	tail := opts.Tail
	f.mu.Lock()
	text := f.logs[key(namespace, name)+"/"+c]
	f.mu.Unlock()
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		lines = append(lines, sc.Text()+"\n")
	}
	if tail >= 0 && tail < len(lines) {
		lines = lines[len(lines)-tail:]
	}
	for _, l := range lines {
		if _, err := io.WriteString(w, l); err != nil {
			return err
		}
	}
	return nil
}

// Exec calls ExecFunc, or echoes the command line on stdout with exit
// code 0.
func (f *Fake) Exec(ctx context.Context, namespace, name, container string, cmd []string, timeout time.Duration) (api.ExecResult, error) {
	c, err := f.container(namespace, name, container)
	if err != nil {
		return api.ExecResult{}, err
	}
	if f.ExecFunc != nil {
		return f.ExecFunc(ctx, namespace, name, c, cmd, timeout)
	}
	return api.ExecResult{Stdout: []byte(strings.Join(cmd, " ") + "\n")}, nil
}

// Stream finds the pod (and for exec and attach the container), then
// answers with StreamFunc.
func (f *Fake) Stream(ctx context.Context, namespace, name string, req api.StreamRequest) (api.StreamTarget, error) {
	if req.Kind == api.StreamPortForward {
		if _, ok := f.Get(namespace, name); !ok {
			return api.StreamTarget{}, fmt.Errorf("%w: pod %s/%s", api.ErrNotFound, namespace, name)
		}
	} else {
		c, err := f.container(namespace, name, req.Container)
		if err != nil {
			return api.StreamTarget{}, err
		}
		req.Container = c
	}
	if f.StreamFunc == nil {
		return api.StreamTarget{}, fmt.Errorf("%s of pod %s/%s: the fake pod service has no streaming server (set StreamFunc)", req.Kind, namespace, name)
	}
	return f.StreamFunc(ctx, namespace, name, req)
}
