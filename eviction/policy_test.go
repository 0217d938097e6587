package eviction

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

// step is one evaluation of a scenario: do runs first (Released,
// Forget), then Evaluate(obs, t0+at); want lists the decisions.
type step struct {
	at    time.Duration
	do    func(p *Policy)
	obs   Observations
	want  []string
	check func(t *testing.T, r Result)
}

func runSteps(t *testing.T, p *Policy, steps []step) {
	t.Helper()
	for i, s := range steps {
		if s.do != nil {
			s.do(p)
		}
		now := t0.Add(s.at)
		if s.obs.Time.IsZero() {
			s.obs.Time = now
		}
		r := p.Evaluate(s.obs, now)
		if got := victims(r.Decisions); !slices.Equal(got, s.want) {
			t.Errorf("step %d (t+%v): decisions %q, want %q; met %+v", i, s.at, got, s.want, r.Met)
		}
		if s.check != nil {
			s.check(t, r)
		}
	}
}

func refused(p Pod) Pod {
	p.Refused = true
	return p
}

func TestPolicyScenarios(t *testing.T) {
	a, b, c := pod("a", 1*Gi, 100*Mi), pod("b", 500*Mi, 100*Mi), pod("c", 200*Mi, 100*Mi)
	hard100 := ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}}
	soft500 := ThresholdConfig{
		EvictionSoft:            map[string]string{"memory.available": "500Mi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "30s"},
	}
	both := ThresholdConfig{
		EvictionHard:            map[string]string{"memory.available": "100Mi"},
		EvictionSoft:            map[string]string{"memory.available": "500Mi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "10s"},
	}
	aFreed := a
	aFreed.MemoryUsage = 10 * Mi
	released := func(uid types.UID) func(*Policy) { return func(p *Policy) { p.Released(uid) } }
	forget := func(uid types.UID) func(*Policy) { return func(p *Policy) { p.Forget(uid) } }

	tests := []struct {
		name  string
		cfg   ThresholdConfig
		mod   func(*PolicyConfig)
		steps []step
	}{
		{
			name: "a hard crossing evicts at once, with grace 0",
			cfg:  hard100,
			steps: []step{
				{at: 0, obs: memObs(200*Mi, a, b, c)},
				{at: time.Millisecond, obs: memObs(80*Mi, a, b, c), want: []string{"hard a"}, check: func(t *testing.T, r Result) {
					if d := r.Decisions[0]; d.GracePeriod != 0 || d.Rank != 0 || d.Resource != ResourceMemory || d.Signal != "memory.available" || d.Threshold != "memory.available<100Mi" || d.Observed != float64(80*Mi) {
						t.Errorf("decision %+v", d)
					}
				}},
			},
		},
		{
			name: "a soft threshold waits for its grace period and starts over when no longer met",
			cfg:  soft500,
			steps: []step{
				{at: 0, obs: memObs(400*Mi, a, b)},
				{at: 20 * time.Second, obs: memObs(400*Mi, a, b), check: wantState(StateGracePeriod)},
				{at: 25 * time.Second, obs: memObs(600*Mi, a, b)},
				{at: 30 * time.Second, obs: memObs(400*Mi, a, b)},
				{at: 59 * time.Second, obs: memObs(400*Mi, a, b)},
				{at: 60 * time.Second, obs: memObs(400*Mi, a, b), want: []string{"soft a"}, check: func(t *testing.T, r Result) {
					if g := r.Decisions[0].GracePeriod; g != 30*time.Second {
						t.Errorf("grace %v, want the pod's 30s", g)
					}
				}},
			},
		},
		{
			name: "a soft decision passes a refused pod by for the next; a hard one still takes it",
			cfg:  both,
			steps: []step{
				{at: 0, obs: memObs(400*Mi, refused(a), b)},
				{at: 10 * time.Second, obs: memObs(400*Mi, refused(a), b), want: []string{"soft b"}},
				{at: 11 * time.Second, obs: memObs(80*Mi, refused(a), b), want: []string{"hard a"}},
			},
		},
		{
			name: "the max pod grace period caps a soft eviction's grace",
			cfg:  soft500,
			mod:  func(c *PolicyConfig) { c.EvictionMaxPodGracePeriod = 5 * time.Second },
			steps: []step{
				{at: 0, obs: memObs(400*Mi, a)},
				{at: 30 * time.Second, obs: memObs(400*Mi, a), want: []string{"soft a"}, check: func(t *testing.T, r Result) {
					if g := r.Decisions[0].GracePeriod; g != 5*time.Second {
						t.Errorf("grace %v, want 5s", g)
					}
				}},
			},
		},
		{
			name: "pending release prevents a second eviction while the victim still holds its memory",
			cfg:  hard100,
			steps: []step{
				{at: 0, obs: memObs(80*Mi, a, b, c), want: []string{"hard a"}},
				{at: time.Second, obs: memObs(70*Mi, a, b, c), check: func(t *testing.T, r Result) {
					if r.Pending != 1*Gi {
						t.Errorf("pending %d, want 1Gi", r.Pending)
					}
					wantState(StatePendingRelease)(t, r)
				}},
				{at: 2 * time.Second, obs: memObs(1100*Mi, b, c)},
			},
		},
		{
			name: "a victim that vanished no longer counts, and the next pod goes if pressure remains",
			cfg:  hard100,
			steps: []step{
				{at: 0, obs: memObs(80*Mi, a, b, c), want: []string{"hard a"}},
				{at: time.Second, obs: memObs(90*Mi, b, c), want: []string{"hard b"}},
			},
		},
		{
			name: "only what the victim still holds is credited",
			cfg:  hard100,
			steps: []step{
				{at: 0, obs: memObs(80*Mi, a, b, c), want: []string{"hard a"}},
				{at: time.Second, obs: memObs(70*Mi, aFreed, b, c), want: []string{"hard b"}},
			},
		},
		{
			name: "Forget ends pending release and the cool-down",
			cfg:  hard100,
			mod:  func(c *PolicyConfig) { c.CoolDown = time.Minute },
			steps: []step{
				{at: 0, obs: memObs(80*Mi, a, b), want: []string{"hard a"}},
				{at: time.Second, obs: memObs(80*Mi, a, b)},
				{at: 2 * time.Second, do: forget("a"), obs: memObs(80*Mi, a, b), want: []string{"hard a"}},
			},
		},
		{
			name: "pending release times out",
			cfg:  hard100,
			steps: []step{
				{at: 0, obs: memObs(80*Mi, a, b), want: []string{"hard a"}},
				{at: 29 * time.Second, obs: memObs(80*Mi, a, b)},
				{at: 30 * time.Second, obs: memObs(80*Mi, a, b), want: []string{"hard a"}},
			},
		},
		{
			name: "Released ends pending release",
			cfg:  hard100,
			steps: []step{
				{at: 0, obs: memObs(80*Mi, a, b), want: []string{"hard a"}},
				{at: time.Second, do: released("a"), obs: memObs(80*Mi, a, b), want: []string{"hard a"}},
			},
		},
		{
			name: "a hard threshold escalates a soft eviction in progress",
			cfg:  both,
			steps: []step{
				{at: 0, obs: memObs(400*Mi, a, b, c)},
				{at: 10 * time.Second, obs: memObs(400*Mi, a, b, c), want: []string{"soft a"}},
				// a's 1Gi counts for the soft threshold only.
				{at: 11 * time.Second, obs: memObs(300*Mi, a, b, c)},
				{at: 12 * time.Second, obs: memObs(80*Mi, a, b, c), want: []string{"hard a"}},
				{at: 13 * time.Second, obs: memObs(70*Mi, a, b, c)},
			},
		},
		{
			name: "a hard threshold is not blocked by a soft victim the actor is still stopping",
			cfg:  both,
			steps: []step{
				{at: 0, obs: memObs(400*Mi, a, b, c)},
				{at: 10 * time.Second, obs: memObs(400*Mi, a, b, c), want: []string{"soft a"}},
				{at: 11 * time.Second, obs: inFlight(memObs(80*Mi, a, b, c), "a"), want: []string{"hard b"}},
				{at: 12 * time.Second, obs: inFlight(memObs(80*Mi, a, b, c), "a")},
			},
		},
		{
			name: "minimum reclaim keeps evicting until available reaches threshold plus minimum",
			cfg: ThresholdConfig{
				EvictionHard:           map[string]string{"memory.available": "100Mi"},
				EvictionMinimumReclaim: map[string]string{"memory.available": "200Mi"},
			},
			steps: []step{
				{at: 0, obs: memObs(80*Mi, a, b, c), want: []string{"hard a"}},
				{at: time.Second, obs: memObs(130*Mi, b, c), want: []string{"hard b"}},
				{at: 2 * time.Second, obs: memObs(290*Mi, b, c)}, // b pending: 290+500 >= 300
				{at: 3 * time.Second, obs: memObs(310*Mi, c)},
				{at: 4 * time.Second, obs: memObs(130*Mi, c)}, // resolved: back to the plain threshold
			},
		},
		{
			name: "without minimum reclaim the threshold resolves at its quantity",
			cfg:  hard100,
			steps: []step{
				{at: 0, obs: memObs(80*Mi, a, b, c), want: []string{"hard a"}},
				{at: time.Second, obs: memObs(130*Mi, b, c)},
			},
		},
		{
			name: "a cool-down holds soft decisions but not a hard threshold with nothing pending",
			cfg:  both,
			mod:  func(c *PolicyConfig) { c.CoolDown = 20 * time.Second },
			steps: []step{
				{at: 0, obs: memObs(400*Mi, a, b, c)},
				{at: 10 * time.Second, obs: memObs(400*Mi, a, b, c), want: []string{"soft a"}},
				{at: 11 * time.Second, do: released("a"), obs: memObs(400*Mi, b, c), check: wantState(StateCoolDown)},
				{at: 12 * time.Second, obs: memObs(80*Mi, b, c), want: []string{"hard b"}},
				{at: 13 * time.Second, do: released("b"), obs: memObs(400*Mi, c), check: wantState(StateCoolDown)},
				{at: 32 * time.Second, obs: memObs(400*Mi, c), want: []string{"soft c"}},
			},
		},
		{
			name: "dry run decides without pending release",
			cfg:  hard100,
			mod:  func(c *PolicyConfig) { c.DryRun = true },
			steps: []step{
				{at: 0, obs: memObs(80*Mi, a, b), want: []string{"dry hard a"}},
				{at: time.Second, obs: memObs(80*Mi, a, b), want: []string{"dry hard a"}, check: func(t *testing.T, r Result) {
					if r.Pending != 0 {
						t.Errorf("pending %d in dry run", r.Pending)
					}
				}},
			},
		},
		{
			name: "a missing observation is not met",
			cfg:  hard100,
			steps: []step{
				{at: 0, obs: Observations{Pods: []Pod{a}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := PolicyConfig{Thresholds: mustThresholds(t, tt.cfg)}
			if tt.mod != nil {
				tt.mod(&cfg)
			}
			runSteps(t, mustPolicy(t, cfg), tt.steps)
		})
	}
}

func inFlight(o Observations, uids ...types.UID) Observations {
	o.InFlight = map[types.UID]bool{}
	for _, u := range uids {
		o.InFlight[u] = true
	}
	return o
}

// wantState checks that the first met threshold is in state s.
func wantState(s string) func(*testing.T, Result) {
	return func(t *testing.T, r Result) {
		t.Helper()
		if len(r.Met) == 0 || r.Met[0].State != s {
			t.Errorf("met %+v, want state %q", r.Met, s)
		}
	}
}

func TestConditionsHysteresis(t *testing.T) {
	for _, tt := range []struct {
		name   string
		period time.Duration
		at     []time.Duration // evaluation times; pressure only at the first
		want   []bool
	}{
		{"the default transition period is five minutes", 0,
			[]time.Duration{0, time.Second, 4*time.Minute + 59*time.Second, 5 * time.Minute}, []bool{true, true, true, false}},
		{"a configured transition period applies", 30 * time.Second,
			[]time.Duration{0, 29 * time.Second, 30 * time.Second}, []bool{true, true, false}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, PolicyConfig{
				Thresholds:                       mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}}),
				EvictionPressureTransitionPeriod: tt.period,
			})
			for i, at := range tt.at {
				avail := 500 * Mi
				if i == 0 {
					avail = 80 * Mi
				}
				r := p.Evaluate(memObs(avail), t0.Add(at))
				if r.Conditions[MemoryPressure] != tt.want[i] || r.Conditions[DiskPressure] || r.Conditions[PIDPressure] {
					t.Errorf("t+%v: conditions %v, want MemoryPressure=%v", at, r.Conditions, tt.want[i])
				}
				if got := p.Conditions()[MemoryPressure]; got != tt.want[i] {
					t.Errorf("t+%v: Conditions() %v", at, got)
				}
			}
		})
	}
}

