package lifecycle_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/filesource"
	"github.com/nodeguard/nodeguard/mounts"
)

// versionedPod is a small API pod whose VERSION changes its spec, and so
// its UID.
const versionedPod = `
apiVersion: v1
kind: Pod
metadata: {name: NAME}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: BUSYBOX
    env: [{name: VERSION, value: "VALUE"}]
    command: [sh, -c, "exec sleep 3600"]
`

func (r *rig) versioned(t *testing.T, name, version string) []*corev1.Pod {
	t.Helper()
	return r.pods(t, strings.NewReplacer("NAME", name, "VALUE", version).Replace(versionedPod))
}

func apply(t *testing.T, m *lifecycle.Manager, pods []*corev1.Pod, source string) *corev1.Pod {
	t.Helper()
	out, err := m.Apply(context.Background(), pods, source)
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}

// apiRecords are the keys of the API pod records in r's state store.
func (r *rig) apiRecords(t *testing.T) []string {
	t.Helper()
	keys, err := r.state.Keys(lifecycle.KindAPIPod)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// podRuntime is what the runtime holds of the pod uid: its sandbox IDs
// that are ready, and its running containers' IDs.
func (r *rig) podRuntime(t *testing.T, uid types.UID) (ready, running []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sbs, err := r.client.ListPodSandbox(ctx, map[string]string{cri.PodUIDLabel: string(uid)})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range sbs {
		if sb.State == runtimeapi.PodSandboxState_SANDBOX_READY {
			ready = append(ready, sb.Id)
		}
		ctrs, err := r.client.ListContainers(ctx, sb.Id, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range ctrs {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
				running = append(running, c.Id)
			}
		}
	}
	slices.Sort(ready)
	slices.Sort(running)
	return ready, running
}

// waitRuntime waits until pred holds for the pod uid's runtime state.
func (r *rig) waitRuntime(t *testing.T, uid types.UID, what string, pred func(ready, running []string) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ready, running := r.podRuntime(t, uid)
		if pred(ready, running) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s never %s: sandboxes ready %v, containers running %v", uid, what, ready, running)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestRestartKeepsOneRecordPerAPIPodName(t *testing.T) {
	r := newRig(t)
	m, stop := r.manager(t)

	t.Run("applied, applied again and deleted, a pod stays deleted after a restart", func(t *testing.T) {
		apply(t, m, r.versioned(t, "gone", "1"), lifecycle.SourceAPI)
		waitPod(t, m, "gone", "ran", running)
		v2 := apply(t, m, r.versioned(t, "gone", "2"), lifecycle.SourceAPI)
		waitPod(t, m, "gone", "ran its second version", func(p *corev1.Pod) bool { return p.UID == v2.UID && running(p) })
		if err := m.Delete(context.Background(), "default", "gone"); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m, "gone")
		if keys := r.apiRecords(t); len(keys) != 0 {
			t.Fatalf("records after the delete: %v, want none", keys)
		}
	})
	t.Run("three applies of one name leave one record, the newest's", func(t *testing.T) {
		var last *corev1.Pod
		for _, v := range []string{"1", "2", "3"} {
			last = apply(t, m, r.versioned(t, "kept", v), lifecycle.SourceAPI)
		}
		waitPod(t, m, "kept", "ran its third version", func(p *corev1.Pod) bool { return p.UID == last.UID && running(p) })
		if keys := r.apiRecords(t); !slices.Equal(keys, []string{"default/kept"}) {
			t.Fatalf("records %v, want [default/kept]", keys)
		}
		stop()
		m2, _ := r.manager(t)
		if _, ok := m2.Get("default", "gone"); ok {
			t.Error("the deleted pod came back after the restart")
		}
		if keys := r.apiRecords(t); !slices.Equal(keys, []string{"default/kept"}) {
			t.Errorf("records after the restart %v, want [default/kept]", keys)
		}
		p := waitPod(t, m2, "kept", "ran after the restart", running)
		if p.UID != last.UID {
			t.Errorf("after the restart the pod is %s, want the newest, %s", p.UID, last.UID)
		}
		if n := len(m2.List()); n != 1 {
			t.Errorf("%d pods after the restart, want 1", n)
		}
	})
}

