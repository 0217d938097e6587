package eviction

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/loader/event"
	"github.com/nodeguard/nodeguard/pressure"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

// fakeActor records what the manager asks of it.
type fakeActor struct {
	mu      sync.Mutex
	pods    []PodRef
	evicts  []Decision
	adj     []string // "set a 1000", "restore a"
	evictFn func(ctx context.Context, d Decision) error
	setErr  func(uid types.UID) error // SetOOMScoreAdj's error, when set
	// calmLists and wholeLists count Pods(true) and Pods(false); a calm
	// listing leaves the task counts unread, as the lifecycle's.
	calmLists, wholeLists int
}

func (a *fakeActor) Pods(calm bool) []PodRef {
	a.mu.Lock()
	defer a.mu.Unlock()
	refs := slices.Clone(a.pods)
	if calm {
		a.calmLists++
		for i := range refs {
			refs[i].PIDs, refs[i].PIDsUnknown = 0, true
		}
	} else {
		a.wholeLists++
	}
	return refs
}

func (a *fakeActor) lists() (calm, whole int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calmLists, a.wholeLists
}

func (a *fakeActor) setPods(p ...PodRef) {
	a.mu.Lock()
	a.pods = p
	a.mu.Unlock()
}

func (a *fakeActor) Evict(ctx context.Context, d Decision) error {
	a.mu.Lock()
	a.evicts = append(a.evicts, d)
	fn := a.evictFn
	a.mu.Unlock()
	if fn != nil {
		return fn(ctx, d)
	}
	return nil
}

func (a *fakeActor) SetOOMScoreAdj(uid types.UID, adj int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.adj = append(a.adj, fmt.Sprintf("set %s %d", uid, adj))
	if a.setErr != nil {
		return a.setErr(uid)
	}
	return nil
}

func (a *fakeActor) RestoreOOMScoreAdj(uid types.UID) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.adj = append(a.adj, "restore "+string(uid))
	return nil
}

func (a *fakeActor) evicted() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, d := range a.evicts {
		out = append(out, string(d.Victim.UID))
	}
	return out
}

func (a *fakeActor) adjustments() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.adj)
}

// script is a snapshot source whose next snapshot the test sets.
type script struct {
	mu    sync.Mutex
	avail int64
	cgs   []pressure.Cgroup
	err   error
	delay time.Duration
	calls atomic.Int64
}

func (s *script) set(avail int64, cgs ...pressure.Cgroup) {
	s.mu.Lock()
	s.avail, s.cgs = avail, cgs
	s.mu.Unlock()
}

func (s *script) snapshot(ctx context.Context) (*pressure.Snapshot, error) {
	s.calls.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if s.err != nil {
		return nil, s.err
	}
	now := time.Now()
	return &pressure.Snapshot{
		Time: now,
		Signals: []nodestats.Observation{
			{Signal: nodestats.SignalMemoryAvailable, Available: s.avail, Capacity: 8 * Gi, Time: now},
		},
		Cgroups: slices.Clone(s.cgs),
	}, nil
}

func cgroup(rel string, id uint64, workingSet int64) pressure.Cgroup {
	return pressure.Cgroup{Key: pressure.CgroupKey{ID: id, HierarchyID: 0}, UnifiedID: id, Rel: rel,
		Memory: cgstat.Memory{Usage: uint64(workingSet)}}
}

func ref(p Pod, rel string) PodRef {
	p.MemoryUsage = 0 // filled by the manager
	return PodRef{Pod: p, CgroupRel: rel}
}

// recorder is an Observer that hands what it sees to channels.
type recorder struct {
	decisions chan decisionTiming
	released  chan decisionTiming
	ooms      chan OOMKillAttribution
	mu        sync.Mutex
	conds     []map[Condition]bool
	stale     atomic.Int64
}

type decisionTiming struct {
	d Decision
	t Timing
}

func newRecorder() *recorder {
	return &recorder{decisions: make(chan decisionTiming, 64), released: make(chan decisionTiming, 64), ooms: make(chan OOMKillAttribution, 64)}
}

func (r *recorder) OnDecision(d Decision, t Timing) { r.decisions <- decisionTiming{d, t} }
func (r *recorder) OnReleased(d Decision, t Timing) { r.released <- decisionTiming{d, t} }
func (r *recorder) OnConditions(c map[Condition]bool) {
	r.mu.Lock()
	r.conds = append(r.conds, c)
	r.mu.Unlock()
}
func (r *recorder) OnOOMKill(a OOMKillAttribution) { r.ooms <- a }
func (r *recorder) OnStaleness(d time.Duration)    { r.stale.Add(1) }

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

func nothing[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected %s: %+v", what, v)
	case <-time.After(50 * time.Millisecond):
	}
}

// eventually waits for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type harness struct {
	m     *Manager
	actor *fakeActor
	snap  *script
	rec   *recorder
	log   *bytes.Buffer
	logMu sync.Mutex
	stop  func()
}

