package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// evictionEvent is an "eviction" event as the agent writes it
// (agent decisionEvent; its test decodes the real one).
const evictionEvent = `{"signal":"allocatableMemory.available","threshold":"allocatableMemory.available<107374182",
"observed":105693184,"victim":"bench-eviction/hog","uid":"e127","rank":0,"hard":true,"dry_run":false,"message":"m",
"crossed":"2026-12-01T08:24:34.610000000Z","observed_at":"2026-12-01T08:24:34.611906862Z","kill_sent":"2026-12-01T08:24:34.619780958Z",
"detect_us":150,"decide_us":1783,"kill_us":6092,"grace_period":0}`

func TestParseAgentEviction(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Run("an eviction gives its victim, observation, kill and stages", func(t *testing.T) {
		ev, err := ParseAgentEviction(api.Event{Seq: 7, Kind: EventKindEviction, Object: []byte(evictionEvent)})
		if err != nil {
			t.Fatal(err)
		}
		if ev.Victim != "bench-eviction/hog" || ev.UID != "e127" || ev.Signal != "allocatableMemory.available" ||
			!ev.ObservedAt.Equal(at("2026-12-01T08:24:34.611906862Z")) || !ev.KillSent.Equal(at("2026-12-01T08:24:34.619780958Z")) ||
			!ev.Crossed.Equal(at("2026-12-01T08:24:34.61Z")) || ev.Detect != 150*time.Microsecond || ev.Kill != 6092*time.Microsecond {
			t.Errorf("%+v", ev)
		}
		if r := ev.Reason(); !strings.Contains(r, "allocatableMemory.available<107374182") || !strings.Contains(r, "105693184") {
			t.Errorf("reason %q", r)
		}
	})
	for _, tc := range []struct{ name, obj string }{
		{"without its observation time", strings.Replace(evictionEvent, `"observed_at":"2026-12-01T08:24:34.611906862Z",`, "", 1)},
		{"without its kill time", strings.Replace(evictionEvent, `"kill_sent":"2026-12-01T08:24:34.619780958Z",`, "", 1)},
		{"without a victim", strings.Replace(evictionEvent, `"victim":"bench-eviction/hog",`, "", 1)},
		{"that is not JSON", `{"signal":`},
	} {
		t.Run("an eviction "+tc.name+" is malformed", func(t *testing.T) {
			if _, err := ParseAgentEviction(api.Event{Kind: EventKindEviction, Object: []byte(tc.obj)}); !errors.Is(err, ErrMalformedEvent) {
				t.Errorf("err %v, want ErrMalformedEvent", err)
			}
		})
	}
	t.Run("a failed eviction needs no kill time", func(t *testing.T) {
		obj := strings.Replace(evictionEvent, `"kill_sent":"2026-12-01T08:24:34.619780958Z",`, `"error":"pod gone",`, 1)
		if ev, err := ParseAgentEviction(api.Event{Kind: EventKindEviction, Object: []byte(obj)}); err != nil || ev.Err != "pod gone" {
			t.Errorf("%+v, %v", ev, err)
		}
	})
	t.Run("another kind is refused", func(t *testing.T) {
		if _, err := ParseAgentEviction(api.Event{Kind: "oom_kill", Object: []byte(`{}`)}); !errors.Is(err, ErrMalformedEvent) {
			t.Errorf("err %v", err)
		}
	})
}

// fakeEvents is an agent event log: Events returns what was appended after
// since, waiting (bounded by wait) for it.
type fakeEvents struct {
	mu    sync.Mutex
	evs   []api.Event
	more  chan struct{}
	calls chan struct{} // one per Events call that returned
}

func newFakeEvents() *fakeEvents {
	return &fakeEvents{more: make(chan struct{}, 16), calls: make(chan struct{}, 64)}
}

func (f *fakeEvents) add(kind, obj string) {
	f.mu.Lock()
	f.evs = append(f.evs, api.Event{Seq: uint64(len(f.evs) + 1), Kind: kind, Object: []byte(obj)})
	f.mu.Unlock()
	f.more <- struct{}{}
}

func (f *fakeEvents) Events(ctx context.Context, since uint64, wait time.Duration) ([]api.Event, error) {
	deadline := time.After(wait)
	for {
		f.mu.Lock()
		var out []api.Event
		for _, e := range f.evs {
			if e.Seq > since {
				out = append(out, e)
			}
		}
		f.mu.Unlock()
		if len(out) > 0 || wait == 0 {
			select {
			case f.calls <- struct{}{}:
			default:
			}
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline:
			return nil, nil
		case <-f.more:
		}
	}
}