func TestRestartRejectsAPodThatNoLongerFits(t *testing.T) {
	r := newRig(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	r.nodeLabels = lifecycle.StandaloneNodeLabels(host)
	r.nodeLabels["disk"] = "ssd"
	m, stop := r.manager(t)
	picky := r.versioned(t, "picky", "1")
	picky[0].Spec.NodeSelector = map[string]string{"disk": "ssd"}
	pp := apply(t, m, picky, lifecycle.SourceAPI)
	other := apply(t, m, r.versioned(t, "other", "1"), lifecycle.SourceAPI)
	waitPod(t, m, "picky", "ran", running)
	waitPod(t, m, "other", "ran", running)
	_, otherCtrs := r.podRuntime(t, other.UID)
	stop()

	// The node loses its label; nodeguard restarts.
	delete(r.nodeLabels, "disk")
	events := api.NewEventLog(0)
	r.events = events
	m2, _ := r.manager(t) // fails the test if New fails

	p := waitPod(t, m2, "picky", "listed Failed", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodFailed })
	if p.Status.Reason != lifecycle.ReasonNodeAffinity || !strings.HasPrefix(p.Status.Message, lifecycle.MessageNodeAffinity) {
		t.Errorf("status reason %q message %q, want %s, %q...", p.Status.Reason, p.Status.Message, lifecycle.ReasonNodeAffinity, lifecycle.MessageNodeAffinity)
	}
	found := false
	for _, e := range podEvents(t, events, "picky") {
		found = found || (e.Type == corev1.EventTypeWarning && e.Reason == lifecycle.ReasonNodeAffinity && e.UID == pp.UID)
	}
	if !found {
		t.Errorf("no Warning NodeAffinity event for the rejected pod: %+v", podEvents(t, events, "picky"))
	}
	r.waitRuntime(t, pp.UID, "had its containers stopped", func(_, running []string) bool { return len(running) == 0 })
	waitPod(t, m2, "other", "ran after the restart", running)
	if _, ctrs := r.podRuntime(t, other.UID); !slices.Equal(ctrs, otherCtrs) {
		t.Errorf("the other pod's running containers %v, before the restart %v: it was restarted", ctrs, otherCtrs)
	}
	if keys := r.apiRecords(t); !slices.Equal(keys, []string{"default/other", "default/picky"}) {
		t.Errorf("records %v: the rejected pod's must be kept", keys)
	}
}

// tornPod writes to its emptyDir, then sleeps.
const tornPod = `
apiVersion: v1
kind: Pod
metadata: {name: static}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: BUSYBOX
    command: [sh, -c, "echo kept > /data/f; exec sleep 3600"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - {name: data, emptyDir: {}}
`

