package oomadj

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

// Proc is a process whose oom_score_adj Raise changed, and what it had.
type Proc struct {
	PID int `json:"pid"`
	// PPID is its parent when it was raised: a process forked since
	// inherits the raised value, and gets back its nearest raised
	// ancestor's (Raiser.Was).
	PPID int `json:"ppid"`
	// Start is the process's start time (/proc/<pid>/stat field 22):
	// with the pid it names the process.
	Start uint64 `json:"start"`
	// Was is the value it had before the first Raise.
	Was int `json:"was"`
}

// Raiser keeps, per pod, the processes it raised. The zero value is
// ready and keeps its records in memory only (tests); Persist or
// NewRaiser make it write each pod's records to the agent's state store
// before any process is raised. It is safe for concurrent use.
type Raiser struct {
	mu     sync.Mutex
	raised map[types.UID]map[int]Proc
	store  *statestore.Store // nil: in memory only
	log    *slog.Logger

	// beforeDurable, when set (tests), is called by Raise after the
	// processes are raised and r.mu released, before the record is made
	// durable.
	beforeDurable func(uid types.UID)
}

// NewRaiser returns a Raiser that persists its records in store (nil: in
// memory only) and logs to log (nil: nowhere).
func NewRaiser(store *statestore.Store, log *slog.Logger) *Raiser {
	r := &Raiser{}
	r.Persist(store, log)
	return r
}

// Persist makes r keep its records in store (nil: in memory only) and log
// to log (nil: nowhere). It is called before the first Raise, and makes
// the file the first Raise stages its record through (Store.Prepare).
func (r *Raiser) Persist(store *statestore.Store, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if store != nil {
		store.Prepare(RecordKind)
	}
	r.mu.Lock()
	r.store, r.log = store, log
	r.mu.Unlock()
}

// Raise writes adj to every process of pids (the pod's, the sandbox's
// included) and records what each had. Called again before Restore, it
// keeps the values from before the first call; a process recorded before
// and not in pids now has exited or left the pod, and is dropped.
//
// With a store, the pod's record is staged (statestore.Store.Stage:
// written and renamed into place, unsynced) after every process's value
// was read and before any is raised: a raise is never on a process
// without its original on disk, and an agent that dies after it finds the
// record. It is made durable (an fsync) after the raise and outside r.mu:
// the next victim is raised under memory pressure, when an fsync waits on
// writeback, and neither the raise nor a Restore or Forget of another
// pod waits for it. A store that cannot be written fails the raise, and
// nothing is raised; a record that could not be made durable is an error
// of the raise done (a power loss before the next Raise syncs it ends
// the pods it describes anyway). A pod with no record in memory but one
// in the store (left by an agent that died before it restored it, and not
// repaired) is raised from that record's values, not from the raised ones
// its processes still have.
func (r *Raiser) Raise(uid types.UID, pids []int, adj int) error {
	durable, err := r.raise(uid, pids, adj)
	if durable == nil {
		return err
	}
	if r.beforeDurable != nil {
		r.beforeDurable(uid)
	}
	// durable syncs the record's file as it is now, and is a no-op when
	// it is gone: a Restore or Forget since (ordered after this raise by
	// r.mu) removed it durably and is not undone, and a Raise since
	// renamed its own record into place, which is the one synced.
	if derr := durable(); derr != nil {
		err = errors.Join(err, fmt.Errorf("raise oom_score_adj of pod %s: record not made durable: %w", uid, derr))
	}
	return err
}

// raise is Raise under r.mu: it stages the record and raises the
// processes, and returns the func that makes the record durable (nil
// when nothing was staged).
func (r *Raiser) raise(uid types.UID, pids []int, adj int) (durable func() error, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.raised[uid]
	if prev == nil {
		prev = r.loadLocked(uid)
	}
	recs := make(map[int]Proc, len(pids))
	fresh := make([]Proc, 0, len(pids)) // observed now: to write
	var errs []error
	for _, pid := range pids {
		p, ok, err := observe(pid, prev)
		if err != nil {
			errs = append(errs, err)
			if p, ok := prev[pid]; ok {
				recs[pid] = p // raised by an earlier call: still to restore
			}
		}
		if ok {
			recs[pid] = p
			fresh = append(fresh, p)
		}
	}
	if r.store != nil && len(recs) > 0 {
		if durable, err = r.store.Stage(RecordKind, string(uid), newRecord(adj, recs)); err != nil {
			return nil, fmt.Errorf("raise oom_score_adj of pod %s: %w", uid, err)
		}
	}
	for _, p := range fresh {
		if err := Write(p.PID, adj); Exited(err) {
			delete(recs, p.PID)
		} else if err != nil {
			// Perhaps not raised: its record is kept all the same,
			// and writes back the value it has.
			errs = append(errs, err)
		}
	}
	if r.raised == nil {
		r.raised = map[types.UID]map[int]Proc{}
	}
	r.raised[uid] = recs
	return durable, errors.Join(errs...)
}

// observe reads what pid has before a raise (the value recorded in prev
// when prev holds this very process). ok is false when the process
// exited.
func observe(pid int, prev map[int]Proc) (p Proc, ok bool, err error) {
	ppid, start, err := Stat(pid)
	if Exited(err) {
		return p, false, nil
	}
	if err != nil {
		return p, false, err
	}
	p = Proc{PID: pid, PPID: ppid, Start: start}
	if q, ok := prev[pid]; ok && q.Start == start {
		p.Was = q.Was
	} else if v, ok := Was(prev, pid, MaxDepth); ok {
		// Forked since the last raise: it inherited the raised value,
		// and is owed its raised ancestor's.
		p.Was = v
	} else if p.Was, err = Read(pid); Exited(err) {
		return p, false, nil
	} else if err != nil {
		return p, false, err
	}
	return p, true, nil
}