func startManager(t *testing.T, thresholds ThresholdConfig, mod func(*ManagerConfig)) *harness {
	t.Helper()
	h := &harness{actor: &fakeActor{}, snap: &script{avail: 4 * Gi}, rec: newRecorder(), log: &bytes.Buffer{}}
	cfg := ManagerConfig{
		Policy:   PolicyConfig{Thresholds: mustThresholds(t, thresholds)},
		Actor:    h.actor,
		Snapshot: h.snap.snapshot,
		Tick:     time.Hour, // only wake-ups drive these tests
		Logger:   slog.New(slog.NewTextHandler(lockedWriter{&h.logMu, h.log}, nil)),
		Observer: h.rec,
	}
	if mod != nil {
		mod(&cfg)
	}
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	h.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			h.stop()
		}
	})
	eventually(t, "the first evaluation", func() bool { return m.Evaluations() >= 1 })
	return h
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (h *harness) logs() string {
	time.Sleep(5 * time.Millisecond) // let a soft eviction's goroutine log
	h.logMu.Lock()
	defer h.logMu.Unlock()
	return h.log.String()
}

var hard100 = ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}}

func TestManagerCoalescesWakes(t *testing.T) {
	h := startManager(t, hard100, nil)
	h.snap.mu.Lock()
	h.snap.delay = 2 * time.Millisecond
	h.snap.mu.Unlock()
	before := h.m.Evaluations()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 250 {
				h.m.Wake(fmt.Sprintf("burst %d/%d", g, i), time.Now())
			}
		}()
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	n := h.m.Evaluations() - before
	if n < 1 || n > 5 {
		t.Errorf("1000 wakes led to %d evaluations, want a handful", n)
	}
}

func TestManagerEvictsAndTimesEveryStage(t *testing.T) {
	h := startManager(t, hard100, nil)
	a, b := pod("a", 0, 100*Mi), pod("b", 0, 100*Mi)
	h.actor.setPods(ref(a, "/kubepods/pod-a"), ref(b, "/kubepods/pod-b"))
	h.snap.set(80*Mi, cgroup("/kubepods/pod-a", 11, 1*Gi), cgroup("/kubepods/pod-b", 12, 200*Mi))

	crossed := time.Now().Add(-3 * time.Millisecond)
	h.m.Wake("tripwire", crossed)
	got := receive(t, h.rec.decisions, "decision")
	d, tm := got.d, got.t
	if d.Victim.UID != "a" || !d.Hard || d.DryRun || d.Victim.MemoryUsage != 1*Gi || d.Victim.CgroupID != 11 {
		t.Fatalf("decision %+v", d)
	}
	if !tm.Crossed.Equal(crossed) {
		t.Errorf("crossed %v, want the wake's %v", tm.Crossed, crossed)
	}
	if tm.Detected.Before(tm.Crossed) || tm.Decided.Before(tm.Detected) || tm.KillSent.Before(tm.Decided) || !tm.Released.IsZero() || tm.Err != nil {
		t.Errorf("timing out of order: %+v", tm)
	}
	if tm.Detect() < 3*time.Millisecond {
		t.Errorf("detect latency %v, want at least 3ms", tm.Detect())
	}

	// Still holding its memory: no second eviction, no release.
	h.m.Wake("tick", time.Time{})
	nothing(t, h.rec.decisions, "decision")
	nothing(t, h.rec.released, "release")

	// The working set falls below 10% of 1Gi.
	h.snap.set(900*Mi, cgroup("/kubepods/pod-a", 11, 100*Mi), cgroup("/kubepods/pod-b", 12, 200*Mi))
	h.m.Wake("tick", time.Time{})
	rel := receive(t, h.rec.released, "release")
	if rel.d.Victim.UID != "a" || rel.t.Released.Before(rel.t.KillSent) || rel.t.Release() < 0 || rel.t.Total() < rel.t.Detect() {
		t.Errorf("release %+v", rel)
	}
	if got := h.actor.evicted(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("evicted %q", got)
	}
	logs := h.logs()
	for _, want := range []string{"msg=\"evict pod\"", "signal=memory.available", "threshold=memory.available<100Mi", "victim=ns/a", "uid=a", "rank=0", "dry_run=false", "detect_latency=", "kill_latency=", "msg=\"victim released its memory\""} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	}
	if h.rec.stale.Load() == 0 {
		t.Error("no staleness reported")
	}
}