func TestNeverEvicted(t *testing.T) {
	hog := func(name string, mod func(*Pod)) Pod {
		p := pod(name, 4*Gi, 0)
		p.QOS = corev1.PodQOSBestEffort
		mod(&p)
		return p
	}
	critical := hog("critical", func(p *Pod) { p.Critical = true })
	exempt := hog("exempt", func(p *Pod) { p.Exempt = true })
	static := hog("static", func(p *Pod) { p.Static = true; p.Priority = 0 })
	sysPrio := hog("system-critical", func(p *Pod) { p.Priority = SystemCriticalPriority })
	small := pod("small", 10*Mi, 100*Mi)
	p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}})})

	t.Run("the only evictable pod goes, whatever its rank", func(t *testing.T) {
		r := p.Evaluate(memObs(80*Mi, critical, exempt, static, sysPrio, small), t0)
		if got := victims(r.Decisions); !slices.Equal(got, []string{"hard small"}) {
			t.Fatalf("decisions %q", got)
		}
		if r.Decisions[0].Rank != 4 {
			t.Errorf("rank %d, want 4 (after the four hogs)", r.Decisions[0].Rank)
		}
	})
	t.Run("with no evictable pod there is no decision", func(t *testing.T) {
		r := p.Evaluate(memObs(80*Mi, critical, exempt, static, sysPrio), t0.Add(time.Second))
		if len(r.Decisions) != 0 {
			t.Fatalf("decisions %q", victims(r.Decisions))
		}
		wantState(StateNoVictim)(t, r)
		if r.NextVictim != nil {
			t.Errorf("next victim %s", r.NextVictim.Name)
		}
	})
}

