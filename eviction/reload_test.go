package eviction

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/pressure"
)

func TestReconfigureKeepsWhatThePolicyLearnt(t *testing.T) {
	a, b := pod("a", 1*Gi, 0), pod("b", 500*Mi, 0)
	reconfigure := func(t *testing.T, c PolicyConfig) func(p *Policy) {
		return func(p *Policy) {
			if err := p.Reconfigure(c); err != nil {
				t.Fatalf("Reconfigure: %v", err)
			}
		}
	}
	t.Run("a victim pending release still counts after a reload raised the threshold", func(t *testing.T) {
		p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}})})
		runSteps(t, p, []step{
			{at: 0, obs: memObs(80*Mi, a, b), want: []string{"hard a"}},
			// 150Mi + a's 1Gi pending >= 200Mi: nothing more to do. A
			// policy that forgot a would evict b.
			{at: time.Second, do: reconfigure(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "200Mi"}})}),
				obs: memObs(150*Mi, a, b), check: func(t *testing.T, r Result) {
					if len(r.Met) != 1 || r.Met[0].Threshold != "memory.available<200Mi" {
						t.Errorf("met %+v, want the new threshold", r.Met)
					}
				}},
		})
	})
	t.Run("a soft threshold keeps its grace period across a reload", func(t *testing.T) {
		soft := func(v string) PolicyConfig {
			return PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{
				EvictionSoft: map[string]string{"memory.available": v}, EvictionSoftGracePeriod: map[string]string{"memory.available": "30s"}})}
		}
		p := mustPolicy(t, soft("1Gi"))
		runSteps(t, p, []step{
			{at: 0, obs: memObs(500*Mi, a, b)},
			{at: 20 * time.Second, do: reconfigure(t, soft("2Gi")), obs: memObs(500*Mi, a, b)},
			{at: 31 * time.Second, obs: memObs(500*Mi, a, b), want: []string{"soft a"}},
		})
	})
	t.Run("a new threshold starts with no history", func(t *testing.T) {
		p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"nodefs.available": "1Gi"}})})
		runSteps(t, p, []step{
			{at: 0, obs: memObs(500*Mi, a, b)},
			{at: 20 * time.Second, do: reconfigure(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{
				EvictionSoft: map[string]string{"memory.available": "1Gi"}, EvictionSoftGracePeriod: map[string]string{"memory.available": "30s"}})}),
				obs: memObs(500*Mi, a, b)},
			{at: 31 * time.Second, obs: memObs(500*Mi, a, b)}, // met for 11 s of 30
			{at: 51 * time.Second, obs: memObs(500*Mi, a, b), want: []string{"soft a"}},
		})
	})
	t.Run("an invalid configuration changes nothing", func(t *testing.T) {
		p := mustPolicy(t, PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}})})
		err := p.Reconfigure(PolicyConfig{CoolDown: -time.Second})
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "coolDown") {
			t.Fatalf("got %v, want ErrInvalid naming coolDown", err)
		}
		if th := p.Config().Thresholds; len(th) != 1 || th[0].String() != "memory.available<100Mi" {
			t.Errorf("thresholds after a refused reload: %v", th)
		}
		runSteps(t, p, []step{{at: 0, obs: memObs(80*Mi, a, b), want: []string{"hard a"}}})
	})
}

func snapshotNow(context.Context) (*pressure.Snapshot, error) {
	return &pressure.Snapshot{Time: time.Now()}, nil
}

func TestSetPolicyKeepsThePolicyAndTheManagersDryRun(t *testing.T) {
	m, err := NewManager(ManagerConfig{Actor: &fakeActor{}, Snapshot: snapshotNow, DryRun: true,
		Policy: PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "100Mi"}})}})
	if err != nil {
		t.Fatal(err)
	}
	before := m.Policy()
	if err := m.SetPolicy(PolicyConfig{Thresholds: mustThresholds(t, ThresholdConfig{EvictionHard: map[string]string{"memory.available": "300Mi"}})}); err != nil {
		t.Fatal(err)
	}
	if m.Policy() != before {
		t.Error("SetPolicy replaced the Policy: an admission hook bound to it would go stale")
	}
	c := m.Policy().Config()
	if !c.DryRun || c.Thresholds[0].String() != "memory.available<300Mi" || c.EvictionPressureTransitionPeriod != DefaultPressureTransitionPeriod {
		t.Errorf("config after SetPolicy: dry run %v, %v, transition %v", c.DryRun, c.Thresholds, c.EvictionPressureTransitionPeriod)
	}
	if err := m.SetPolicy(PolicyConfig{EvictionMaxPodGracePeriod: -time.Second}); err == nil || !strings.Contains(err.Error(), "evictionMaxPodGracePeriod") {
		t.Errorf("got %v, want an error naming evictionMaxPodGracePeriod", err)
	}
}