func TestManagerRaisesAndRestoresOOMScoreAdj(t *testing.T) {
	h := startManager(t, hard100, nil)
	a, b := pod("a", 0, 0), pod("b", 0, 0)
	h.actor.setPods(ref(a, "/kubepods/pod-a"), ref(b, "/kubepods/pod-b"))
	cgA, cgB := cgroup("/kubepods/pod-a", 11, 1*Gi), cgroup("/kubepods/pod-b", 12, 500*Mi)
	step := func(avail int64, want []string, cgs ...pressure.Cgroup) {
		t.Helper()
		h.snap.set(avail, cgs...)
		n := h.m.Evaluations()
		h.m.Wake("test", time.Time{})
		eventually(t, "an evaluation", func() bool { return h.m.Evaluations() > n })
		if got := h.actor.adjustments(); !slices.Equal(got, want) {
			t.Errorf("adjustments %q, want %q", got, want)
		}
	}
	step(150*Mi, []string{"set a 1000"}, cgA, cgB)
	step(140*Mi, []string{"set a 1000"}, cgA, cgB) // idempotent
	cgA.Memory.Usage = uint64(100 * Mi)            // b is now the top-ranked
	step(150*Mi, []string{"set a 1000", "restore a", "set b 1000"}, cgA, cgB)
	step(4*Gi, []string{"set a 1000", "restore a", "set b 1000", "restore b"}, cgA, cgB)
	step(150*Mi, []string{"set a 1000", "restore a", "set b 1000", "restore b", "set b 1000"}, cgA, cgB)
	h.stop()
	if got := h.actor.adjustments(); got[len(got)-1] != "restore b" {
		t.Errorf("on exit %q, want b restored", got)
	}
}

// A SetOOMScoreAdj that fails may have raised some of the pod's
// processes: it is tried again while the pod stays the next victim, and
// restored like a raised pod once it is not.
func TestManagerRestoresAPartlyRaisedVictim(t *testing.T) {
	h := startManager(t, hard100, nil)
	h.actor.mu.Lock()
	h.actor.setErr = func(uid types.UID) error {
		if uid == "a" {
			return errors.New("oom_score_adj of pid 42 to 1000: permission denied")
		}
		return nil
	}
	h.actor.mu.Unlock()
	a, b := pod("a", 0, 0), pod("b", 0, 0)
	h.actor.setPods(ref(a, "/kubepods/pod-a"), ref(b, "/kubepods/pod-b"))
	cgA, cgB := cgroup("/kubepods/pod-a", 11, 1*Gi), cgroup("/kubepods/pod-b", 12, 500*Mi)
	step := func(want []string, cgs ...pressure.Cgroup) {
		t.Helper()
		h.snap.set(150*Mi, cgs...)
		n := h.m.Evaluations()
		h.m.Wake("test", time.Time{})
		eventually(t, "an evaluation", func() bool { return h.m.Evaluations() > n })
		if got := h.actor.adjustments(); !slices.Equal(got, want) {
			t.Errorf("adjustments %q, want %q", got, want)
		}
	}
	step([]string{"set a 1000"}, cgA, cgB)
	step([]string{"set a 1000", "set a 1000"}, cgA, cgB) // tried again
	cgA.Memory.Usage = uint64(100 * Mi)                  // b is now the top-ranked
	step([]string{"set a 1000", "set a 1000", "restore a", "set b 1000"}, cgA, cgB)
}

func TestManagerEvaluatesEvidenceAtOnceButHoldsOffOtherWakes(t *testing.T) {
	h := startManager(t, hard100, func(c *ManagerConfig) { c.MinInterval = time.Hour })
	n := h.m.Evaluations()
	// A wake-up without evidence (a reclaim event, a release) right after
	// an evaluation waits out MinInterval.
	h.m.Wake("reclaim", time.Time{})
	time.Sleep(50 * time.Millisecond)
	if got := h.m.Evaluations(); got != n {
		t.Fatalf("evaluations %d after a plain wake-up within MinInterval, want %d", got, n)
	}
	// A tripwire's crossing is evaluated at once, the pending plain
	// wake-up with it.
	at := time.Now()
	h.m.Wake("tripwire:usage_threshold", at)
	eventually(t, "the evaluation of a tripwire's wake-up", func() bool { return h.m.Evaluations() > n })
	if got := h.m.Evaluations(); got != n+1 {
		t.Errorf("evaluations %d, want %d (one for both wake-ups)", got, n+1)
	}
	// And again right after: evidence never waits for MinInterval.
	h.m.Wake("psi:memory some 10%", time.Now())
	eventually(t, "the evaluation of a PSI trigger's wake-up", func() bool { return h.m.Evaluations() > n+1 })
}