func TestAgentStrategyReportsTheAgentsEvictions(t *testing.T) {
	events := newFakeEvents()
	// Before the trial: not this trial's.
	events.add(EventKindEviction, strings.Replace(evictionEvent, "bench-eviction/hog", "bench-eviction/old", 1))
	var mu sync.Mutex
	var detected []time.Time
	var evicted []AgentEviction
	env := &TrialEnv{
		Agent: events, Log: slog.New(slog.DiscardHandler),
		Detected:     func(at time.Time) { mu.Lock(); detected = append(detected, at); mu.Unlock() },
		AgentEvicted: func(ev AgentEviction) { mu.Lock(); evicted = append(evicted, ev); mu.Unlock() },
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	s := NewAgentStrategy()
	go func() { done <- s.Run(ctx, env) }()
	<-events.calls // the strategy has read (and skips) what is there
	events.add("node_conditions", `{"MemoryPressure":true}`)
	events.add(EventKindEviction, strings.Replace(evictionEvent, `"kill_sent":"2026-12-01T08:24:34.619780958Z",`, `"error":"busy",`, 1))
	events.add(EventKindEviction, evictionEvent)
	for {
		mu.Lock()
		n := len(evicted)
		mu.Unlock()
		if n > 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(evicted) != 1 || evicted[0].Victim != "bench-eviction/hog" || len(detected) != 1 || !detected[0].Equal(evicted[0].ObservedAt) {
		t.Errorf("evicted %+v, detected %v: want the one successful eviction of this trial, detected at its observation", evicted, detected)
	}
	if !s.EvictsThroughAgent() {
		t.Error("the nodeguard strategy must run on an evicting agent")
	}
	t.Run("without an agent it refuses to run", func(t *testing.T) {
		if err := s.Run(t.Context(), &TrialEnv{}); err == nil {
			t.Error("ran without an agent")
		}
	})
}

func TestFirstReleased(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	samples := []releaseSample{
		{At: t0}, {At: t0.Add(ms)}, {At: t0.Add(2 * ms), below: true}, {At: t0.Add(3 * ms)},
		{At: t0.Add(4 * ms)}, {At: t0.Add(5 * ms), hogGone: true}, {At: t0.Add(6 * ms), below: true},
	}
	for _, tc := range []struct {
		name string
		kill time.Duration
		want time.Duration
		ok   bool
	}{
		{"the first released sample after the kill", 500 * time.Microsecond, 2 * ms, true},
		{"a sample at the kill counts", 2 * ms, 2 * ms, true},
		{"released samples before the kill do not", 2500 * time.Microsecond, 5 * ms, true},
		{"the hog's cgroup gone is released", 4 * ms, 5 * ms, true},
		{"nothing released after the kill yet", 7 * ms, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := firstReleased(samples, t0.Add(tc.kill))
			if ok != tc.ok || (ok && !got.Equal(t0.Add(tc.want))) {
				t.Errorf("got %v %v, want +%v %v", got.Sub(t0), ok, tc.want, tc.ok)
			}
		})
	}
}

func TestAgentOOMFirst(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	clear, seen := t0.Add(10*ms), t0.Add(12*ms)
	for _, tc := range []struct {
		name      string
		kill      time.Time
		clear     time.Time
		seen      time.Time
		first     bool
		ambiguous bool
	}{
		{"no OOM kill at all", t0, clear, time.Time{}, false, false},
		{"a kill before the last clear poll came first", t0.Add(9 * ms), clear, seen, false, false},
		{"a kill after the OOM kill was seen came second", t0.Add(13 * ms), clear, seen, true, false},
		{"a kill within the poll that saw it counts against the agent, noted", t0.Add(11 * ms), clear, seen, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, note := agentOOMFirst(tc.kill, tc.clear, tc.seen)
			if first != tc.first || (note != "") != tc.ambiguous {
				t.Errorf("first %v note %q, want %v ambiguous %v", first, note, tc.first, tc.ambiguous)
			}
		})
	}
}

func TestEvictionTargets(t *testing.T) {
	ms := time.Millisecond
	t.Run("all met", func(t *testing.T) {
		rows := SummarizeEviction([]EvictionTrial{
			trialAt("nodeguard", 1<<30, 2*ms, 5*ms, 9*ms, -1, "ns/hog"),
			trialAt("nodeguard", 2<<30, 9*ms, 12*ms, 20*ms, 30*ms, "ns/hog"), // an OOM kill after the kill, above 1Gi/s
			trialAt("kubelet", 1<<30, -1, -1, -1, 40*ms),
		})
		lines := EvictionTargets(rows, "nodeguard")
		if len(lines) != 4 {
			t.Fatalf("%q", lines)
		}
		for _, l := range lines {
			if !strings.Contains(l, "MET") || strings.Contains(l, "MISSED") {
				t.Errorf("%q, want MET", l)
			}
		}
		if !strings.Contains(lines[2], "above: 2Gi/s: 1 of 1") {
			t.Errorf("OOM line %q should name the OOM kill above the target rate", lines[2])
		}
	})
	for _, tc := range []struct {
		name   string
		trial  EvictionTrial
		target int
	}{
		{"a detection 11 ms late misses detection", trialAt("nodeguard", 1<<30, 11*ms, 12*ms, 20*ms, -1, "ns/hog"), 0},
		{"a trial not caught misses detection", trialAt("nodeguard", 1<<30, -1, -1, -1, 40*ms), 0},
		{"a kill 21 ms after detection misses the kill", trialAt("nodeguard", 1<<30, 2*ms, 23*ms, 30*ms, -1, "ns/hog"), 1},
		{"an OOM kill at 1Gi/s misses the OOM target", trialAt("nodeguard", 1<<30, 2*ms, 5*ms, 9*ms, 30*ms, "ns/hog"), 2},
		{"a collateral eviction misses the last", trialAt("nodeguard", 1<<30, 2*ms, 5*ms, 9*ms, -1, "ns/b-busy", "ns/hog"), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := EvictionTargets(SummarizeEviction([]EvictionTrial{tc.trial}), "nodeguard")
			if !strings.Contains(lines[tc.target], "MISSED") {
				t.Errorf("%q", lines)
			}
		})
	}
	if lines := EvictionTargets(nil, "nodeguard"); lines != nil {
		t.Errorf("no rows: %q", lines)
	}
}

