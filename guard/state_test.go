package guard

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/oomadj"
)

func openStore(t *testing.T, dir string) *statestore.Store {
	t.Helper()
	s, err := statestore.Open(dir, statestore.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func removalRecords(t *testing.T, s *statestore.Store) map[string]removalRecord {
	t.Helper()
	es, err := statestore.ListOf[removalRecord](s, KindRemoval)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]removalRecord{}
	for _, e := range es {
		out[e.Key] = e.Value
	}
	return out
}

// runActor runs a until the test ends or stop is called (the agent's
// crash: nothing of a is used again).
func runActor(t *testing.T, a *Actor) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond every 20 ms for at most 10 s.
func waitState(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func stateAPIPod(uid, name string, req corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{NodeName: "node", Containers: []corev1.Container{{Name: "app",
			Resources: corev1.ResourceRequirements{Requests: req}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// A hard eviction made while the API server is unreachable leaves its
// removal pending; the agent dies. The next one, on the same store,
// resumes it: the killed sandbox stays hidden (the hold), and once it has
// an API server the pod is marked Evicted and deleted. The record goes
// once the removal is made and the pod's sandbox is gone.
func TestAPendingRemovalSurvivesTheAgent(t *testing.T) {
	r := newPodRig(t)
	_, hog := r.pod(uidHog, "hog", corev1.PodQOSBurstable, 8, false)
	r.pod(uidOther, "other", corev1.PodQOSBestEffort, 1, false)
	dir := filepath.Join(t.TempDir(), "state")

	dead := newActor(t, Config{Finder: r.finder, NodeName: "node", Client: unreachableClient(t),
		State: openStore(t, dir), RetryInitial: 50 * time.Millisecond})
	stop := runActor(t, dead)
	if err := dead.Evict(context.Background(), decision(uidHog, "hog", true)); err != nil {
		t.Fatalf("hard eviction: %v", err)
	}
	hog.Wait()
	waitState(t, "the removal's API call failed", func() bool { return dead.Counts().APIErrors >= 1 })
	stop() // the agent dies with the removal pending

	store := openStore(t, dir)
	recs := removalRecords(t, store)
	if rec, ok := recs[uidHog]; !ok || !rec.Pending || rec.Sandbox != "sb-hog" || rec.Name != "hog" || len(recs) != 1 {
		t.Fatalf("records the dead agent left %+v, want the hog's removal pending, killed in sb-hog", recs)
	}

	t.Run("without an API server the removal is kept", func(t *testing.T) {
		a := newActor(t, Config{Finder: r.finder, NodeName: "node", State: store})
		runActor(t, a)
		if c := a.Counts(); c.Pending != 1 {
			t.Errorf("counts %+v, want the removal pending", c)
		}
		if got := podNames(a.Pods(false)); got != "other" {
			t.Errorf("pods %q, want other: the hog's killed sandbox held", got)
		}
		if err := a.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		if rec := removalRecords(t, store)[uidHog]; !rec.Pending {
			t.Errorf("the hog's record %+v, want it kept, pending", rec)
		}
	})

	cs := fake.NewClientset(stateAPIPod(uidHog, "hog", nil), stateAPIPod(uidOther, "other", nil))
	a := newActor(t, Config{Finder: r.finder, NodeName: "node", Client: cs, State: store, RetryInitial: 50 * time.Millisecond})
	if c := a.Counts(); c.Pending != 1 {
		t.Errorf("counts of the new agent %+v, want the removal resumed", c)
	}
	if got := podNames(a.Pods(false)); got != "other" {
		t.Errorf("pods of the new agent %q, want other: the hog's killed sandbox held", got)
	}
	runActor(t, a)
	waitState(t, "the hog deleted through the API server", func() bool {
		_, err := cs.CoreV1().Pods("default").Get(context.Background(), "hog", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	var patched bool
	for _, act := range cs.Actions() {
		if p, ok := act.(k8stesting.PatchAction); ok && p.GetSubresource() == "status" && p.GetName() == "hog" &&
			bytes.Contains(p.GetPatch(), []byte(`"reason":"Evicted"`)) {
			patched = true
		}
	}
	if !patched {
		t.Error("the hog was deleted without its Evicted status")
	}
	waitState(t, "the removal done", func() bool { return a.Counts().Pending == 0 })
	if c := a.Counts(); c.Deletes != 1 {
		t.Errorf("counts %+v, want one delete", c)
	}
	if _, err := cs.CoreV1().Pods("default").Get(context.Background(), "other", metav1.GetOptions{}); err != nil {
		t.Errorf("the other pod: %v, want it untouched", err)
	}
	// The record is rewritten after the removal leaves the actor's
	// memory (outside its lock): waited for, not read once.
	waitState(t, "the hog's record reduced to the hold", func() bool {
		rec, ok := removalRecords(t, store)[uidHog]
		return ok && !rec.Pending
	})
	// The kubelet tears the deleted pod down: its sandbox goes, and so
	// does the record.
	r.list.update(func(sbs []*runtimeapi.PodSandbox) []*runtimeapi.PodSandbox {
		return slices.DeleteFunc(sbs, func(sb *runtimeapi.PodSandbox) bool { return sb.Id == "sb-hog" })
	})
	if err := a.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if recs := removalRecords(t, store); len(recs) != 0 {
		t.Errorf("records once the hog is gone %+v, want none", recs)
	}
}

// Guard mode's oom_score_adj raise survives the agent: the next one's
// RepairOOMScoreAdj gives the kubelet's value back; a record that cannot
// be read gets the kubelet's value for the pod from its API object on the
// processes that still have the raised one.
func TestOOMScoreAdjRepairedAfterTheAgent(t *testing.T) {
	t.Run("a readable record: the value the process had", func(t *testing.T) {
		r := newPodRig(t)
		_, p := r.pod(uidHog, "web", corev1.PodQOSBurstable, 1, false)
		if err := oomadj.Write(p.Process.Pid, 937); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "state")
		dead := newActor(t, Config{Finder: r.finder, State: openStore(t, dir)})
		if err := dead.SetOOMScoreAdj(uidHog, 1000); err != nil {
			t.Fatal(err)
		}
		a := newActor(t, Config{Finder: r.finder, State: openStore(t, dir)})
		got, err := a.RepairOOMScoreAdj()
		if err != nil || got.Pods != 1 || got.Restored != 1 {
			t.Errorf("repair: %+v, %v; want the pod's process restored", got, err)
		}
		if v, _ := oomadj.Read(p.Process.Pid); v != 937 {
			t.Errorf("repaired to %d, want the kubelet's 937", v)
		}
	})
	t.Run("a torn record: the kubelet's value from the API", func(t *testing.T) {
		r := newPodRig(t)
		_, p := r.pod(uidHog, "web", corev1.PodQOSBurstable, 1, false)
		if err := oomadj.Write(p.Process.Pid, 1000); err != nil { // raised by the agent that died
			t.Fatal(err)
		}
		store := openStore(t, filepath.Join(t.TempDir(), "state"))
		path := filepath.Join(store.Dir(), oomadj.RecordKind.Name, uidHog+".rec")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(`{"format":1,"kind":"oom-`), 0o600); err != nil {
			t.Fatal(err)
		}
		// A request of half the node: the kubelet's 1000 - 1000/2.
		const capacity = 1 << 30
		cs := fake.NewClientset(stateAPIPod(uidHog, "web", corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(capacity/2, resource.BinarySI)}))
		a := newActor(t, Config{Finder: r.finder, NodeName: "node", Client: cs, State: store, MemoryCapacity: capacity})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := a.WaitAPI(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		got, err := a.RepairOOMScoreAdj()
		if err != nil || !slices.Equal(got.Lost, []types.UID{uidHog}) {
			t.Errorf("repair: %+v, %v; want the pod lost", got, err)
		}
		if v, _ := oomadj.Read(p.Process.Pid); v != 500 {
			t.Errorf("the lost pod's process at %d, want the kubelet's 500", v)
		}
		if n := store.Quarantined(oomadj.RecordKind.Name); n != 1 {
			t.Errorf("quarantined %d, want 1", n)
		}
	})
}

func TestRemovalRecordValidate(t *testing.T) {
	ok := removalRecord{Namespace: "default", Name: "hog", QOS: corev1.PodQOSBurstable, Cgroup: "kubepods/burstable/pod1",
		Sandbox: "sb", At: time.Unix(1700000000, 0), Pending: true, Message: "m"}
	for _, tt := range []struct {
		name string
		edit func(*removalRecord)
		ok   bool
	}{
		{"a record an eviction wrote", func(*removalRecord) {}, true},
		{"no name", func(r *removalRecord) { r.Name = "" }, false},
		{"a name with a slash", func(r *removalRecord) { r.Namespace = "a/b" }, false},
		{"no sandbox", func(r *removalRecord) { r.Sandbox = "" }, false},
		{"no time", func(r *removalRecord) { r.At = time.Time{} }, false},
		{"an unknown QoS class", func(r *removalRecord) { r.QOS = "Gold" }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			tt.edit(&r)
			if err := r.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// FuzzRemovalRecord drives what resume does with a record's bytes: the
// envelope (statestore.Parse), the strict decode and Validate. A record
// that passes resumes a hold with a pod's name and a sandbox; anything
// else is ErrCorrupt or ErrUnsupported.
func FuzzRemovalRecord(f *testing.F) {
	dir := f.TempDir()
	store, err := statestore.Open(dir, statestore.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	rec := removalRecord{Namespace: "default", Name: "hog", QOS: corev1.PodQOSBurstable, Cgroup: "kubepods/burstable/pod" + uidHog,
		Sandbox: "sb-hog", At: time.Unix(1700000000, 0).UTC(), Pending: true, Message: "The node was low on resource: memory."}
	if err := store.Put(KindRemoval, uidHog, rec); err != nil {
		f.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, KindRemoval.Name, uidHog+".rec"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"format":1,"kind":"guard-removal","key":"` + uidHog + `","version":1,"crc32c":0,"data":{"namespace":"a"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := statestore.Parse(b, KindRemoval, uidHog)
		if err != nil {
			if !errors.Is(err, statestore.ErrCorrupt) && !errors.Is(err, statestore.ErrUnsupported) {
				t.Fatalf("Parse: %v, neither corrupt nor unsupported", err)
			}
			return
		}
		var rec removalRecord
		if statestore.Decode(r, &rec) != nil || rec.Validate() != nil {
			return
		}
		if rec.Namespace == "" || rec.Name == "" || rec.Sandbox == "" || rec.At.IsZero() {
			t.Fatalf("a valid record without a pod or a sandbox: %+v", rec)
		}
	})
}