func TestRestartWithATornManifestKeepsItsPod(t *testing.T) {
	r := newRig(t)
	r.deferReady = true
	dir := t.TempDir()
	file := filepath.Join(dir, "static.yaml")
	manifest := []byte(strings.ReplaceAll(tornPod, "BUSYBOX", r.env.BusyboxImage()))
	if err := os.WriteFile(file, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	m, stop := r.manager(t)
	if err := filesource.New(filesource.Config{Dir: dir, Pods: m}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.SourcesReady()
	p := waitPod(t, m, "static", "ran", running)
	data := filepath.Join(r.volumes(t).VolumeDir(p.UID, mounts.PluginEmptyDir, "data"), "f")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, _ := os.ReadFile(data); string(b) == "kept\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container never wrote %s", data)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sandboxes, ctrs := r.podRuntime(t, p.UID)
	stop()

	// A crash tore the manifest while nodeguard was down: it ends
	// inside its last flow mapping.
	torn := manifest[:strings.LastIndex(string(manifest), "{}")+1]
	if err := os.WriteFile(file, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	events := api.NewEventLog(0)
	r.events = events
	m2, _ := r.manager(t)
	if err := filesource.New(filesource.Config{Dir: dir, Pods: m2}).Sync(context.Background()); err == nil {
		t.Fatal("the torn manifest loaded")
	}
	m2.SourcesReady()
	// The orphan scan finds the pod's sandbox and keeps it, saying why.
	deadline = time.Now().Add(30 * time.Second)
	for len(podEvents(t, events, "static")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no event says why the torn manifest's pod is kept")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if e := podEvents(t, events, "static")[0]; e.Reason != lifecycle.ReasonSourceUnavailable || !strings.Contains(e.Message, file) {
		t.Errorf("event %+v, want reason %s naming %s", e, lifecycle.ReasonSourceUnavailable, file)
	}
	// It runs as last accepted (the static-pods record): listed, managed.
	waitPod(t, m2, "static", "ran as last accepted with its manifest torn", running)
	m2.GC(context.Background()) // volumes are not collected either
	if s, c := r.podRuntime(t, p.UID); !slices.Equal(s, sandboxes) || !slices.Equal(c, ctrs) {
		t.Errorf("after the restart sandboxes %v and containers %v run, before it %v and %v", s, c, sandboxes, ctrs)
	}
	if b, err := os.ReadFile(data); string(b) != "kept\n" {
		t.Errorf("the emptyDir's file after the restart: %q, %v", b, err)
	}

	// Mended, the file's pod is adopted: the same sandbox and container.
	if err := os.WriteFile(file, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := filesource.New(filesource.Config{Dir: dir, Pods: m2}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m2, "static", "ran after the file was mended", running)
	if s, c := r.podRuntime(t, p.UID); !slices.Equal(s, sandboxes) || !slices.Equal(c, ctrs) {
		t.Errorf("after the mend sandboxes %v and containers %v run, before %v and %v", s, c, sandboxes, ctrs)
	}

	// Removed, the file's pod goes, and so does its record.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := filesource.New(filesource.Config{Dir: dir, Pods: m2}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m2, "static")
	recs, _ := filepath.Glob(filepath.Join(r.root, lifecycle.DefaultStateSubdir, lifecycle.KindStaticPods.Name, "*.rec"))
	if len(recs) != 0 {
		t.Errorf("static pods records left after the file was removed: %v", recs)
	}
}

func TestRestartWithATornManifestAndNoRecordKeepsItsSandbox(t *testing.T) {
	r := newRig(t)
	r.deferReady = true
	dir := t.TempDir()
	file := filepath.Join(dir, "static.yaml")
	manifest := []byte(strings.ReplaceAll(tornPod, "BUSYBOX", r.env.BusyboxImage()))
	if err := os.WriteFile(file, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	m, stop := r.manager(t)
	if err := filesource.New(filesource.Config{Dir: dir, Pods: m}).Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	m.SourcesReady()
	p := waitPod(t, m, "static", "ran", running)
	sandboxes, ctrs := r.podRuntime(t, p.UID)
	stop()
	// An older agent kept no record of the file's pods.
	if err := os.RemoveAll(filepath.Join(r.root, lifecycle.DefaultStateSubdir, lifecycle.KindStaticPods.Name)); err != nil {
		t.Fatal(err)
	}
	torn := manifest[:strings.LastIndex(string(manifest), "{}")+1]
	if err := os.WriteFile(file, torn, 0o600); err != nil {
		t.Fatal(err)
	}
	events := api.NewEventLog(0)
	r.events = events
	m2, _ := r.manager(t)
	if err := filesource.New(filesource.Config{Dir: dir, Pods: m2}).Sync(context.Background()); err == nil {
		t.Fatal("the torn manifest loaded")
	}
	m2.SourcesReady()
	// The orphan scan finds the pod's sandbox and keeps it, saying why.
	deadline := time.Now().Add(30 * time.Second)
	for len(podEvents(t, events, "static")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no event says why the torn manifest's pod is kept")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if e := podEvents(t, events, "static")[0]; e.Reason != lifecycle.ReasonSourceUnavailable || !strings.Contains(e.Message, file) {
		t.Errorf("event %+v, want reason %s naming %s", e, lifecycle.ReasonSourceUnavailable, file)
	}
	m2.GC(context.Background())
	if s, c := r.podRuntime(t, p.UID); !slices.Equal(s, sandboxes) || !slices.Equal(c, ctrs) {
		t.Errorf("after the restart sandboxes %v and containers %v run, before it %v and %v", s, c, sandboxes, ctrs)
	}
}

func TestRestartWithACorruptEvictionRecordKeepsThePodStopped(t *testing.T) {
	r := newRig(t)
	m, stop := r.manager(t)
	p := apply(t, m, r.versioned(t, "victim", "1"), lifecycle.SourceAPI)
	waitPod(t, m, "victim", "ran", running)
	stop()
	// The eviction's record, torn: written by a crash mid-write of a
	// store that did not write atomically.
	evDir := filepath.Join(r.root, lifecycle.DefaultStateSubdir, lifecycle.KindEviction.Name)
	if err := os.MkdirAll(evDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(evDir, string(p.UID)+".rec"), []byte(`{"format":1,"kind":"evic`), 0o600); err != nil {
		t.Fatal(err)
	}

	m2, _ := r.manager(t)
	got, ok := m2.Get("default", "victim")
	if !ok || got.Status.Phase != corev1.PodFailed || got.Status.Reason != lifecycle.ReasonEvicted {
		t.Fatalf("after the restart the pod is %v %+v, want Failed, Evicted", ok, got.Status)
	}
	if n := r.state.Quarantined(lifecycle.KindEviction.Name); n != 1 {
		t.Errorf("%d eviction records quarantined, want 1", n)
	}
	r.waitRuntime(t, p.UID, "was stopped", func(ready, running []string) bool { return len(ready)+len(running) == 0 })
	// The record says so again, readable: the next start keeps it
	// stopped too.
	if _, ok, err := r.state.Get(lifecycle.KindEviction, string(p.UID)); !ok || err != nil {
		t.Errorf("no readable eviction record after the restart: %v %v", ok, err)
	}
	if got, _ := m2.Get("default", "victim"); got.Status.Phase != corev1.PodFailed {
		t.Errorf("the pod is %s after its teardown, want Failed", got.Status.Phase)
	}
}

// TestRestartMigratesTheOlderAgentsFiles starts a Manager on the files
// an older nodeguard left: three generations of one API pod, a file of
// `null`, an eviction file and a torn one.
func TestRestartMigratesTheOlderAgentsFiles(t *testing.T) {
	r := newRig(t)
	podsDir := filepath.Join(r.root, "api-pods")
	evDir := filepath.Join(r.root, "evicted")
	for _, d := range []string{podsDir, evDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	gens := []struct {
		uid     types.UID
		created time.Time
		version string
	}{
		{"uid-c", base, "1"},
		{"uid-a", base.Add(time.Minute), "2"}, // newest; ties with uid-b's time,
		{"uid-b", base.Add(time.Minute), "3"}, // and uid-b is larger: it wins
	}
	for _, g := range gens {
		p := r.versioned(t, "web", g.version)[0]
		p.UID, p.Namespace = g.uid, "default"
		p.CreationTimestamp.Time = g.created
		writeJSON(t, filepath.Join(podsDir, string(g.uid)+".json"), p)
	}
	if err := os.WriteFile(filepath.Join(podsDir, "uid-null.json"), []byte("null"), 0o600); err != nil {
		t.Fatal(err)
	}
	ended := r.versioned(t, "ended", "1")[0]
	ended.UID, ended.Namespace = "uid-ended", "default"
	writeJSON(t, filepath.Join(podsDir, "uid-ended.json"), ended)
	if err := os.WriteFile(filepath.Join(evDir, "uid-ended.json"), []byte(`{"message":"The node was low on resource: memory.","grace":0,"at":"2025-01-02T03:04:05Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(evDir, "uid-torn.json"), []byte(`{"mess`), 0o600); err != nil {
		t.Fatal(err)
	}

	m, _ := r.manager(t)
	if keys := r.apiRecords(t); !slices.Equal(keys, []string{"default/ended", "default/web"}) {
		t.Errorf("records %v, want default/ended and default/web", keys)
	}
	if p := waitPod(t, m, "web", "ran", running); p.UID != "uid-b" {
		t.Errorf("the migrated pod is %s, want uid-b (the newest, then the largest UID)", p.UID)
	}
	if p, ok := m.Get("default", "ended"); !ok || p.Status.Phase != corev1.PodFailed || p.Status.Reason != lifecycle.ReasonEvicted {
		t.Errorf("the evicted pod after the migration: %v %+v, want Failed, Evicted", ok, p)
	}
	for _, k := range []string{"uid-ended", "uid-torn"} {
		if _, ok, err := r.state.Get(lifecycle.KindEviction, k); !ok || err != nil {
			t.Errorf("eviction record %s: %v %v, want one (a torn file still ends its pod)", k, ok, err)
		}
	}
	for kind, want := range map[string]int{lifecycle.KindAPIPod.Name: 1, lifecycle.KindEviction.Name: 1} {
		if n := r.state.Quarantined(kind); n != want {
			t.Errorf("%d %s files quarantined, want %d", n, kind, want)
		}
	}
	for _, d := range []string{podsDir, evDir} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s is left after the migration (%v)", d, err)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(r.root, lifecycle.DefaultStateSubdir, statestore.QuarantineDir, lifecycle.KindAPIPod.Name)); len(entries) != 1 {
		t.Errorf("%d files in the API pods' quarantine, want the null one", len(entries))
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestRestartWithACorruptAPIPodRecordKeepsItsPodAtEveryStart(t *testing.T) {
	r := newRig(t)
	m, stop := r.manager(t)
	p := apply(t, m, r.versioned(t, "web", "1"), lifecycle.SourceAPI)
	waitPod(t, m, "web", "ran", running)
	sandboxes, ctrs := r.podRuntime(t, p.UID)
	stop()
	// A bit flipped in the record's payload: its checksum fails.
	path := filepath.Join(r.root, lifecycle.DefaultStateSubdir, lifecycle.KindAPIPod.Name, "default%2Fweb.rec")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), `"VERSION"`)
	if i < 0 {
		t.Fatalf("record without the pod's env: %s", b)
	}
	b[i+1] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Two starts: the first quarantines the record and writes a
	// stand-in, the second reads the stand-in. Neither takes the
	// pod's sandbox for an orphan.
	for start := 1; start <= 2; start++ {
		events := api.NewEventLog(0)
		r.events = events
		m2, stop2 := r.manager(t)
		deadline := time.Now().Add(30 * time.Second)
		for len(podEvents(t, events, "web")) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("start %d: no event says why the pod of the unreadable record is kept", start)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if e := podEvents(t, events, "web")[0]; e.Reason != lifecycle.ReasonSourceUnavailable {
			t.Errorf("start %d: event %+v, want reason %s", start, e, lifecycle.ReasonSourceUnavailable)
		}
		m2.GC(context.Background())
		if s, c := r.podRuntime(t, p.UID); !slices.Equal(s, sandboxes) || !slices.Equal(c, ctrs) {
			t.Fatalf("start %d: sandboxes %v and containers %v run, before %v and %v", start, s, c, sandboxes, ctrs)
		}
		if n := r.state.Quarantined(lifecycle.KindAPIPod.Name); start == 1 && n != 1 {
			t.Errorf("start 1: %d records quarantined, want 1", n)
		}
		if start == 2 {
			// Deleting the name removes the stand-in, and the pod's
			// sandbox is an orphan then.
			if err := m2.Delete(context.Background(), "default", "web"); err != nil {
				t.Fatal(err)
			}
			if keys := r.apiRecords(t); len(keys) != 0 {
				t.Errorf("records after the delete: %v", keys)
			}
			r.waitRuntime(t, p.UID, "was removed", func(ready, running []string) bool { return len(ready)+len(running) == 0 })
		}
		stop2()
	}
}
