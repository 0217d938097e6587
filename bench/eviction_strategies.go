package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodeguard/nodeguard/pressure/nodestats"
	"github.com/nodeguard/nodeguard/psi"
)

// KubeletHousekeeping is the kubelet's eviction monitoring period
// (--housekeeping-interval, 10 s by default): how often its eviction
// manager's synchronize looks at the signals.
const KubeletHousekeeping = 10 * time.Second

// PollStrategy evicts when allocatableMemory.available, computed from the
// pod root's cgroup files exactly as the kubelet computes it (limit -
// (usage - inactive_file); v1: total_inactive_file), is below the
// threshold at a poll. Its first poll comes at a random phase within the
// interval, as a trial starts at no particular point of the kubelet's
// housekeeping. It reads the files itself at each poll: the real kubelet
// reads cAdvisor's cached statistics, which are older still.
type PollStrategy struct {
	name     string
	interval time.Duration
}

// NewPollStrategy returns a poller called name with the given interval.
func NewPollStrategy(name string, interval time.Duration) *PollStrategy {
	return &PollStrategy{name: name, interval: interval}
}

// Name implements EvictionStrategy.
func (p *PollStrategy) Name() string { return p.name }

// Run implements EvictionStrategy.
func (p *PollStrategy) Run(ctx context.Context, env *TrialEnv) error {
	d, err := env.MemoryDir()
	if err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	phase := time.Duration(env.Rand.Int64N(int64(p.interval)))
	t := time.NewTimer(phase)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		t.Reset(p.interval)
		mem, err := readCgroupMemory(d)
		at := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%s: read pod root: %w", p.name, err)
		}
		obs, ok := nodestats.AllocatableMemoryAvailable(env.Budget, mem, at)
		if !ok || obs.Available >= int64(env.Threshold) {
			continue
		}
		env.Detected(at)
		reason := fmt.Sprintf("%s<%d (observed %d)", nodestats.SignalAllocatableMemoryAvailable, env.Threshold, obs.Available)
		if _, err := env.Evict(ctx, reason); err != nil && ctx.Err() == nil {
			env.Log.Warn("evict", "strategy", p.name, "err", err)
		}
	}
}

// PSI trigger of the psi strategy: "some" stall of 150 ms within 1 s, as
// systemd-oomd and Meta's oomd watch memory pressure; without
// CAP_SYS_RESOURCE the kernel takes only 2 s windows, which psi.Watcher
// falls back to (and logs).
const (
	psiStall  = 150 * time.Millisecond
	psiWindow = time.Second
)

// PSIStrategy evicts when a PSI memory trigger fires on the pod root's
// memory.pressure (a cgroup2 directory of the pod root; on this hybrid
// layout the unified hierarchy accounts the v1 memcg's stalls), or on
// /proc/pressure/memory when the pod root has no cgroup2 directory. It
// evicts on the trigger alone, as systemd-oomd's memory pressure rule does:
// requiring the allocatable signal as well would make it a poller gated by
// PSI and measure neither. After an eviction it ignores triggers for one
// window (a post-action delay, as oomd's), since the stall it fired on is
// still inside the window.
type PSIStrategy struct{}

// NewPSIStrategy returns the psi strategy.
func NewPSIStrategy() *PSIStrategy { return &PSIStrategy{} }

// Name implements EvictionStrategy.
func (*PSIStrategy) Name() string { return StrategyPSI }

// PressureFile returns the memory pressure file the psi strategy watches
// for the pod root dirs.
func PressureFile(env *TrialEnv) string {
	if p := pressureFile(env.Dirs); p != "" {
		return p
	}
	return "/proc/pressure/memory"
}

// Run implements EvictionStrategy.
func (s *PSIStrategy) Run(ctx context.Context, env *TrialEnv) error {
	path := PressureFile(env)
	w, err := psi.NewWatcher(env.Log, []psi.Trigger{{Path: path, Kind: psi.KindSome, Stall: psiStall, Window: psiWindow}})
	if err != nil {
		return fmt.Errorf("psi: %w", err)
	}
	defer w.Close()
	window := w.Effective()[0].Window
	wake := make(chan psi.Wake, 8)
	errc := make(chan error, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { errc <- w.Run(wctx, wake) }()
	var quietUntil time.Time
	for {
		select {
		case err := <-errc:
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return ctx.Err()
			}
			return fmt.Errorf("psi: %w", err)
		case wk := <-wake:
			if wk.Time.Before(quietUntil) {
				continue
			}
			env.Detected(wk.Time)
			reason := fmt.Sprintf("memory pressure: %v", wk.Trigger)
			if _, err := env.Evict(ctx, reason); err != nil && ctx.Err() == nil {
				env.Log.Warn("evict", "strategy", StrategyPSI, "err", err)
			}
			quietUntil = time.Now().Add(window)
		}
	}
}
