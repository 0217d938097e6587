package filesource

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// fakePods keeps desired pods as lifecycle.Manager does: defaulted (which
// derives the UID from the content and the source), annotated with their
// source, and dropped by Forget.
type fakePods struct {
	mu      sync.Mutex
	pods    map[types.UID]*corev1.Pod
	changed chan struct{} // a token after every Apply or Forget that changed something
	// unavailable: the sources told unavailable, with why.
	unavailable map[string]error
}

func newFakePods() *fakePods {
	return &fakePods{pods: map[types.UID]*corev1.Pod{}, changed: make(chan struct{}, 1)}
}

func (f *fakePods) Apply(_ context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*corev1.Pod
	changed := false
	for _, p := range pods {
		p = p.DeepCopy()
		podspec.Default(p, source)
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[lifecycle.AnnotationSource] = source
		if _, ok := f.pods[p.UID]; !ok {
			changed = true
		}
		f.pods[p.UID] = p
		out = append(out, p)
	}
	if changed {
		f.poke()
	}
	return out, nil
}

func (f *fakePods) List() []*corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Collect(maps.Values(f.pods))
}

func (f *fakePods) Forget(source string, keep map[types.UID]bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for uid, p := range f.pods {
		if p.Annotations[lifecycle.AnnotationSource] == source && !keep[uid] {
			delete(f.pods, uid)
			f.poke()
		}
	}
}

func (f *fakePods) SourceUnavailable(source string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unavailable == nil {
		f.unavailable = map[string]error{}
	}
	if err == nil {
		delete(f.unavailable, source)
		return
	}
	f.unavailable[source] = err
}

func (f *fakePods) poke() {
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// names are the desired pods' names, sorted, with their images.
func (f *fakePods) names() string {
	var out []string
	for _, p := range f.List() {
		out = append(out, p.Name+"="+p.Spec.Containers[0].Image)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// waitFor waits, bounded, until the desired pods are want.
func (f *fakePods) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for f.names() != want {
		select {
		case <-f.changed:
		case <-deadline:
			t.Fatalf("desired pods %q, want %q (not applied within 10 s, and the resync is an hour away)", f.names(), want)
		}
	}
}

func manifest(name, image string) string {
	return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + "}\nspec:\n  containers:\n  - {name: c, image: " + image + "}\n"
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestAChangeIsAppliedWithoutWaitingForTheResync(t *testing.T) {
	dir := t.TempDir()
	pods := newFakePods()
	// An hour: only the watch can apply what the test writes.
	src := New(Config{Dir: dir, Pods: pods, Resync: time.Hour, Log: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	t.Run("a new file is applied", func(t *testing.T) {
		write(t, filepath.Join(dir, "web.yaml"), manifest("web", "nginx:1"))
		pods.waitFor(t, "web=nginx:1")
	})
	t.Run("an editor's atomic rename replaces the pod", func(t *testing.T) {
		tmp := filepath.Join(dir, ".web.yaml.swp")
		write(t, tmp, manifest("web", "nginx:2"))
		if err := os.Rename(tmp, filepath.Join(dir, "web.yaml")); err != nil {
			t.Fatal(err)
		}
		pods.waitFor(t, "web=nginx:2")
	})
	t.Run("a file moved in is applied", func(t *testing.T) {
		other := t.TempDir()
		write(t, filepath.Join(other, "db.yml"), manifest("db", "postgres:16"))
		if err := os.Rename(filepath.Join(other, "db.yml"), filepath.Join(dir, "db.yml")); err != nil {
			t.Fatal(err)
		}
		pods.waitFor(t, "db=postgres:16 web=nginx:2")
	})
	t.Run("a removed file's pod is forgotten", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, "db.yml")); err != nil {
			t.Fatal(err)
		}
		pods.waitFor(t, "web=nginx:2")
	})
	t.Run("a file moved out is forgotten", func(t *testing.T) {
		if err := os.Rename(filepath.Join(dir, "web.yaml"), filepath.Join(dir, "web.yaml.disabled")); err != nil {
			t.Fatal(err)
		}
		pods.waitFor(t, "")
	})
}

func TestABrokenManifestKeepsItsRunningPods(t *testing.T) {
	dir := t.TempDir()
	pods := newFakePods()
	src := New(Config{Dir: dir, Pods: pods, Resync: time.Hour})
	ctx := context.Background()
	write(t, filepath.Join(dir, "web.yaml"), manifest("web", "nginx:1"))
	write(t, filepath.Join(dir, "db.yaml"), manifest("db", "postgres:16"))
	if err := src.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if got := pods.names(); got != "db=postgres:16 web=nginx:1" {
		t.Fatalf("desired pods %q", got)
	}
	broken := filepath.Join(dir, "web.yaml")
	write(t, broken, "apiVersion: v1\nkind: Pod\nmetadata: {name: web\nspec: [\n")
	if err := os.Remove(filepath.Join(dir, "db.yaml")); err != nil {
		t.Fatal(err)
	}
	err := src.Sync(ctx)
	if err == nil || !strings.Contains(err.Error(), broken) {
		t.Fatalf("Sync: %v, want an error naming %s", err, broken)
	}
	if got := pods.names(); got != "web=nginx:1" {
		t.Errorf("desired pods %q: the broken file's pod must stay, the removed file's go", got)
	}
	t.Run("a directory that cannot be read forgets nothing", func(t *testing.T) {
		src := New(Config{Dir: filepath.Join(dir, "missing"), Pods: pods})
		if err := src.Sync(ctx); err == nil || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("Sync: %v, want an error naming the directory", err)
		}
		if got := pods.names(); got != "web=nginx:1" {
			t.Errorf("desired pods %q", got)
		}
	})
}

func TestTheSourceSurvivesItsDirectoryGoingAndComingBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	pods := newFakePods()
	var logb strings.Builder
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logb}, nil))
	// Short, so that the missing directory is looked for again soon.
	src := New(Config{Dir: dir, Pods: pods, Resync: 50 * time.Millisecond, Log: log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	for _, image := range []string{"nginx:1", "nginx:2"} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, "web.yaml"), manifest("web", image))
		pods.waitFor(t, "web="+image)
		// Gone with its directory: the pod stays (an unreadable
		// directory forgets nothing) and the watch goes, saying so.
		logMu.Lock()
		logb.Reset()
		logMu.Unlock()
		// Moved away whole: removing the files first would be
		// removing the pods.
		if err := os.Rename(dir, dir+"."+image); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			logMu.Lock()
			said := strings.Contains(logb.String(), `msg="manifest directory no longer watched`)
			logMu.Unlock()
			if said {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no line says the directory is no longer watched")
			}
		}
		if got := pods.names(); got != "web="+image {
			t.Fatalf("desired pods %q after the directory went", got)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