func TestTieBreakers(t *testing.T) {
	mk := func(name string, stall time.Duration, id uint64) Pod {
		p := pod(name, 300*Mi, 100*Mi)
		p.ReclaimStall, p.CgroupID = stall, id
		return p
	}
	for _, tt := range []struct {
		name string
		pods []Pod
		want string
	}{
		{"more reclaim stall goes first", []Pod{mk("x", time.Millisecond, 1), mk("y", time.Second, 2)}, "y"},
		{"then the lower cgroup id", []Pod{mk("x", time.Second, 9), mk("y", time.Second, 3)}, "y"},
		{"then the lower uid", []Pod{mk("y", 0, 0), mk("x", 0, 0)}, "x"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}})})
			r := p.Evaluate(memObs(80*Mi, tt.pods...), t0)
			if len(r.Decisions) != 1 || r.Decisions[0].Victim.Name != tt.want {
				t.Errorf("decisions %q, want %s", victims(r.Decisions), tt.want)
			}
		})
	}
}

func names(ps []*Pod) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// TestRankLikeTheKubelet follows the cases of the kubelet's helpers_test.go
// (TestOrderedByExceedsRequestMemory, TestOrderedByPriority,
// TestOrderedbyMemory, TestSortByEvictionPriority...).
func TestRankLikeTheKubelet(t *testing.T) {
	withPrio := func(p Pod, prio int32) Pod { p.Priority = prio; return p }
	unknown := pod("no-stats", 0, 0)
	unknown.UsageUnknown = true
	disk := func(name string, usage, request int64, prio int32) Pod {
		p := pod(name, 0, 0)
		p.EphemeralUsage, p.EphemeralRequest, p.Priority = usage, request, prio
		return p
	}
	pids := func(name string, n int64, prio int32) Pod {
		p := pod(name, 0, 0)
		p.PIDs, p.Priority = n, prio
		return p
	}
	inodes := func(name string, n int64, prio int32) Pod {
		p := pod(name, 0, 0)
		p.Inodes, p.Priority = n, prio
		return p
	}
	unknownInodes := func(name string, prio int32) Pod {
		p := inodes(name, 0, prio)
		p.InodesUnknown = true
		return p
	}
	unknownPIDs := func(name string, prio int32) Pod {
		p := pids(name, 0, prio)
		p.PIDsUnknown = true
		return p
	}
	for _, tt := range []struct {
		name string
		sig  nodestats.Signal
		pods []Pod
		want []string
	}{
		{"pods above their memory request go before those below", nodestats.SignalMemoryAvailable,
			[]Pod{pod("below", 90*Mi, 100*Mi), pod("above", 101*Mi, 100*Mi)}, []string{"above", "below"}},
		{"among pods above their request the lower priority goes first", nodestats.SignalMemoryAvailable,
			[]Pod{withPrio(pod("big-high", 2*Gi, 0), 100), withPrio(pod("small-low", 200*Mi, 0), -10)}, []string{"small-low", "big-high"}},
		{"a pod above its request goes first even with a higher priority", nodestats.SignalMemoryAvailable,
			[]Pod{withPrio(pod("below-low", 50*Mi, 100*Mi), 0), withPrio(pod("above-high", 200*Mi, 100*Mi), 1000)}, []string{"above-high", "below-low"}},
		{"same priority: larger usage above request first (best effort, burstable, guaranteed)", nodestats.SignalMemoryAvailable,
			[]Pod{pod("guaranteed", 1*Gi, 1*Gi), pod("burstable", 600*Mi, 100*Mi), pod("best-effort", 300*Mi, 0)},
			[]string{"burstable", "best-effort", "guaranteed"}},
		{"a pod without stats goes first", nodestats.SignalMemoryAvailable,
			[]Pod{pod("hog", 4*Gi, 0), unknown}, []string{"no-stats", "hog"}},
		{"allocatable memory ranks like memory", nodestats.SignalAllocatableMemoryAvailable,
			[]Pod{pod("below", 90*Mi, 100*Mi), pod("above", 101*Mi, 100*Mi)}, []string{"above", "below"}},
		{"disk: above request first, then priority, then usage above request", nodestats.SignalNodeFsAvailable,
			[]Pod{disk("below", 1*Gi, 2*Gi, -5), disk("above-high", 3*Gi, 1*Gi, 10), disk("above-low-small", 2*Gi, 1*Gi, 0), disk("above-low-big", 5*Gi, 1*Gi, 0)},
			[]string{"above-low-big", "above-low-small", "above-high", "below"}},
		{"imagefs ranks like nodefs", nodestats.SignalImageFsAvailable,
			[]Pod{disk("small", 1*Gi, 0, 0), disk("big", 3*Gi, 0, 0)}, []string{"big", "small"}},
		{"inodes: users first, then priority, then count", nodestats.SignalNodeFsInodesFree,
			[]Pod{inodes("none", 0, -100), inodes("few", 10, 0), inodes("many", 1000, 0), inodes("many-high", 5000, 10)},
			[]string{"many", "few", "many-high", "none"}},
		{"pids: priority first, then count", nodestats.SignalPIDAvailable,
			[]Pod{pids("many-high", 5000, 10), pids("few-low", 10, 0), pids("many-low", 1000, 0)},
			[]string{"many-low", "few-low", "many-high"}},
		{"inodes: a pod without a figure goes first, before priority", nodestats.SignalNodeFsInodesFree,
			[]Pod{inodes("many-low", 1000, -10), unknownInodes("no-figure", 10)}, []string{"no-figure", "many-low"}},
		{"pids: a pod whose count was not read goes first among its priority", nodestats.SignalPIDAvailable,
			[]Pod{pids("many", 1000, 0), unknownPIDs("unread", 0), unknownPIDs("unread-high", 10)},
			[]string{"unread", "many", "unread-high"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := names(Rank(tt.pods, tt.sig)); !slices.Equal(got, tt.want) {
				t.Errorf("Rank = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestOneDecisionPerResource(t *testing.T) {
	p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{
		"memory.available": "100Mi", "allocatableMemory.available": "50Mi", "nodefs.available": "10%", "pid.available": "1000",
	}})})
	a := pod("a", 1*Gi, 0)
	d := pod("d", 0, 0)
	d.EphemeralUsage = 50 * Gi
	pp := pod("p", 0, 0)
	pp.PIDs = 30000
	obs := memObs(80*Mi, a, d, pp)
	obs.Signals[nodestats.SignalAllocatableMemoryAvailable] = nodestats.Observation{Signal: nodestats.SignalAllocatableMemoryAvailable, Available: 10 * Mi, Capacity: 6 * Gi}
	obs.Signals[nodestats.SignalNodeFsAvailable] = nodestats.Observation{Signal: nodestats.SignalNodeFsAvailable, Available: 5 * Gi, Capacity: 100 * Gi}
	obs.Signals[nodestats.SignalPIDAvailable] = nodestats.Observation{Signal: nodestats.SignalPIDAvailable, Available: 500, Capacity: 32768}
	r := p.Evaluate(obs, t0)
	if got := victims(r.Decisions); !slices.Equal(got, []string{"hard a", "hard d", "hard p"}) {
		t.Fatalf("decisions %q", got)
	}
	for i, want := range []struct {
		res Resource
		sig string
		msg string
	}{
		{ResourceMemory, "memory.available", "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. Pod a was using 1Gi, request is 0, has larger consumption of memory."},
		{ResourceDisk, "nodefs.available", "The node was low on resource: ephemeral-storage. Threshold quantity: 10Gi, available: 5Gi. Pod d was using 50Gi, request is 0, has larger consumption of ephemeral-storage."},
		{ResourcePID, "pid.available", "The node was low on resource: pids. Threshold quantity: 1k, available: 500."},
	} {
		d := r.Decisions[i]
		if d.Resource != want.res || d.Signal != want.sig || d.Message != want.msg {
			t.Errorf("decision %d: %s %s %q, want %s %s %q", i, d.Resource, d.Signal, d.Message, want.res, want.sig, want.msg)
		}
	}
	// allocatableMemory.available was met too, but memory had decided.
	states := map[string]string{}
	for _, m := range r.Met {
		states[m.Signal] = m.State
	}
	if states["allocatableMemory.available"] != StateDecided || states["memory.available"] != StateEvict {
		t.Errorf("states %v", states)
	}
	if !r.Conditions[MemoryPressure] || !r.Conditions[DiskPressure] || !r.Conditions[PIDPressure] {
		t.Errorf("conditions %v", r.Conditions)
	}
}

func TestDiskPendingRelease(t *testing.T) {
	p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"nodefs.available": "10Gi"}})})
	d1, d2 := pod("d1", 0, 0), pod("d2", 0, 0)
	d1.EphemeralUsage, d2.EphemeralUsage = 8*Gi, 4*Gi
	fs := func(avail int64, pods ...Pod) Observations {
		return Observations{Signals: map[nodestats.Signal]nodestats.Observation{
			nodestats.SignalNodeFsAvailable: {Signal: nodestats.SignalNodeFsAvailable, Available: avail, Capacity: 100 * Gi},
		}, Pods: pods}
	}
	runSteps(t, p, []step{
		{at: 0, obs: fs(5*Gi, d1, d2), want: []string{"hard d1"}},
		{at: time.Second, obs: fs(5*Gi, d1, d2)}, // 5+8 >= 10
		{at: 2 * time.Second, obs: fs(1*Gi, d1, d2), want: []string{"hard d2"}},
	})
}