func TestManagerKillsBeforeMovingTheRaisedOOMScoreAdj(t *testing.T) {
	h := startManager(t, hard100, nil)
	a, b, c := pod("a", 0, 0), pod("b", 0, 0), pod("c", 0, 0)
	h.actor.setPods(ref(a, "/kubepods/pod-a"), ref(b, "/kubepods/pod-b"), ref(c, "/kubepods/pod-c"))
	cgA, cgB, cgC := cgroup("/kubepods/pod-a", 11, 1*Gi), cgroup("/kubepods/pod-b", 12, 500*Mi), cgroup("/kubepods/pod-c", 13, 300*Mi)
	var atKill []string
	h.actor.evictFn = func(ctx context.Context, d Decision) error {
		atKill = h.actor.adjustments()
		return nil
	}
	evaluate := func(avail int64) {
		t.Helper()
		h.snap.set(avail, cgA, cgB, cgC)
		n := h.m.Evaluations()
		h.m.Wake("test", time.Time{})
		eventually(t, "an evaluation", func() bool { return h.m.Evaluations() > n })
	}
	evaluate(150 * Mi) // near the line: a, the largest, raised
	if got, want := h.actor.adjustments(), []string{"set a 1000"}; !slices.Equal(got, want) {
		t.Fatalf("adjustments %q, want %q", got, want)
	}
	// Now b, then c, outrank a, and memory is below the hard threshold:
	// b is killed, c becomes the next victim. The kill comes before
	// putting back a's oom_score_adj (a runtime call) and raising c's.
	cgA.Memory.Usage = uint64(100 * Mi)
	evaluate(50 * Mi)
	if got := h.actor.evicted(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("evicted %q, want b", got)
	}
	if want := []string{"set a 1000"}; !slices.Equal(atKill, want) {
		t.Errorf("adjustments when b was killed %q, want %q (the kill first)", atKill, want)
	}
	if got, want := h.actor.adjustments(), []string{"set a 1000", "restore a", "set c 1000"}; !slices.Equal(got, want) {
		t.Errorf("adjustments after the pass %q, want %q", got, want)
	}
}

func TestManagerAttributesOOMKills(t *testing.T) {
	h := startManager(t, hard100, nil)
	h.actor.setPods(ref(pod("a", 0, 0), "/kubepods/pod-a"), ref(pod("b", 0, 0), "/kubepods/pod-b"))
	h.snap.set(4*Gi, cgroup("/kubepods/pod-a", 11, Gi), cgroup("/kubepods/pod-a/ctr-1", 21, Gi),
		cgroup("/kubepods/pod-b", 12, Gi), cgroup("/system.slice/sshd.service", 31, Mi))
	n := h.m.Evaluations()
	h.m.Wake("test", time.Time{})
	eventually(t, "an evaluation", func() bool { return h.m.Evaluations() > n })

	ch := make(chan event.Event)
	go h.m.Events(t.Context(), ch)
	kill := func(memcg uint64) *event.OOMKill {
		return &event.OOMKill{Header: event.Header{Kind: event.KindOOMKill, PID: 4242, MemcgID: memcg}, Comm: "hog"}
	}
	for _, tt := range []struct {
		name               string
		memcg              uint64
		pod, ctr, cgroupOf string
	}{
		{"a kill in a container cgroup names the pod and container", 21, "a", "ctr-1", "/kubepods/pod-a/ctr-1"},
		{"a kill in the pod cgroup names the pod", 12, "b", "", "/kubepods/pod-b"},
		{"a kill outside pods names no pod", 31, "", "", "/system.slice/sshd.service"},
		{"a kill in an unknown cgroup names nothing", 99, "", "", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := h.snap.calls.Load()
			ch <- kill(tt.memcg)
			a := receive(t, h.rec.ooms, "oom kill")
			got := ""
			if a.Pod != nil {
				got = string(a.Pod.UID)
			}
			if got != tt.pod || a.Container != tt.ctr || a.Cgroup != tt.cgroupOf || a.PID != 4242 || a.Comm != "hog" || a.Time.IsZero() {
				t.Errorf("attribution %+v", a)
			}
			eventually(t, "the wake-up of an OOM kill", func() bool { return h.snap.calls.Load() > n })
		})
	}
}

