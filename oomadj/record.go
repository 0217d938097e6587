package oomadj

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/internal/statestore"
	"github.com/nodeguard/nodeguard/qos"
)

// RecordKind is the kind of the raise records in the agent's state store:
// one per raised pod, keyed by its UID.
var RecordKind = statestore.Kind{Name: "oom-score-adj", Version: 1}

// The kernel's bounds of oom_score_adj (OOM_SCORE_ADJ_MIN and _MAX).
const (
	minAdj = -1000
	maxAdj = 1000
)

// Record is a pod's raise as persisted: the value its processes were
// raised to and, for each, what it had.
type Record struct {
	Adj   int    `json:"adj"`
	Procs []Proc `json:"procs"`
}

func newRecord(adj int, recs map[int]Proc) Record {
	r := Record{Adj: adj, Procs: make([]Proc, 0, len(recs))}
	for _, p := range recs {
		r.Procs = append(r.Procs, p)
	}
	slices.SortFunc(r.Procs, func(a, b Proc) int { return a.PID - b.PID })
	return r
}

// Validate checks a record read back: values within the kernel's bounds,
// real pids, each pid once.
func (r *Record) Validate() error {
	if r.Adj < minAdj || r.Adj > maxAdj {
		return fmt.Errorf("raised to %d: outside [%d, %d]", r.Adj, minAdj, maxAdj)
	}
	seen := make(map[int]bool, len(r.Procs))
	for _, p := range r.Procs {
		switch {
		case p.PID <= 0 || p.PPID < 0:
			return fmt.Errorf("pid %d, parent %d: not a process", p.PID, p.PPID)
		case p.Was < minAdj || p.Was > maxAdj:
			return fmt.Errorf("pid %d had %d: outside [%d, %d]", p.PID, p.Was, minAdj, maxAdj)
		case seen[p.PID]:
			return fmt.Errorf("pid %d recorded twice", p.PID)
		}
		seen[p.PID] = true
	}
	return nil
}

func (r *Record) procs() map[int]Proc {
	m := make(map[int]Proc, len(r.Procs))
	for _, p := range r.Procs {
		m[p.PID] = p
	}
	return m
}

// loadLocked reads the pod's record from the store: nil when there is no
// store or no readable record (an unreadable one is quarantined, and left
// to the next start's Repair to report). r.mu is held.
func (r *Raiser) loadLocked(uid types.UID) map[int]Proc {
	if r.store == nil {
		return nil
	}
	rec, ok, err := statestore.GetOf[Record](r.store, RecordKind, string(uid))
	if err != nil {
		r.log.Warn("oom_score_adj: read the raise record a dead agent left", "uid", string(uid), "err", err)
	}
	if !ok {
		return nil
	}
	return rec.procs()
}

// Lost is given each pod whose raise record could not be read
// (quarantined, or of a newer agent: left in place): its processes may
// still have the raised value, and what they had is lost. It gives them a
// safe value (Due, Unraise) or logs why it cannot.
type Lost func(uid types.UID) error

// Repaired is what Repair did.
type Repaired struct {
	// Pods whose records were put back and removed.
	Pods int
	// Restored processes: those recorded, and those forked from them
	// since that still had the raised value.
	Restored, Forked int
	// Lost are the pods whose records could not be read, given to Lost.
	Lost []types.UID
}

