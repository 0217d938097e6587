package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// The kubelet's fast path on cgroup v1 (--kernel-memcg-notification), as
// pkg/kubelet/eviction does it (checked against kubernetes/kubernetes:
// eviction_manager.go Start and synchronize, memory_threshold_notifier.go,
// threshold_notifier_linux.go):
//
//   - For an allocatableMemory.available threshold it registers a v1 memcg
//     usage threshold (cgroup.event_control with an eventfd, on
//     memory.usage_in_bytes) on the allocatable cgroup (kubepods) at
//     capacity - threshold + inactive_file, where capacity is available +
//     working set (the cgroup's limit) and inactive_file is usage -
//     working set, both from the synchronize that set it: usage crosses it
//     when the working set crosses capacity - threshold, if the page cache
//     stays put.
//   - synchronize re-sets it (a new eventfd, the old one closed) when more
//     than notifierRefreshInterval (10 s) has passed since the last time.
//     synchronize runs every housekeeping interval (10 s) and once per
//     notification; a notification's synchronize reads fresh statistics.
//   - On cgroup v2 the kubelet disables the notifier
//     (kubernetes/kubernetes#106331): there it is the 10 s poller.
//
// This is written from that description, not copied.

// kubeletNotifierRefresh is the kubelet's notifierRefreshInterval.
const kubeletNotifierRefresh = 10 * time.Second

// ErrMemcgNotifierV2: the kubelet's memcg notifier exists only on cgroup
// v1 (it wraps errors.ErrUnsupported).
var ErrMemcgNotifierV2 = fmt.Errorf("the kubelet's memcg threshold notifier is cgroup v1 only (the kubelet disables it on v2, kubernetes#106331): %w", errors.ErrUnsupported)

// KubeletMemcgStrategy is the kubelet's eviction manager with
// --kernel-memcg-notification: the kubelet strategy's housekeeping
// synchronize every interval (at a random phase), plus a synchronize on
// fresh statistics whenever the memcg usage threshold on the pod root
// fires. Like PollStrategy it reads the cgroup files itself where the
// kubelet reads cAdvisor.
type KubeletMemcgStrategy struct {
	interval time.Duration
	refresh  time.Duration
	// onArm, if set, is called with every usage threshold once it is
	// registered (for tests).
	onArm func(bytes uint64)
}

// NewKubeletMemcgStrategy returns the kubelet with its memcg notifier and
// the given housekeeping interval.
func NewKubeletMemcgStrategy(interval time.Duration) *KubeletMemcgStrategy {
	return &KubeletMemcgStrategy{interval: interval, refresh: kubeletNotifierRefresh}
}

// Name implements EvictionStrategy.
func (*KubeletMemcgStrategy) Name() string { return StrategyKubeletMemcg }

// MemcgUsageThreshold is where the kubelet sets the pod root's usage
// threshold after a synchronize that read mem: capacity - threshold +
// inactive_file, with capacity the budget (available + working set) and
// inactive_file usage - working set.
func MemcgUsageThreshold(budget, threshold uint64, mem cgstat.CgroupMemory) uint64 {
	return budget - threshold + (mem.Usage - mem.WorkingSet())
}

// Run implements EvictionStrategy.
func (s *KubeletMemcgStrategy) Run(ctx context.Context, env *TrialEnv) error {
	d, err := env.MemoryDir()
	if err != nil {
		return fmt.Errorf("%s: %w", StrategyKubeletMemcg, err)
	}
	if d.Hierarchy.V2() {
		return fmt.Errorf("%s: %w", StrategyKubeletMemcg, ErrMemcgNotifierV2)
	}
	fired := make(chan time.Time, 1)
	var (
		n           *memcgNotifier
		lastRefresh time.Time
	)
	defer func() {
		if n != nil {
			n.Close()
		}
	}()
	synchronize := func(why string) error {
		mem, err := readCgroupMemory(d)
		at := time.Now()
		if err != nil {
			return fmt.Errorf("%s: read pod root: %w", StrategyKubeletMemcg, err)
		}
		if lastRefresh.IsZero() || at.Sub(lastRefresh) > s.refresh {
			lastRefresh = at
			if n != nil {
				n.Close()
			}
			at := MemcgUsageThreshold(env.Budget, env.Threshold, mem)
			if n, err = newMemcgNotifier(d.Path, at); err != nil {
				return fmt.Errorf("%s: %w", StrategyKubeletMemcg, err)
			}
			go n.run(fired)
			if s.onArm != nil {
				s.onArm(at)
			}
		}
		obs, ok := nodestats.AllocatableMemoryAvailable(env.Budget, mem, at)
		if !ok || obs.Available >= int64(env.Threshold) {
			return nil
		}
		env.Detected(at)
		reason := fmt.Sprintf("%s<%d (observed %d, %s)", nodestats.SignalAllocatableMemoryAvailable, env.Threshold, obs.Available, why)
		if _, err := env.Evict(ctx, reason); err != nil && ctx.Err() == nil {
			env.Log.Warn("evict", "strategy", StrategyKubeletMemcg, "err", err)
		}
		return nil
	}
	// The kubelet has been running for a while: its notifier is set.
	if err := synchronize("start"); err != nil {
		return err
	}
	t := time.NewTimer(time.Duration(env.Rand.Int64N(int64(s.interval))))
	defer t.Stop()
	for {
		why := ""
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			t.Reset(s.interval)
			why = "housekeeping"
		case <-fired:
			why = "memcg notification"
		}
		if err := synchronize(why); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
	}
}

// memcgNotifier is one v1 memcg usage threshold: an eventfd registered
// through cgroup.event_control on memory.usage_in_bytes. The kernel
// signals it whenever usage crosses the threshold, up or down.
type memcgNotifier struct {
	efd *os.File
}

// newMemcgNotifier registers a usage threshold of bytes on the v1 memory
// cgroup dir.
func newMemcgNotifier(dir string, bytes uint64) (_ *memcgNotifier, retErr error) {
	usagePath := filepath.Join(dir, "memory.usage_in_bytes")
	usage, err := os.Open(usagePath)
	if err != nil {
		return nil, fmt.Errorf("memcg notifier: %w", err)
	}
	// The kernel keeps what it needs of the usage file: it may close
	// once registered.
	defer usage.Close()
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("memcg notifier: eventfd: %w", err)
	}
	f := os.NewFile(uintptr(efd), "memcg-eventfd") // the runtime poller waits on it
	defer func() {
		if retErr != nil {
			f.Close()
		}
	}()
	control := filepath.Join(dir, "cgroup.event_control")
	line := strconv.Itoa(efd) + " " + strconv.Itoa(int(usage.Fd())) + " " + strconv.FormatUint(bytes, 10)
	if err := os.WriteFile(control, []byte(line), 0); err != nil {
		return nil, fmt.Errorf("memcg notifier: register a threshold of %d bytes on %s: %w", bytes, usagePath, err)
	}
	return &memcgNotifier{efd: f}, nil
}

// run sends the time of every signal to fired (dropping it when one is
// pending) until the notifier is closed.
func (n *memcgNotifier) run(fired chan<- time.Time) {
	var buf [8]byte
	for {
		if _, err := n.efd.Read(buf[:]); err != nil {
			return // closed
		}
		at := time.Now() // buf holds the count of signals since the last read
		select {
		case fired <- at:
		default:
		}
	}
}

// Close unregisters the threshold: the kernel removes the event when its
// eventfd is closed.
func (n *memcgNotifier) Close() error { return n.efd.Close() }