func TestManagerRetriesFailedEvictionsButNeverTwiceInFlight(t *testing.T) {
	soft := ThresholdConfig{
		EvictionSoft:            map[string]string{"memory.available": "500Mi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "1ns"},
	}
	h := startManager(t, soft, nil)
	release := make(chan error)
	var calls atomic.Int64
	h.actor.mu.Lock()
	h.actor.evictFn = func(ctx context.Context, d Decision) error {
		if calls.Add(1) == 1 {
			return <-release // the first stop request hangs, then fails
		}
		return nil
	}
	h.actor.mu.Unlock()
	h.actor.setPods(ref(pod("a", 0, 0), "/kubepods/pod-a"), ref(pod("b", 0, 0), "/kubepods/pod-b"))
	h.snap.set(400*Mi, cgroup("/kubepods/pod-a", 11, Gi), cgroup("/kubepods/pod-b", 12, 100*Mi))

	for range 20 {
		h.m.Wake("test", time.Time{})
		time.Sleep(2 * time.Millisecond)
	}
	eventually(t, "the first Evict", func() bool { return calls.Load() >= 1 })
	time.Sleep(30 * time.Millisecond)
	if got := h.actor.evicted(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("evicted %q while the first stop was in flight, want a once", got)
	}
	release <- errors.New("runtime unavailable")
	first := receive(t, h.rec.decisions, "failed decision")
	if first.t.Err == nil || first.d.Hard {
		t.Errorf("first decision %+v %+v, want a soft one with an error", first.d, first.t)
	}
	second := receive(t, h.rec.decisions, "retried decision")
	if second.d.Victim.UID != "a" || second.t.Err != nil {
		t.Errorf("retry %+v %+v", second.d, second.t)
	}
	if got := h.actor.evicted(); !slices.Equal(got, []string{"a", "a"}) {
		t.Errorf("evicted %q, want a then a again", got)
	}
	if logs := h.logs(); !strings.Contains(logs, "eviction failed") || !strings.Contains(logs, "runtime unavailable") {
		t.Errorf("failure not logged:\n%s", logs)
	}
}

func TestManagerDryRun(t *testing.T) {
	h := startManager(t, hard100, func(c *ManagerConfig) { c.DryRun = true })
	h.actor.setPods(ref(pod("a", 0, 0), "/kubepods/pod-a"))
	h.snap.set(80*Mi, cgroup("/kubepods/pod-a", 11, Gi))
	h.m.Wake("test", time.Time{})
	got := receive(t, h.rec.decisions, "decision")
	if !got.d.DryRun || !got.t.KillSent.IsZero() {
		t.Errorf("decision %+v %+v", got.d, got.t)
	}
	if ev, adj := h.actor.evicted(), h.actor.adjustments(); len(ev) != 0 || len(adj) != 0 {
		t.Errorf("dry run acted: evicted %q, adjusted %q", ev, adj)
	}
	if !strings.Contains(h.logs(), "dry_run=true") {
		t.Error("dry run not logged")
	}
}

func TestManagerReclaimEventsWakeAndBreakTies(t *testing.T) {
	h := startManager(t, hard100, nil)
	h.actor.setPods(ref(pod("a", 0, 0), "/kubepods/pod-a"), ref(pod("b", 0, 0), "/kubepods/pod-b"))
	h.snap.set(4*Gi, cgroup("/kubepods/pod-a", 11, Gi), cgroup("/kubepods/pod-b", 12, Gi), cgroup("/kubepods/pod-b/ctr", 22, Gi))
	n := h.m.Evaluations()
	h.m.Wake("test", time.Time{})
	eventually(t, "an evaluation", func() bool { return h.m.Evaluations() > n })

	ch := make(chan event.Event, 4)
	go h.m.Events(t.Context(), ch)
	// kswapd (memcg 0) is not a monitored cgroup: no wake-up.
	calls := h.snap.calls.Load()
	ch <- &event.Reclaim{Header: event.Header{Kind: event.KindReclaim}, Type: event.ReclaimKswapd, DurationNS: 1e9}
	time.Sleep(30 * time.Millisecond)
	if h.snap.calls.Load() != calls {
		t.Error("a kswapd episode woke the manager")
	}
	h.snap.set(80*Mi, cgroup("/kubepods/pod-a", 11, Gi), cgroup("/kubepods/pod-b", 12, Gi), cgroup("/kubepods/pod-b/ctr", 22, Gi))
	ch <- &event.Reclaim{Header: event.Header{Kind: event.KindReclaim, MemcgID: 22}, Type: event.ReclaimMemcg, DurationNS: 5e6}
	got := receive(t, h.rec.decisions, "decision")
	if got.d.Victim.UID != "b" || got.d.Victim.ReclaimStall != 5*time.Millisecond {
		t.Errorf("victim %s with stall %v, want b (5ms of reclaim) before a (cgroup id 11)", got.d.Victim.UID, got.d.Victim.ReclaimStall)
	}
	// The removal of b's cgroup is its release.
	ch <- &event.Cgroup{Header: event.Header{Kind: event.KindCgroupRmdir}, Path: "kubepods/pod-b"}
	rel := receive(t, h.rec.released, "release")
	if rel.d.Victim.UID != "b" || rel.t.Released.IsZero() {
		t.Errorf("release %+v", rel)
	}
}

func TestManagerSnapshotErrorsSkipTheEvaluation(t *testing.T) {
	h := startManager(t, hard100, nil)
	h.actor.setPods(ref(pod("a", 0, 0), "/kubepods/pod-a"))
	h.snap.mu.Lock()
	h.snap.err = errors.New("meminfo unreadable")
	h.snap.mu.Unlock()
	calls := h.snap.calls.Load()
	h.m.Wake("test", time.Time{})
	eventually(t, "a snapshot attempt", func() bool { return h.snap.calls.Load() > calls })
	nothing(t, h.rec.decisions, "decision")
	if !strings.Contains(h.logs(), "meminfo unreadable") {
		t.Error("snapshot error not logged")
	}
}

func TestManagerConditionsReported(t *testing.T) {
	h := startManager(t, hard100, nil)
	h.snap.set(80 * Mi)
	n := h.m.Evaluations()
	h.m.Wake("test", time.Time{})
	eventually(t, "an evaluation", func() bool { return h.m.Evaluations() > n })
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	if len(h.rec.conds) != 2 || h.rec.conds[0][MemoryPressure] || !h.rec.conds[1][MemoryPressure] {
		t.Errorf("conditions %v, want false then true", h.rec.conds)
	}
}

func TestNewManagerRefusesBadConfig(t *testing.T) {
	snap := (&script{}).snapshot
	for _, tt := range []struct {
		name string
		cfg  ManagerConfig
		want string
	}{
		{"no actor", ManagerConfig{Snapshot: snap}, "actor"},
		{"no snapshot", ManagerConfig{Actor: &fakeActor{}}, "snapshot"},
		{"a negative tick", ManagerConfig{Actor: &fakeActor{}, Snapshot: snap, Tick: -1}, "tick"},
		{"a bad policy", ManagerConfig{Actor: &fakeActor{}, Snapshot: snap, Policy: PolicyConfig{CoolDown: -1}}, "coolDown"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewManager(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalid) {
				t.Errorf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

func TestManagerKeepsAnUnlistedVictimPending(t *testing.T) {
	soft := ThresholdConfig{
		EvictionSoft:            map[string]string{"memory.available": "500Mi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "1ns"},
	}
	h := startManager(t, soft, nil)
	a, b := ref(pod("a", 0, 0), "/kubepods/pod-a"), ref(pod("b", 0, 0), "/kubepods/pod-b")
	h.actor.setPods(a, b)
	// Like the lifecycle, the actor stops listing a pod once evicted.
	h.actor.mu.Lock()
	h.actor.evictFn = func(_ context.Context, d Decision) error {
		h.actor.mu.Lock()
		defer h.actor.mu.Unlock()
		h.actor.pods = slices.DeleteFunc(h.actor.pods, func(r PodRef) bool { return r.UID == d.Victim.UID })
		return nil
	}
	h.actor.mu.Unlock()
	h.snap.set(400*Mi, cgroup("/kubepods/pod-a", 11, Gi), cgroup("/kubepods/pod-b", 12, 100*Mi))
	h.m.Wake("test", time.Time{}) // the soft threshold is first met
	time.Sleep(15 * time.Millisecond)
	h.m.Wake("test", time.Time{}) // its grace period (1ns) has passed
	if got := receive(t, h.rec.decisions, "decision"); got.d.Victim.UID != "a" {
		t.Fatalf("victim %s", got.d.Victim.UID)
	}
	// a's cgroup still holds 1Gi through its grace period: no second
	// eviction although a is no longer listed.
	for range 5 {
		h.m.Wake("test", time.Time{})
		time.Sleep(15 * time.Millisecond)
	}
	nothing(t, h.rec.decisions, "second decision")
	// a's cgroup is gone: released, and b goes if the pressure remains.
	h.snap.set(400*Mi, cgroup("/kubepods/pod-b", 12, 100*Mi))
	h.m.Wake("test", time.Time{})
	if rel := receive(t, h.rec.released, "release"); rel.d.Victim.UID != "a" {
		t.Errorf("released %s", rel.d.Victim.UID)
	}
	if got := receive(t, h.rec.decisions, "decision"); got.d.Victim.UID != "b" {
		t.Errorf("victim %s, want b", got.d.Victim.UID)
	}
}

// A pod whose cgroup the snapshot does not know yet (its birth event lost
// to a full ring) would rank first for having no stats, and an idle pod
// would go instead of the hog: the manager watches its cgroup, takes the
// snapshot again, and decides on both pods' usage. A pod's cgroup is
// watched once, not at every evaluation.
func TestManagerWatchesAPodCgroupTheSnapshotLacks(t *testing.T) {
	var watched []string
	var mu sync.Mutex
	var h *harness
	h = startManager(t, hard100, func(c *ManagerConfig) {
		c.Watch = func(rel string) {
			mu.Lock()
			watched = append(watched, rel)
			mu.Unlock()
			// The source reads it from now on.
			h.snap.mu.Lock()
			h.snap.cgs = append(h.snap.cgs, cgroup(rel, 21, 0))
			h.snap.mu.Unlock()
		}
	})
	hog, idle := pod("hog", 0, 0), pod("idle", 0, 0)
	h.actor.setPods(ref(hog, "/kubepods/pod-hog"), ref(idle, "/kubepods/pod-idle"))
	h.snap.set(80*Mi, cgroup("/kubepods/pod-hog", 11, 1*Gi)) // pod-idle unknown
	before := h.snap.calls.Load()
	h.m.Wake("tripwire", time.Now())
	d := receive(t, h.rec.decisions, "decision").d
	if d.Victim.UID != "hog" {
		t.Errorf("victim %s, want the hog: the idle pod without stats went first", d.Victim.UID)
	}
	mu.Lock()
	got := slices.Clone(watched)
	mu.Unlock()
	if !slices.Equal(got, []string{"/kubepods/pod-idle"}) {
		t.Errorf("watched %q, want the idle pod's cgroup alone", got)
	}
	if n := h.snap.calls.Load() - before; n != 2 {
		t.Errorf("%d snapshots for the evaluation, want 2 (the second after watching)", n)
	}
	// Known now: later evaluations take one snapshot each and watch nothing.
	eventually(t, "the tripwire's evaluation counted", func() bool { return h.m.Evaluations() >= 2 })
	before = h.snap.calls.Load()
	n := h.m.Evaluations()
	h.m.Wake("tick", time.Time{})
	eventually(t, "the next evaluation", func() bool { return h.m.Evaluations() > n })
	if n := h.snap.calls.Load() - before; n != 1 {
		t.Errorf("%d snapshots for an evaluation with every cgroup known, want 1", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(watched) != 1 {
		t.Errorf("watched %q, want one cgroup once", watched)
	}
}

// A victim whose working set falls below ReleasedFraction while its
// cgroup still exists is released in that pass, and must not be chosen
// again in it: it is no longer pending, and a hard threshold met in the
// same pass would otherwise "escalate" it, a second eviction of a pod
// already evicted, logged and counted.
func TestManagerNeverChoosesAVictimReleasedInTheSamePass(t *testing.T) {
	for _, tt := range []struct {
		name string
		// unlist: the actor stops listing the victim once evicted, as
		// the lifecycle does; otherwise its list was taken before the
		// eviction was recorded.
		unlist bool
	}{
		{"when the actor no longer lists it", true},
		{"when the actor still lists it", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			both := ThresholdConfig{
				EvictionHard:            map[string]string{"memory.available": "100Mi"},
				EvictionSoft:            map[string]string{"memory.available": "500Mi"},
				EvictionSoftGracePeriod: map[string]string{"memory.available": "1ns"},
			}
			h := startManager(t, both, nil)
			crit := pod("crit", 0, 0)
			crit.Critical = true // never a victim: a is the only candidate
			h.actor.setPods(ref(pod("a", 0, 0), "/kubepods/pod-a"), ref(crit, "/kubepods/pod-crit"))
			if tt.unlist {
				h.actor.mu.Lock()
				h.actor.evictFn = func(_ context.Context, d Decision) error {
					h.actor.mu.Lock()
					defer h.actor.mu.Unlock()
					h.actor.pods = slices.DeleteFunc(h.actor.pods, func(r PodRef) bool { return r.UID == d.Victim.UID })
					return nil
				}
				h.actor.mu.Unlock()
			}
			h.snap.set(400*Mi, cgroup("/kubepods/pod-a", 11, Gi), cgroup("/kubepods/pod-crit", 12, 100*Mi))
			h.m.Wake("test", time.Time{}) // the soft threshold is first met
			time.Sleep(15 * time.Millisecond)
			h.m.Wake("test", time.Time{}) // its grace period (1ns) has passed
			if got := receive(t, h.rec.decisions, "decision"); got.d.Victim.UID != "a" || got.d.Hard {
				t.Fatalf("first decision %+v, want a soft eviction of a", got.d)
			}

			// a's working set falls below 10% of 1Gi, its cgroup still
			// there, while the node crosses the hard threshold.
			h.snap.set(80*Mi, cgroup("/kubepods/pod-a", 11, 50*Mi), cgroup("/kubepods/pod-crit", 12, 500*Mi))
			n := h.m.Evaluations()
			h.m.Wake("test", time.Time{})
			eventually(t, "the evaluation", func() bool { return h.m.Evaluations() > n })
			if rel := receive(t, h.rec.released, "release"); rel.d.Victim.UID != "a" {
				t.Errorf("released %s, want a", rel.d.Victim.UID)
			}
			select {
			case got := <-h.rec.decisions:
				t.Errorf("a second decision: hard=%v victim=%s signal=%s (a was released in this pass)", got.d.Hard, got.d.Victim.UID, got.d.Threshold)
			case <-time.After(50 * time.Millisecond):
			}
			if got := h.actor.evicted(); !slices.Equal(got, []string{"a"}) {
				t.Errorf("evicted %q, want a once", got)
			}
			if n := strings.Count(h.logs(), `msg="evict pod"`); n != 1 {
				t.Errorf("%d eviction lines logged, want 1", n)
			}
		})
	}
}

// Far from every threshold, the manager's ticks take calm snapshots (the
// pods' own figures may be seconds old); the tick that finds the node's
// figures near a threshold takes a whole snapshot before it decides, and
// decides on that one's pod figures, never on the calm one's.
func TestManagerTicksOnCalmSnapshotsAndDecidesOnWholeOnes(t *testing.T) {
	calm := &script{avail: 4 * Gi}
	h := startManager(t, hard100, func(c *ManagerConfig) {
		c.Tick = 20 * time.Millisecond
		c.SnapshotCalm = calm.snapshot
	})
	a, b := pod("a", 0, 100*Mi), pod("b", 0, 100*Mi)
	h.actor.setPods(ref(a, "/kubepods/pod-a"), ref(b, "/kubepods/pod-b"))
	// The whole snapshot's pods: a is the biggest. The calm one carries
	// old figures in which b was.
	h.snap.set(4*Gi, cgroup("/kubepods/pod-a", 11, 1*Gi), cgroup("/kubepods/pod-b", 12, 200*Mi))
	calm.set(4*Gi, cgroup("/kubepods/pod-a", 11, 10*Mi), cgroup("/kubepods/pod-b", 12, 900*Mi))
	eventually(t, "ticks on calm snapshots", func() bool { return calm.calls.Load() >= 5 })
	whole := h.snap.calls.Load()
	calmLists, wholeLists := h.actor.lists()
	time.Sleep(100 * time.Millisecond)
	if n := h.snap.calls.Load() - whole; n != 0 {
		t.Errorf("%d whole snapshots while calm, want 0", n)
	}
	if c, w := h.actor.lists(); c <= calmLists || w != wholeLists {
		t.Errorf("while calm the pods were listed calm %d and whole %d times, want calm listings only", c-calmLists, w-wholeLists)
	}
	if h.m.CalmLeft() != 0 {
		t.Errorf("CalmLeft %d while calm", h.m.CalmLeft())
	}

	// Memory drops below the threshold between two ticks, no wake-up.
	h.snap.set(80*Mi, cgroup("/kubepods/pod-a", 11, 1*Gi), cgroup("/kubepods/pod-b", 12, 200*Mi))
	calm.set(80*Mi, cgroup("/kubepods/pod-a", 11, 10*Mi), cgroup("/kubepods/pod-b", 12, 900*Mi))
	got := receive(t, h.rec.decisions, "decision")
	if got.d.Victim.UID != "a" || got.d.Victim.MemoryUsage != 1*Gi {
		t.Fatalf("decided on %s (%d bytes), want a at 1Gi: from the whole snapshot", got.d.Victim.UID, got.d.Victim.MemoryUsage)
	}
	if got.d.Victim.PIDsUnknown {
		t.Error("decided on a pod of a calm listing (task count unread): want the pods listed whole")
	}
	if h.m.CalmLeft() < 1 {
		t.Error("the calm snapshot that was not calm is not counted")
	}
	// Near the threshold, every tick is whole.
	calls := calm.calls.Load()
	h.snap.set(150*Mi, cgroup("/kubepods/pod-b", 12, 200*Mi))
	calm.set(150*Mi, cgroup("/kubepods/pod-b", 12, 900*Mi))
	time.Sleep(150 * time.Millisecond)
	if n := calm.calls.Load() - calls; n > 1 {
		t.Errorf("%d calm snapshots near the threshold, want at most the one in flight", n)
	}
}

func TestPolicyCalm(t *testing.T) {
	p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, hard100), PSIRules: []PSIRule{mustRule(t, "memory.some.avg10>40")}})
	obs := memObs(4 * Gi)
	obs.NodePSI = map[psi.Resource]psi.Stats{psi.Memory: {HasSome: true, HasFull: true}}
	if !p.Calm(obs) {
		t.Error("4Gi available and no pressure: not calm")
	}
	if p.Calm(memObs(150 * Mi)) {
		t.Error("150Mi available, threshold 100Mi: calm")
	}
	hot := memObs(4 * Gi)
	hot.NodePSI = map[psi.Resource]psi.Stats{psi.Memory: {Some: psi.Line{Avg10: 25}, HasSome: true, HasFull: true}}
	if p.Calm(hot) {
		t.Error("memory.some.avg10 25 with a rule at 40: calm")
	}
	// A disk threshold needs no margin: the kubelet's default
	// imagefs.available<15% on a filesystem 25% free is calm, 10% free is
	// not.
	dp := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi", "imagefs.available": "15%"}})})
	disk := func(free int64) Observations {
		o := memObs(4 * Gi)
		o.Signals[nodestats.SignalImageFsAvailable] = nodestats.Observation{Signal: nodestats.SignalImageFsAvailable, Available: free * Gi, Capacity: 100 * Gi}
		return o
	}
	if !dp.Calm(disk(25)) {
		t.Error("imagefs 25% free, threshold 15%: not calm")
	}
	if dp.Calm(disk(10)) {
		t.Error("imagefs 10% free, threshold 15%: calm")
	}
	pp := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, hard100), PSIRules: []PSIRule{mustRule(t, "pod:memory.full.avg10>40")}})
	if pp.Calm(obs) {
		t.Error("a pod PSI rule reads every pod: calm")
	}
}