func TestPSIRules(t *testing.T) {
	mem := func(v float64) map[psi.Resource]psi.Stats {
		return map[psi.Resource]psi.Stats{psi.Memory: {Full: psi.Line{Avg10: v}, HasFull: true, HasSome: true, Some: psi.Line{Avg10: v}}}
	}
	withPSI := func(o Observations, v float64) Observations { o.NodePSI = mem(v); return o }
	a, b := pod("a", 1*Gi, 0), pod("b", 500*Mi, 0)
	t.Run("a node rule evicts the top-ranked pod once met for its duration", func(t *testing.T) {
		p := mustPolicy(t, PolicyConfig{PSIRules: []PSIRule{mustRule(t, "memory.full.avg10>40 for 10s")}, EvictionMaxPodGracePeriod: 10 * time.Second})
		runSteps(t, p, []step{
			{at: 0, obs: withPSI(memObs(4*Gi, a, b), 45), check: wantState(StateGracePeriod)},
			{at: 5 * time.Second, obs: withPSI(memObs(4*Gi, a, b), 45)},
			{at: 10 * time.Second, obs: withPSI(memObs(4*Gi, a, b), 45), want: []string{"soft a"}, check: func(t *testing.T, r Result) {
				d := r.Decisions[0]
				if d.GracePeriod != 10*time.Second || d.Signal != "memory.full.avg10" || d.Threshold != "memory.full.avg10>40 for 10s" || d.Observed != 45 {
					t.Errorf("decision %+v", d)
				}
				if !r.Conditions[MemoryPressure] {
					t.Error("no MemoryPressure under a met memory PSI rule")
				}
			}},
			{at: 11 * time.Second, obs: withPSI(memObs(4*Gi, a, b), 45), check: wantState(StateGracePeriod)},
			// a is gone; the rule must hold 10 s again.
			{at: 15 * time.Second, obs: withPSI(memObs(4*Gi, b), 45)},
			{at: 20 * time.Second, obs: withPSI(memObs(4*Gi, b), 45), want: []string{"soft b"}},
		})
	})
	t.Run("a node rule waits for a pending victim", func(t *testing.T) {
		p := mustPolicy(t, PolicyConfig{PSIRules: []PSIRule{mustRule(t, "memory.some.avg10>10")}})
		runSteps(t, p, []step{
			{at: 0, obs: withPSI(memObs(4*Gi, a, b), 20), want: []string{"soft a"}},
			{at: time.Second, obs: withPSI(memObs(4*Gi, a, b), 20), check: wantState(StatePendingRelease)},
		})
	})
	t.Run("a node rule that stops being met starts over", func(t *testing.T) {
		p := mustPolicy(t, PolicyConfig{PSIRules: []PSIRule{mustRule(t, "memory.full.avg10>40 for 10s")}})
		runSteps(t, p, []step{
			{at: 0, obs: withPSI(memObs(4*Gi, a), 45)},
			{at: 5 * time.Second, obs: withPSI(memObs(4*Gi, a), 40)},
			{at: 10 * time.Second, obs: withPSI(memObs(4*Gi, a), 45)},
			{at: 19 * time.Second, obs: withPSI(memObs(4*Gi, a), 45)},
			{at: 20 * time.Second, obs: withPSI(memObs(4*Gi, a), 45), want: []string{"soft a"}},
		})
	})
	t.Run("a pod rule evicts that pod, not the top-ranked one", func(t *testing.T) {
		p := mustPolicy(t, PolicyConfig{PSIRules: []PSIRule{mustRule(t, "pod:memory.some.avg10>60 for 5s")}})
		stalled := b
		stalled.PSI, stalled.HasPSI = psi.Stats{Some: psi.Line{Avg10: 70}, HasSome: true}, true
		crit := pod("crit", 10*Mi, 0)
		crit.Critical, crit.PSI, crit.HasPSI = true, psi.Stats{Some: psi.Line{Avg10: 99}, HasSome: true}, true
		runSteps(t, p, []step{
			{at: 0, obs: memObs(4*Gi, a, stalled, crit)},
			{at: 5 * time.Second, obs: memObs(4*Gi, a, stalled, crit), want: []string{"soft b"}, check: func(t *testing.T, r Result) {
				if d := r.Decisions[0]; d.Signal != "pod:memory.some.avg10" || d.Rank != 1 || !strings.HasPrefix(d.Message, "The pod was under pressure: memory.") {
					t.Errorf("decision %+v", d)
				}
			}},
			{at: 6 * time.Second, obs: memObs(4*Gi, a, stalled, crit)},
		})
	})
	t.Run("io and cpu rules are their own resources", func(t *testing.T) {
		p := mustPolicy(t, PolicyConfig{
			PSIRules:   []PSIRule{mustRule(t, "io.some.avg10>50"), mustRule(t, "pod:cpu.full.avg60>50")},
			Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}}),
		})
		cpuHog := pod("cpu-hog", 0, 0)
		cpuHog.CPUPSI, cpuHog.HasCPUPSI = psi.Stats{Full: psi.Line{Avg60: 80}, HasFull: true}, true
		obs := memObs(80*Mi, a, b, cpuHog)
		obs.NodePSI = map[psi.Resource]psi.Stats{psi.IO: {Some: psi.Line{Avg10: 60}, HasSome: true}}
		r := p.Evaluate(obs, t0)
		got := map[Resource]string{}
		for _, d := range r.Decisions {
			got[d.Resource] = d.Victim.Name
		}
		if want := map[Resource]string{ResourceMemory: "a", ResourceIO: "b", ResourceCPU: "cpu-hog"}; !mapsEqual(got, want) {
			t.Errorf("decisions %v, want %v", got, want)
		}
	})
}