// Repair puts back what raise records left in the store by an agent that
// died hold (see the package's invariants): called once at start, before
// anything raises. Values are written through clamp (nil: as they were).
// A record whose values could not all be written back is kept for the
// next start; one that could not be read goes to lost (nil: logged).
func (r *Raiser) Repair(clamp func(int) int, lost Lost) (Repaired, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out Repaired
	if r.store == nil {
		return out, nil
	}
	keys, err := r.store.Keys(RecordKind)
	if err != nil {
		return out, fmt.Errorf("repair oom_score_adj: %w", err)
	}
	var errs []error
	var all []int // every process of the node, listed once
	for _, key := range keys {
		uid := types.UID(key)
		if _, ok := r.raised[uid]; ok {
			continue // this Raiser's own
		}
		rec, ok, err := statestore.GetOf[Record](r.store, RecordKind, key)
		switch {
		case errors.Is(err, statestore.ErrCorrupt), errors.Is(err, statestore.ErrUnsupported):
			out.Lost = append(out.Lost, uid)
			if lost == nil {
				r.log.Warn("oom_score_adj: a raise record could not be read; the pod's processes may keep the raised value",
					"uid", key, "err", err)
			} else if err := lost(uid); err != nil {
				errs = append(errs, fmt.Errorf("repair oom_score_adj of pod %s: %w", uid, err))
			}
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("repair oom_score_adj: %w", err))
			continue
		case !ok:
			continue
		}
		if all == nil {
			if all, err = pids(); err != nil {
				return out, fmt.Errorf("repair oom_score_adj: %w", err)
			}
		}
		recs := rec.procs()
		restored, werrs := restoreProcs(recs, clamp)
		forked, ferrs := restoreForked(recs, rec.Adj, all, restored, clamp)
		werrs = append(werrs, ferrs...)
		out.Restored += len(restored)
		out.Forked += forked
		if len(werrs) > 0 {
			errs = append(errs, fmt.Errorf("repair oom_score_adj of pod %s (record kept): %w", uid, errors.Join(werrs...)))
			continue
		}
		if err := r.store.Delete(RecordKind, key); err != nil {
			errs = append(errs, fmt.Errorf("repair oom_score_adj of pod %s: %w", uid, err))
			continue
		}
		out.Pods++
		r.log.Info("oom_score_adj: a raise left by an agent that died put back", "uid", key, "raised_to", rec.Adj,
			"recorded", len(recs), "restored", len(restored), "forked", forked)
	}
	return out, errors.Join(errs...)
}

// restoreForked gives each process of all that still has the raised value
// adj, was not restored, and descends from a process of recs (it was
// forked after the raise and inherited it) its nearest recorded
// ancestor's value, through clamp.
func restoreForked(recs map[int]Proc, adj int, all []int, restored map[int]bool, clamp func(int) int) (n int, errs []error) {
	for _, pid := range all {
		if restored[pid] {
			continue
		}
		// The cheap test first: most processes do not have the raised
		// value, and need no walk up their parents.
		if cur, err := Read(pid); err != nil || cur != adj {
			continue
		}
		v, ok := Was(recs, pid, MaxDepth)
		if !ok {
			continue
		}
		if clamp != nil {
			v = clamp(v)
		}
		if err := Write(pid, v); err != nil {
			if !Exited(err) {
				errs = append(errs, err)
			}
			continue
		}
		n++
	}
	return n, errs
}

// pids lists the node's processes.
func pids() ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make([]int, 0, len(entries))
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Due is the oom_score_adj that the processes of a pod whose raise record
// was lost are given: the highest value the kubelet's policy
// (qos.OOMScoreAdj) gives any of the pod's containers. A Guaranteed or
// BestEffort pod's containers all have the same; a Burstable pod's
// differ by request, and the highest never makes one of its processes
// more protected than the kubelet made it (the sandbox's pause process,
// which the kubelet gives -998, gets its pod's value too).
func Due(pod *corev1.Pod, memoryCapacity int64) (int, error) {
	due, found := minAdj, false
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			v, err := qos.OOMScoreAdj(pod, &list[i], memoryCapacity)
			if err != nil {
				return 0, err
			}
			due, found = max(due, v), true
		}
	}
	if !found {
		return 0, fmt.Errorf("oom_score_adj of pod %s/%s: no containers", pod.Namespace, pod.Name)
	}
	return due, nil
}

// Unraise writes due to each process of pids whose oom_score_adj is
// raised now (Lost's fallback), and returns how many it wrote. A process
// with another value set it itself, or was given it, since: it is left.
func Unraise(pids []int, raised, due int) (int, error) {
	var n int
	var errs []error
	for _, pid := range pids {
		if cur, err := Read(pid); err != nil || cur != raised {
			continue
		}
		if err := Write(pid, due); err != nil {
			if !Exited(err) {
				errs = append(errs, err)
			}
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
