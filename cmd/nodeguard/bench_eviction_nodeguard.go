package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/bench"
	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/oom"
	"github.com/nodeguard/nodeguard/oom/tripwire"
	"github.com/nodeguard/nodeguard/pressure"
)

// nodeguardStrategy is the real thing in the OOM race: the oom.Manager
// with its policy, woken by the tripwire on the pod root and its safety
// tick, confirming on fresh snapshots, choosing its own victim. For the
// race to be fair, its Actor does not evict itself: it hands the victim
// to the benchmark's shared action (TrialEnv.EvictPod), the one every
// strategy uses.
type nodeguardStrategy struct {
	mgr    *lifecycle.Manager
	layout *cgroups.Layout
	log    *slog.Logger
}

func (s *nodeguardStrategy) Name() string { return "nodeguard" }

// benchActor lists pods through the lifecycle and evicts through the
// benchmark's shared action.
type benchActor struct {
	pods *lifecycle.EvictionActor
	env  *bench.TrialEnv
}

func (a *benchActor) Pods() []oom.PodRef { return a.pods.Pods() }

func (a *benchActor) Evict(ctx context.Context, d oom.Decision) error {
	// The observation that crossed is the fresh snapshot the decision
	// was confirmed on (the tripwire fired earlier still).
	a.env.Detected(d.ObservedAt)
	return a.env.EvictPod(ctx, d.Victim.UID, "nodeguard: "+d.Threshold)
}

func (a *benchActor) SetOOMScoreAdj(uid types.UID, adj int) error {
	return a.pods.SetOOMScoreAdj(uid, adj)
}
func (a *benchActor) RestoreOOMScoreAdj(uid types.UID) error { return a.pods.RestoreOOMScoreAdj(uid) }

func (s *nodeguardStrategy) Run(ctx context.Context, env *bench.TrialEnv) error {
	mem, err := env.MemoryDir()
	if err != nil {
		return err
	}
	snapper, err := pressure.New(pressure.Config{
		Layout: s.layout, Roots: []string{env.PodRoot}, PodsRoot: env.PodRoot, Allocatable: env.Budget,
		RescanEvery: 100 * time.Millisecond, Logger: s.log,
	})
	if err != nil {
		return fmt.Errorf("nodeguard strategy: %w", err)
	}
	defer snapper.Close()
	th, err := oom.ParseThresholds(oom.ThresholdConfig{
		EvictionHard: map[string]string{"allocatableMemory.available": strconv.FormatUint(env.Threshold, 10)},
	})
	if err != nil {
		return fmt.Errorf("nodeguard strategy: %w", err)
	}
	em, err := oom.NewManager(oom.ManagerConfig{
		Policy: oom.PolicyConfig{Thresholds: th},
		Actor:  &benchActor{pods: s.mgr.EvictionActor(nil), env: env},
		Snapshot: func(ctx context.Context) (*pressure.Snapshot, error) {
			return snapper.Snapshot(ctx, time.Now()), nil
		},
		Logger: s.log,
	})
	if err != nil {
		return fmt.Errorf("nodeguard strategy: %w", err)
	}
	tw, err := tripwire.New(mem.Path, mem.Hierarchy.V2(), tripwire.Options{Logger: s.log})
	if err != nil {
		return fmt.Errorf("nodeguard strategy: %w", err)
	}
	defer tw.Close()
	// usage >= budget - threshold is where the working set can first
	// reach it: the wire fires early, never late.
	if err := tw.Arm(env.Budget - env.Threshold); err != nil {
		return fmt.Errorf("nodeguard strategy: %w", err)
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case f, ok := <-tw.C():
				if !ok {
					return
				}
				em.Wake("tripwire", f.At)
			}
		}
	}()
	err = em.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