func mapsEqual[K comparable, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestNextVictim(t *testing.T) {
	p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}})})
	a, b := pod("a", 1*Gi, 0), pod("b", 500*Mi, 0)
	for _, tt := range []struct {
		name  string
		avail int64
		want  string
	}{
		{"far from the threshold there is none", 300 * Mi, ""},
		{"within twice the threshold it is the top-ranked pod", 150 * Mi, "a"},
		{"once a is killed hard the next is b", 80 * Mi, "b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := p.Evaluate(memObs(tt.avail, a, b), t0)
			got := ""
			if r.NextVictim != nil {
				got = r.NextVictim.Name
			}
			if got != tt.want {
				t.Errorf("next victim %q, want %q", got, tt.want)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	be := pod("be", 0, 0)
	be.QOS = corev1.PodQOSBestEffort
	bu := pod("bu", 0, 0)
	critBE := be
	critBE.Critical = true
	staticBE := be
	staticBE.Static = true
	memPressure := func(p *Policy) { p.Evaluate(memObs(80*Mi), t0) }
	diskPressure := func(p *Policy) {
		p.Evaluate(Observations{Signals: map[nodestats.Signal]nodestats.Observation{
			nodestats.SignalNodeFsAvailable: {Signal: nodestats.SignalNodeFsAvailable, Available: 1, Capacity: 100 * Gi},
		}}, t0)
	}
	for _, tt := range []struct {
		name    string
		setup   func(*Policy)
		pod     Pod
		wantErr string
	}{
		{"without pressure a best-effort pod is admitted", func(*Policy) {}, be, ""},
		{"under memory pressure a best-effort pod is refused", memPressure, be, "The node had condition: [MemoryPressure]."},
		{"under memory pressure a burstable pod is admitted", memPressure, bu, ""},
		{"under memory pressure a critical best-effort pod is admitted", memPressure, critBE, ""},
		{"under memory pressure a static best-effort pod is admitted", memPressure, staticBE, ""},
		{"under disk pressure every other pod is refused", diskPressure, bu, "The node had condition: [DiskPressure]."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}})})
			tt.setup(p)
			err := p.Admit(tt.pod)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Admit: %v", err)
				}
				return
			}
			var ae *AdmitError
			if err == nil || err.Error() != tt.wantErr || !errors.Is(err, ErrNotAdmitted) || !errors.As(err, &ae) {
				t.Fatalf("Admit: %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestPolicyConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  PolicyConfig
		want string
	}{
		{"a negative cool-down", PolicyConfig{CoolDown: -time.Second}, "coolDown"},
		{"an unknown signal", PolicyConfig{Thresholds: []Threshold{{Signal: "swap.available", Value: ThresholdValue{Quantity: 1}}}}, "thresholds[0]"},
		{"a zero threshold", PolicyConfig{Thresholds: []Threshold{{Signal: nodestats.SignalMemoryAvailable}}}, "thresholds[0]"},
		{"a negative PSI duration", PolicyConfig{PSIRules: []PSIRule{{Resource: psi.Memory, Window: 10 * time.Second, Percent: 5, For: -1}}}, "psiRules[0]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPolicy(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupportedSignal) {
				t.Fatalf("NewPolicy: %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

func BenchmarkEvaluate(b *testing.B) {
	ts, err := ParseThresholds(ThresholdConfig{
		EvictionHard:            map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "pid.available": "1000"},
		EvictionSoft:            map[string]string{"memory.available": "500Mi"},
		EvictionSoftGracePeriod: map[string]string{"memory.available": "30s"},
	})
	if err != nil {
		b.Fatal(err)
	}
	rule, _ := ParsePSIRule("memory.full.avg10>40 for 10s")
	p, err := NewPolicy(PolicyConfig{Thresholds: ts, PSIRules: []PSIRule{rule}, DryRun: true})
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]Pod, 250) // a dense node
	for i := range pods {
		pods[i] = pod(string(rune('a'+i%26))+strings.Repeat("x", i/26), int64(i)*Mi, 100*Mi)
	}
	obs := memObs(150*Mi, pods...) // near the threshold: ranking runs
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p.Evaluate(obs, t0.Add(time.Duration(i)*time.Millisecond))
	}
}