// fakePodClient is the agent's pod API in memory.
type fakePodClient struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	getLeft int // Get of a pod answers "not found" this many times more
}

func (f *fakePodClient) Apply(_ context.Context, manifest []byte, source string) (*corev1.PodList, error) {
	pods, err := podspec.Parse(bytes.NewReader(manifest), source)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &corev1.PodList{}
	for _, p := range pods {
		p.UID = types.UID("uid-" + p.Name)
		p.Status.Phase = corev1.PodRunning
		f.pods[p.Namespace+"/"+p.Name] = p
		l.Items = append(l.Items, *p)
	}
	return l, nil
}

func (f *fakePodClient) Delete(_ context.Context, ns, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.pods[ns+"/"+name]; !ok {
		return fmt.Errorf("pod %s/%s: %w", ns, name, api.ErrNotFound)
	}
	delete(f.pods, ns+"/"+name)
	return nil
}

func (f *fakePodClient) Get(_ context.Context, ns, name string) (*corev1.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.pods[ns+"/"+name]
	if !ok || f.getLeft > 0 {
		f.getLeft--
		return nil, fmt.Errorf("pod %s/%s: %w", ns, name, api.ErrNotFound)
	}
	return p, nil
}

func (f *fakePodClient) List(context.Context) (*corev1.PodList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &corev1.PodList{}
	for _, p := range f.pods {
		l.Items = append(l.Items, *p)
	}
	return l, nil
}

func TestAPIPods(t *testing.T) {
	fc := &fakePodClient{pods: map[string]*corev1.Pod{}}
	pods := APIPods{Client: func() PodClient { return fc }, Poll: time.Millisecond}
	ctx := t.Context()
	bg := DefaultEvictionBackground("busybox", "hog")
	applied, err := pods.Apply(ctx, bg, "api")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("every pod goes in one manifest and comes back with its UID", func(t *testing.T) {
		if len(applied) != len(bg) {
			t.Fatalf("%d applied, want %d", len(applied), len(bg))
		}
		for i, p := range applied {
			if p.Name != bg[i].Name || p.UID == "" || len(p.Spec.Containers) != 1 {
				t.Errorf("applied %s uid %q", p.Name, p.UID)
			}
		}
	})
	t.Run("the manifest is what a user writes: no status, no creationTimestamp", func(t *testing.T) {
		b, err := podManifest(bg[0])
		if err != nil {
			t.Fatal(err)
		}
		if m := string(b); strings.Contains(m, "creationTimestamp") || strings.Contains(m, "status") || !strings.Contains(m, "name: g-idle") {
			t.Errorf("manifest:\n%s", m)
		}
	})
	t.Run("Wait polls until the predicate holds, a missing pod being ok=false", func(t *testing.T) {
		fc.mu.Lock()
		fc.getLeft = 3
		fc.mu.Unlock()
		if err := pods.Wait(ctx, evictionNamespace, "g-idle", running); err != nil {
			t.Fatal(err)
		}
		if err := pods.Delete(ctx, evictionNamespace, "g-idle"); err != nil {
			t.Fatal(err)
		}
		if err := pods.Wait(ctx, evictionNamespace, "g-idle", gone); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if err := pods.Wait(wctx, evictionNamespace, "g-idle", running); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("waiting for a pod that never comes: %v", err)
		}
	})
	t.Run("deleting a missing pod is not found", func(t *testing.T) {
		if err := pods.Delete(ctx, evictionNamespace, "nope"); !isNotFound(err) {
			t.Errorf("err %v", err)
		}
	})
	t.Run("List lists", func(t *testing.T) {
		l, err := pods.List(ctx)
		if err != nil || len(l) != len(bg)-1 {
			t.Errorf("%d pods, %v", len(l), err)
		}
	})
}