// Restore undoes Raise for the pod: every process it raised that still
// runs (same pid, same start time) gets back the value it had, through
// clamp (nil: as it was). It returns the records it held, for the caller
// to give processes that joined the pod since their due value, and the
// pids it wrote. With a store, the pod's record is removed once every
// value is back (kept, for the next start's Repair, when a write
// failed); a record left by a dead agent is restored as this Raiser's.
func (r *Raiser) Restore(uid types.UID, clamp func(int) int) (recs map[int]Proc, restored map[int]bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	recs, ok := r.raised[uid]
	if !ok {
		recs = r.loadLocked(uid)
	}
	delete(r.raised, uid)
	restored, errs := restoreProcs(recs, clamp)
	if r.store != nil && len(errs) == 0 {
		if err := r.store.Delete(RecordKind, string(uid)); err != nil {
			errs = append(errs, err)
		}
	}
	return recs, restored, errors.Join(errs...)
}

// restoreProcs writes back to each process of recs that still runs what
// it had, through clamp.
func restoreProcs(recs map[int]Proc, clamp func(int) int) (restored map[int]bool, errs []error) {
	restored = make(map[int]bool, len(recs))
	for _, p := range recs {
		_, start, err := Stat(p.PID)
		if Exited(err) || (err == nil && start != p.Start) {
			continue // gone, its pid perhaps another process's now
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		v := p.Was
		if clamp != nil {
			v = clamp(v)
		}
		if err := Write(p.PID, v); err != nil && !Exited(err) {
			errs = append(errs, err)
			continue
		}
		restored[p.PID] = true
	}
	return restored, errs
}

// MaxDepth bounds the ancestor walks of Was: a pod's process tree is
// shallow, and a walk must end.
const MaxDepth = 16

// Forget drops the pod's records without writing anything (the pod is
// gone), its persisted record too.
func (r *Raiser) Forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.raised, uid)
	if r.store != nil {
		if err := r.store.Delete(RecordKind, string(uid)); err != nil {
			r.log.Warn("oom_score_adj: remove the raise record of a pod gone", "uid", string(uid), "err", err)
		}
	}
}

// Was returns the value pid inherited from its nearest ancestor in recs
// (a process forked after the raise inherits the raised value, so what
// it is owed is what that ancestor had), following parents up to depth
// generations; ok is false when no ancestor is recorded.
func Was(recs map[int]Proc, pid, depth int) (v int, ok bool) {
	for range depth {
		ppid, _, err := Stat(pid)
		if err != nil || ppid <= 1 {
			return 0, false
		}
		if p, found := recs[ppid]; found {
			if _, start, err := Stat(ppid); err == nil && start == p.Start {
				return p.Was, true
			}
			return 0, false
		}
		pid = ppid
	}
	return 0, false
}

// Exited reports whether err says the process is gone: its /proc
// directory removed, or a zombie whose oom_score_adj can no longer be
// written (ESRCH).
func Exited(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

func procPath(pid int, file string) string {
	return "/proc/" + strconv.Itoa(pid) + "/" + file
}

// Start returns the start time of pid (field 22 of /proc/<pid>/stat, in
// clock ticks since boot): with the pid, it names a process uniquely.
func Start(pid int) (uint64, error) {
	_, start, err := Stat(pid)
	return start, err
}

// Stat returns pid's parent and start time (fields 4 and 22 of
// /proc/<pid>/stat).
func Stat(pid int) (ppid int, start uint64, err error) {
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		return 0, 0, fmt.Errorf("read the start time of pid %d: %w", pid, err)
	}
	return ParseStat(pid, string(b))
}

// ParseStat reads fields 4 (the parent) and 22 (the start time) of pid's
// /proc/<pid>/stat line s.
func ParseStat(pid int, s string) (ppid int, start uint64, err error) {
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses itself: the fields are counted after the last ')'.
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, 0, fmt.Errorf("parse %s: no command name", procPath(pid, "stat"))
	}
	f := strings.Fields(s[end+1:])
	const ppidField, startField = 4 - 3, 22 - 3 // f[0] is field 3, the state
	if len(f) <= startField {
		return 0, 0, fmt.Errorf("parse %s: %d fields, want at least 22", procPath(pid, "stat"), len(f)+2)
	}
	if ppid, err = strconv.Atoi(f[ppidField]); err != nil {
		return 0, 0, fmt.Errorf("parse %s: parent: %w", procPath(pid, "stat"), err)
	}
	if start, err = strconv.ParseUint(f[startField], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("parse %s: start time: %w", procPath(pid, "stat"), err)
	}
	return ppid, start, nil
}

// Read returns pid's oom_score_adj.
func Read(pid int) (int, error) {
	b, err := os.ReadFile(procPath(pid, "oom_score_adj"))
	if err != nil {
		return 0, fmt.Errorf("read oom_score_adj of pid %d: %w", pid, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse oom_score_adj of pid %d: %w", pid, err)
	}
	return v, nil
}

// Write sets pid's oom_score_adj.
func Write(pid, adj int) error {
	if err := os.WriteFile(procPath(pid, "oom_score_adj"), []byte(strconv.Itoa(adj)), 0); err != nil {
		return fmt.Errorf("oom_score_adj of pid %d to %d: %w", pid, adj, err)
	}
	return nil
}
