//go:build clusterlane

package guard

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/evictionapi"
	"github.com/nodeguard/nodeguard/lab/cluster"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// switchProxy forwards loopback connections to the API server while up;
// down, it closes each connection at once: the API server unreachable.
type switchProxy struct {
	ln     net.Listener
	target string
	up     atomic.Bool
	wg     sync.WaitGroup
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln, target: target}
	p.up.Store(true)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.up.Load() {
				c.Close()
				continue
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.forward(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.wg.Wait()
	})
	return p
}

func (p *switchProxy) forward(c net.Conn) {
	defer c.Close()
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	defer s.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(s, c); done <- struct{}{} }()
	go func() { io.Copy(c, s); done <- struct{}{} }()
	// Down cuts the connections it carries too, as a lost network does.
	for {
		select {
		case <-done:
			return
		case <-time.After(20 * time.Millisecond):
			if !p.up.Load() {
				return
			}
		}
	}
}

const guardNode = "guard-node"

// Guard mode against a real control plane (the cached v1.37.2 binaries):
// the pods' figures from the API server, a PodDisruptionBudget's refusal
// of a soft eviction counted and never bypassed, and a hard eviction that
// releases the victim's memory while the API server is unreachable and
// removes the pod through it once it is back.
func TestGuardWithAPIServer(t *testing.T) {
	cgtest.RequirePrivileged(t)
	bin := os.Getenv("NODEGUARD_CP_BIN")
	if bin == "" {
		t.Fatal("NODEGUARD_CP_BIN is not set: the directory scripts/controlplane.sh prints (make test-cluster sets it)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cp, err := cluster.Start(ctx, cluster.Options{Bin: bin, Dir: filepath.Join(t.TempDir(), "cp"), Progress: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	rc, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(rc)
	proxy := newSwitchProxy(t, strings.TrimPrefix(cp.Server, "https://"))
	grc := *rc
	grc.Host = "https://" + proxy.ln.Addr().String()
	grc.Timeout = 3 * time.Second
	guardCS := kubernetes.NewForConfigOrDie(&grc)

	// The node, so that the pod garbage collector keeps its pods; no
	// kubelet runs them: the runtime and cgroups here are the rig's.
	must(t, create(ctx, admin.CoreV1().Nodes(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: guardNode}}))
	must(t, create(ctx, admin.SchedulingV1().PriorityClasses(), &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000}))
	waitFor(t, ctx, time.Minute, "the default service account", func() bool {
		_, err := admin.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	})
	web := apiPod(t, ctx, admin, "web", "high", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}, nil)
	db := apiPod(t, ctx, admin, "db", "", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("100m")},
		corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi"), corev1.ResourceCPU: resource.MustParse("100m")})
	batch := apiPod(t, ctx, admin, "batch", "", nil, nil)

	r := newPodRig(t)
	_, webProc := r.pod(string(web.UID), "web", corev1.PodQOSBurstable, 1, false)
	dbCg, dbProc := r.pod(string(db.UID), "db", corev1.PodQOSGuaranteed, 64, false)
	r.pod(string(batch.UID), "batch", corev1.PodQOSBestEffort, 1, false)
	a := newActor(t, Config{Finder: r.finder, Client: guardCS, NodeName: guardNode, RetryInitial: 100 * time.Millisecond, RetryMax: time.Second})
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	t.Cleanup(func() {
		rcancel()
		<-done
	})
	if err := a.WaitAPI(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}

	t.Run("figures from the API server", func(t *testing.T) {
		got := map[string]evictionapi.Pod{}
		for _, ref := range a.Pods(false) {
			got[ref.Name] = ref.Pod
		}
		if p := got["web"]; p.QOS != corev1.PodQOSBurstable || p.Priority != 1000 || p.MemoryRequest != 64<<20 {
			t.Errorf("web: QoS %s, priority %d, memory request %d; want Burstable, 1000 (its class), 64Mi", p.QOS, p.Priority, p.MemoryRequest)
		}
		if p := got["db"]; p.QOS != corev1.PodQOSGuaranteed || p.MemoryRequest != 128<<20 || p.Priority != 0 {
			t.Errorf("db: QoS %s, priority %d, memory request %d; want Guaranteed, 0, 128Mi", p.QOS, p.Priority, p.MemoryRequest)
		}
		if p := got["batch"]; p.QOS != corev1.PodQOSBestEffort || p.MemoryRequest != 0 {
			t.Errorf("batch: QoS %s, memory request %d; want BestEffort, 0", p.QOS, p.MemoryRequest)
		}
		t.Logf("guard mode with the API server: %d pods, web priority %d request %d, db request %d", len(got), got["web"].Priority, got["web"].MemoryRequest, got["db"].MemoryRequest)
	})

	t.Run("a PodDisruptionBudget refuses a soft eviction: counted, never bypassed", func(t *testing.T) {
		one := intstr.FromInt32(1)
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
		// Running and Ready, as its kubelet would say: the Eviction API
		// lets a Pending pod go whatever its budget says.
		p, err := admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		must(t, err)
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		_, err = admin.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
		must(t, err)
		must(t, create(ctx, admin.PolicyV1().PodDisruptionBudgets("default"), pdb))
		// The disruption controller's status first: until it has one,
		// the Eviction API refuses anyway, for another reason.
		waitFor(t, ctx, time.Minute, "the budget's status", func() bool {
			p, err := admin.PolicyV1().PodDisruptionBudgets("default").Get(ctx, "web", metav1.GetOptions{})
			return err == nil && p.Status.ObservedGeneration >= p.Generation && p.Status.CurrentHealthy == 1
		})
		err = a.Evict(ctx, decision(string(web.UID), "web", false))
		if !errors.Is(err, ErrDisruptionBudget) || !errors.Is(err, evictionapi.ErrEvictionRefused) {
			t.Fatalf("soft eviction of web: %v, want ErrDisruptionBudget", err)
		}
		// Asked again at once: the back-off answers, not the API server.
		err = a.Evict(ctx, decision(string(web.UID), "web", false))
		if !errors.Is(err, evictionapi.ErrEvictionRefused) {
			t.Errorf("second soft eviction of web: %v, want refused", err)
		}
		if c := a.Counts(); c.Refused != 1 || c.Evictions != 0 {
			t.Errorf("counts %+v, want one refusal (the second ask held back by the back-off), no eviction", c)
		}
		p, err = admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil {
			t.Errorf("web after the refusal: %v, deleted %v; want it there, not deleted", err, p.DeletionTimestamp)
		}
		if !processExists(webProc.Process.Pid) {
			t.Error("web's process was killed")
		}
		if got := podNames(a.Pods(false)); !strings.Contains(got, "web") {
			t.Errorf("pods %q: web is still the guard's to evict later", got)
		}
		t.Logf("PDB refusal counted; counts %+v", a.Counts())
	})

	t.Run("under soft pressure the eviction manager asks, the budget refuses, the pod stays", func(t *testing.T) {
		// An actor of its own, listing web alone: the one pod the
		// manager can choose.
		list := &sandboxList{sbs: r.list.sbs[:1]}
		fa := newActor(t, Config{Finder: &Finder{Runtime: list, Layout: r.finder.Layout, Driver: r.finder.Driver, Root: r.finder.Root},
			Client: guardCS, NodeName: guardNode, RetryInitial: 200 * time.Millisecond, RetryMax: time.Second})
		mctx, mcancel := context.WithTimeout(ctx, 4*time.Second)
		defer mcancel()
		go fa.Run(mctx)
		if err := fa.WaitAPI(mctx, time.Minute); err != nil {
			t.Fatal(err)
		}
		th, err := eviction.ParseThresholds(eviction.ThresholdConfig{EvictionHard: map[string]string{},
			EvictionSoft: map[string]string{"memory.available": "1Gi"}, EvictionSoftGracePeriod: map[string]string{"memory.available": "1s"}})
		must(t, err)
		calls := &countingActor{Actor: fa}
		snap := func(context.Context) (*pressure.Snapshot, error) {
			now := time.Now()
			return &pressure.Snapshot{Time: now, Signals: []nodestats.Observation{
				{Signal: nodestats.SignalMemoryAvailable, Available: 100 << 20, Capacity: 8 << 30, Time: now}}}, nil
		}
		m, err := eviction.NewManager(eviction.ManagerConfig{Policy: eviction.PolicyConfig{Thresholds: th}, Actor: calls, Snapshot: snap,
			Tick: 100 * time.Millisecond})
		must(t, err)
		m.Run(mctx)
		c := fa.Counts()
		if calls.n.Load() == 0 || c.Refused == 0 || c.Evictions != 0 {
			t.Fatalf("%d evictions asked, counts %+v: want web chosen, refused, counted, not evicted", calls.n.Load(), c)
		}
		// While its back-off runs the pod is Refused, and the manager
		// does not ask again: each ask reached the API server.
		if n := calls.n.Load(); n > int64(c.Refused)+1 {
			t.Errorf("the manager asked %d times for %d refusals: asked again while the back-off ran", n, c.Refused)
		}
		p, err := admin.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil || p.DeletionTimestamp != nil || !processExists(webProc.Process.Pid) {
			t.Errorf("web after 4 s of soft pressure: %v, deleted %v, process alive %v; want it untouched", err, p.DeletionTimestamp, processExists(webProc.Process.Pid))
		}
		t.Logf("4 s of soft pressure (memory.available 100Mi < 1Gi): the manager asked %d times, the Eviction API refused %d (the pod Refused between), web untouched",
			calls.n.Load(), c.Refused)
	})

	t.Run("a soft eviction without a budget goes through the Eviction API", func(t *testing.T) {
		if err := a.Evict(ctx, decision(string(batch.UID), "batch", false)); err != nil {
			t.Fatalf("soft eviction of batch: %v", err)
		}
		p, err := admin.CoreV1().Pods("default").Get(ctx, "batch", metav1.GetOptions{})
		if err == nil && p.DeletionTimestamp == nil {
			t.Error("batch is neither deleted nor being deleted after its eviction")
		}
		if c := a.Counts(); c.Evictions != 1 {
			t.Errorf("counts %+v, want one eviction", c)
		}
	})

	t.Run("a hard eviction releases memory with the API server unreachable, and removes the pod once it is back", func(t *testing.T) {
		w, err := admin.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=db", ResourceVersion: db.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		proxy.up.Store(false)
		before := memoryCurrent(t, dbCg)
		start := time.Now()
		if err := a.Evict(ctx, decision(string(db.UID), "db", true)); err != nil {
			t.Fatalf("hard eviction of db: %v", err)
		}
		returned := time.Since(start)
		dbProc.Wait()
		var released time.Duration
		for time.Since(start) < 10*time.Second {
			if memoryCurrent(t, dbCg) < before/4 {
				released = time.Since(start)
				break
			}
			time.Sleep(time.Millisecond)
		}
		if released == 0 {
			t.Fatalf("db's cgroup still holds %d of %d bytes 10 s after the kill", memoryCurrent(t, dbCg), before)
		}
		waitFor(t, ctx, 20*time.Second, "the API call to fail", func() bool { return a.Counts().APIErrors > 0 })
		if c := a.Counts(); c.Pending != 1 || c.Deletes != 0 {
			t.Fatalf("counts %+v while the API server is unreachable: want the removal pending", c)
		}
		t.Logf("API server unreachable: Evict returned after %v, %d MiB released after %v; the removal pending, %d failed calls",
			returned, before>>20, released, a.Counts().APIErrors)
		proxy.up.Store(true)
		back := time.Now()
		var evicted, deleted bool
		deadline := time.After(30 * time.Second)
		for !deleted {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatal("the watch ended")
				}
				p, _ := ev.Object.(*corev1.Pod)
				switch {
				case ev.Type == watch.Modified && p != nil && p.Status.Phase == corev1.PodFailed && p.Status.Reason == "Evicted":
					evicted = true
				case ev.Type == watch.Deleted:
					deleted = true
				}
			case <-deadline:
				t.Fatalf("db not removed 30 s after the API server came back (evicted status seen: %v); counts %+v", evicted, a.Counts())
			}
		}
		if !evicted {
			t.Error("db was deleted without the kubelet's Evicted status first")
		}
		waitFor(t, ctx, 5*time.Second, "the removal to be counted", func() bool { return a.Counts().Pending == 0 })
		if c := a.Counts(); c.Deletes != 1 {
			t.Errorf("counts %+v, want one delete", c)
		}
		if _, err := admin.CoreV1().Pods("default").Get(ctx, "db", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("db after its removal: %v, want not found", err)
		}
		t.Logf("API server back: db's Evicted status and delete %v later; counts %+v", time.Since(back), a.Counts())
	})
}

// countingActor counts the manager's Evict calls.
type countingActor struct {
	*Actor
	n atomic.Int64
}

func (c *countingActor) Evict(ctx context.Context, d evictionapi.Decision) error {
	c.n.Add(1)
	return c.Actor.Evict(ctx, d)
}

func apiPod(t *testing.T, ctx context.Context, cs kubernetes.Interface, name, class string, req, lim corev1.ResourceList) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: guardNode, PriorityClassName: class, Containers: []corev1.Container{{Name: "c", Image: "pause",
			Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}}}
	got, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

type creator[T any] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
}

func create[T any](ctx context.Context, c creator[T], obj T) error {
	_, err := c.Create(ctx, obj, metav1.CreateOptions{})
	return err
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, ctx context.Context, bound time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !ok() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("waited %v for %s", bound, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
