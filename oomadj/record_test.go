package oomadj

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

const podUID = types.UID("6b000000-0000-4000-8000-000000000001")

// openStore opens the state store in dir, as an agent does at start.
func openStore(t *testing.T, dir string) *statestore.Store {
	t.Helper()
	s, err := statestore.Open(dir, statestore.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func recordKeys(t *testing.T, s *statestore.Store) []string {
	t.Helper()
	keys, err := s.Keys(RecordKind)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// forker is a shell at oom_score_adj adj that forks a sleep when told to
// (a line on its stdin): the child of a process raised before it forked.
func forker(t *testing.T, adj int) (sh int, fork func() int) {
	t.Helper()
	c := exec.Command("sh", "-c", "read x; sleep 60 & wait")
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, kid := range children(t, c.Process.Pid) {
			if p, err := os.FindProcess(kid); err == nil {
				p.Kill()
			}
		}
		c.Process.Kill()
		c.Wait()
	})
	if err := Write(c.Process.Pid, adj); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid, func() int {
		t.Helper()
		if _, err := io.WriteString(in, "go\n"); err != nil {
			t.Fatal(err)
		}
		for range 200 {
			if kids := children(t, c.Process.Pid); len(kids) > 0 {
				return kids[0]
			}
			exec.Command("sleep", "0.01").Run()
		}
		t.Fatal("the shell's child did not appear in 2 s")
		return 0
	}
}

// An agent that dies with a pod raised (its Raiser dropped, nothing
// restored) leaves the raise record; the next agent's Repair, on the same
// store, gives every process what it had, a process forked since its
// parent's, and removes the record.
func TestRepairPutsBackWhatADeadAgentRaised(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	p1, p2 := child(t, 300), child(t, 200)
	sh, fork := forker(t, 400)

	dead := NewRaiser(openStore(t, dir), nil)
	if err := dead.Raise(podUID, []int{p1, p2, sh}, 1000); err != nil {
		t.Fatal(err)
	}
	kid := fork() // inherits 1000
	for _, pid := range []int{p1, p2, sh, kid} {
		if got := mustRead(t, pid); got != 1000 {
			t.Fatalf("pid %d at %d after the raise, want 1000", pid, got)
		}
	}
	// The agent dies here: dead is never used again.

	store := openStore(t, dir)
	if keys := recordKeys(t, store); !slices.Equal(keys, []string{string(podUID)}) {
		t.Fatalf("records left by the dead agent %v, want the pod's", keys)
	}
	r := NewRaiser(store, nil)
	got, err := r.Repair(nil, func(uid types.UID) error {
		t.Errorf("lost(%s) called for a readable record", uid)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Pods != 1 || got.Restored != 3 || got.Forked != 1 || len(got.Lost) != 0 {
		t.Errorf("repaired %+v, want 1 pod, 3 restored, 1 forked, none lost", got)
	}
	for pid, want := range map[int]int{p1: 300, p2: 200, sh: 400, kid: 400} {
		if v := mustRead(t, pid); v != want {
			t.Errorf("pid %d at %d after the repair, want %d", pid, v, want)
		}
	}
	if keys := recordKeys(t, store); len(keys) != 0 {
		t.Errorf("records after the repair %v, want none", keys)
	}
}

// Raised again after a crash, a pod's processes get back what they had
// before the first raise, never the raised value the dead agent left:
// whether the new agent repaired first or not.
func TestARaiseAfterACrashRestoresTheOriginal(t *testing.T) {
	for _, repair := range []bool{true, false} {
		name := "without a repair, the record on disk is read"
		if repair {
			name = "repaired first"
		}
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			p := child(t, 300)
			if err := NewRaiser(openStore(t, dir), nil).Raise(podUID, []int{p}, 1000); err != nil {
				t.Fatal(err)
			}
			store := openStore(t, dir)
			r := NewRaiser(store, nil)
			if repair {
				if _, err := r.Repair(nil, nil); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.Raise(podUID, []int{p}, 1000); err != nil {
				t.Fatal(err)
			}
			if _, _, err := r.Restore(podUID, nil); err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, p); got != 300 {
				t.Errorf("restored to %d, want the original 300", got)
			}
			if keys := recordKeys(t, store); len(keys) != 0 {
				t.Errorf("records after the restore %v, want none", keys)
			}
		})
	}
}

// The record is on disk before any process is raised: a store that cannot
// be written fails the raise, and nothing is raised.
func TestNoRaiseWithoutItsRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	store := openStore(t, dir)
	// The kind's directory cannot be made: a file holds its name.
	if err := os.WriteFile(filepath.Join(dir, RecordKind.Name), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := child(t, 300)
	r := NewRaiser(store, nil)
	if err := r.Raise(podUID, []int{p}, 1000); err == nil {
		t.Error("raise with an unwritable store succeeded")
	}
	if got := mustRead(t, p); got != 300 {
		t.Errorf("raised to %d without a record, want 300 untouched", got)
	}
}

// The record is staged before the processes are raised and made durable
// after, outside the Raiser's lock: at the moment they are raised (before
// the fsync) another agent opening the same store reads it, with what
// each process had.
func TestTheRecordIsOnDiskWhenTheProcessesAreRaised(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	p := child(t, 300)
	r := NewRaiser(openStore(t, dir), nil)
	spares, err := filepath.Glob(filepath.Join(dir, RecordKind.Name, ".tmp-spare-*"))
	if err != nil || len(spares) != 1 {
		t.Errorf("files prepared by NewRaiser %v (%v), want one", spares, err)
	}
	called := false
	r.beforeDurable = func(uid types.UID) {
		called = true
		if !r.mu.TryLock() {
			t.Error("the record is made durable with the Raiser's lock held")
		} else {
			r.mu.Unlock()
		}
		if got := mustRead(t, p); got != 1000 {
			t.Errorf("pid %d at %d before the record is durable, want 1000 (raised)", p, got)
		}
		// What an agent that died here, before the fsync, leaves.
		rec, ok, err := statestore.GetOf[Record](openStore(t, dir), RecordKind, string(uid))
		if err != nil || !ok {
			t.Fatalf("record read by a second store: %v, %v; want it there", ok, err)
		}
		want := Record{Adj: 1000, Procs: []Proc{{PID: p, Start: rec.Procs[0].Start, PPID: os.Getpid(), Was: 300}}}
		if rec.Adj != want.Adj || !slices.Equal(rec.Procs, want.Procs) {
			t.Errorf("record read by a second store %+v, want %+v", rec, want)
		}
	}
	if err := r.Raise(podUID, []int{p}, 1000); err != nil {
		t.Fatal(err)
	}
	if !called {
		t.Fatal("Raise with a store made nothing durable")
	}
}

// A Restore, Forget or new Raise that runs between a Raise's raise and its
// fsync (outside the lock) is not undone by that late fsync: a record
// removed stays removed, and one raised again holds the new raise.
func TestALateDurableDoesNotUndoWhatFollowedTheRaise(t *testing.T) {
	for _, tt := range []struct {
		name string
		// between runs after the first Raise, before its record is
		// made durable.
		between func(t *testing.T, r *Raiser, p int)
		wantAdj int   // the process's value at the end
		wantRec []int // the recorded adj, if a record is to be there
	}{{
		name: "a Restore in between leaves no record",
		between: func(t *testing.T, r *Raiser, p int) {
			if _, _, err := r.Restore(podUID, nil); err != nil {
				t.Error(err)
			}
		},
		wantAdj: 300,
	}, {
		name:    "a Forget in between leaves no record",
		between: func(t *testing.T, r *Raiser, p int) { r.Forget(podUID) },
		wantAdj: 1000, // forgotten, not written back
	}, {
		name: "a Restore and a Raise in between leave the second raise's record",
		between: func(t *testing.T, r *Raiser, p int) {
			if _, _, err := r.Restore(podUID, nil); err != nil {
				t.Error(err)
			}
			if err := r.Raise(podUID, []int{p}, 900); err != nil {
				t.Error(err)
			}
		},
		wantAdj: 900,
		wantRec: []int{900},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state")
			p := child(t, 300)
			r := NewRaiser(openStore(t, dir), nil)
			first := true
			r.beforeDurable = func(types.UID) {
				if first {
					first = false
					tt.between(t, r, p)
				}
			}
			if err := r.Raise(podUID, []int{p}, 1000); err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, p); got != tt.wantAdj {
				t.Errorf("pid %d at %d, want %d", p, got, tt.wantAdj)
			}
			// What the next agent finds.
			recs, err := statestore.ListOf[Record](openStore(t, dir), RecordKind)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, e := range recs {
				got = append(got, e.Value.Adj)
				if len(e.Value.Procs) != 1 || e.Value.Procs[0].Was != 300 {
					t.Errorf("record %+v, want pid %d that had 300", e.Value, p)
				}
			}
			if !slices.Equal(got, tt.wantRec) {
				t.Errorf("records raised to %v, want %v", got, tt.wantRec)
			}
		})
	}
}

// A record that cannot be read is quarantined and its pod handed to Lost
// (which gives it the kubelet's value, Unraise); a recorded pid that is
// another process's now is left alone; a record of a newer agent is left
// in place, its pod handed to Lost too.
func TestRepairOfRecordsItCannotUse(t *testing.T) {
	write := func(t *testing.T, store *statestore.Store, uid types.UID, b []byte) {
		t.Helper()
		path := filepath.Join(store.Dir(), RecordKind.Name, string(uid)+".rec")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a torn record: quarantined, its pod lost", func(t *testing.T) {
		store := openStore(t, filepath.Join(t.TempDir(), "state"))
		write(t, store, podUID, []byte(`{"format":1,"kind":"oom-score-adj","ke`))
		p := child(t, 1000) // raised by the agent that died
		var lost []types.UID
		got, err := NewRaiser(store, nil).Repair(nil, func(uid types.UID) error {
			lost = append(lost, uid)
			_, err := Unraise([]int{p}, 1000, 500)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(lost, []types.UID{podUID}) || !slices.Equal(got.Lost, lost) || got.Pods != 0 {
			t.Errorf("lost %v, repaired %+v; want the pod lost, nothing repaired", lost, got)
		}
		if v := mustRead(t, p); v != 500 {
			t.Errorf("the lost pod's process at %d, want the fallback's 500", v)
		}
		if n := store.Quarantined(RecordKind.Name); n != 1 {
			t.Errorf("quarantined %d, want 1", n)
		}
		if keys := recordKeys(t, store); len(keys) != 0 {
			t.Errorf("records left %v, want the torn one moved aside", keys)
		}
	})
	t.Run("a record that does not validate: quarantined, its pod lost", func(t *testing.T) {
		store := openStore(t, filepath.Join(t.TempDir(), "state"))
		if err := store.Put(RecordKind, string(podUID), Record{Adj: 1000, Procs: []Proc{{PID: 1, Was: 5000}}}); err != nil {
			t.Fatal(err)
		}
		got, err := NewRaiser(store, nil).Repair(nil, nil)
		if err != nil || !slices.Equal(got.Lost, []types.UID{podUID}) {
			t.Errorf("repair: %+v, %v; want the pod lost", got, err)
		}
		if n := store.Quarantined(RecordKind.Name); n != 1 {
			t.Errorf("quarantined %d, want 1", n)
		}
	})
	t.Run("a pid that is another process's now: left alone", func(t *testing.T) {
		store := openStore(t, filepath.Join(t.TempDir(), "state"))
		p := child(t, 1000)
		start, err := Start(p)
		if err != nil {
			t.Fatal(err)
		}
		rec := Record{Adj: 1000, Procs: []Proc{{PID: p, PPID: os.Getpid(), Start: start + 1, Was: 300}}}
		if err := store.Put(RecordKind, string(podUID), rec); err != nil {
			t.Fatal(err)
		}
		got, err := NewRaiser(store, nil).Repair(nil, nil)
		if err != nil || got.Pods != 1 || got.Restored != 0 {
			t.Errorf("repair: %+v, %v; want the record done with, nothing restored", got, err)
		}
		if v := mustRead(t, p); v != 1000 {
			t.Errorf("the other process was written %d, want it untouched at 1000", v)
		}
		if keys := recordKeys(t, store); len(keys) != 0 {
			t.Errorf("records left %v, want none", keys)
		}
	})
	t.Run("a newer agent's record: left in place, its pod lost", func(t *testing.T) {
		store := openStore(t, filepath.Join(t.TempDir(), "state"))
		newer := RecordKind
		newer.Version++
		if err := store.Put(newer, string(podUID), map[string]any{"adj": 1000, "more": true}); err != nil {
			t.Fatal(err)
		}
		got, err := NewRaiser(store, nil).Repair(nil, nil)
		if err != nil || !slices.Equal(got.Lost, []types.UID{podUID}) {
			t.Errorf("repair: %+v, %v; want the pod lost", got, err)
		}
		if keys := recordKeys(t, store); !slices.Equal(keys, []string{string(podUID)}) || store.Quarantined(RecordKind.Name) != 0 {
			t.Errorf("records %v, quarantined %d; want the newer record in place", keys, store.Quarantined(RecordKind.Name))
		}
	})
}

// Forget drops the pod's record with its memory: the pod is gone.
func TestForgetRemovesTheRecord(t *testing.T) {
	store := openStore(t, filepath.Join(t.TempDir(), "state"))
	p := child(t, 300)
	r := NewRaiser(store, nil)
	if err := r.Raise(podUID, []int{p}, 1000); err != nil {
		t.Fatal(err)
	}
	r.Forget(podUID)
	if keys := recordKeys(t, store); len(keys) != 0 {
		t.Errorf("records after Forget %v, want none", keys)
	}
}

// Unraise writes only the processes that have the raised value.
func TestUnraiseLeavesOtherValues(t *testing.T) {
	raised, other := child(t, 1000), child(t, 600)
	n, err := Unraise([]int{raised, other}, 1000, 400)
	if err != nil || n != 1 {
		t.Errorf("Unraise: %d, %v; want 1 written", n, err)
	}
	if a, b := mustRead(t, raised), mustRead(t, other); a != 400 || b != 600 {
		t.Errorf("after Unraise %d and %d, want 400 and 600", a, b)
	}
}

func TestDueIsTheHighestValueOfThePodsContainers(t *testing.T) {
	const capacity = 1000 << 20
	ctr := func(name, mem string) corev1.Container {
		c := corev1.Container{Name: name}
		if mem != "" {
			q := resource.MustParse(mem)
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: q}
		}
		return c
	}
	guaranteed := func(name string) corev1.Container {
		l := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Mi"), corev1.ResourceCPU: resource.MustParse("1")}
		return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: l, Limits: l}}
	}
	for _, tt := range []struct {
		name string
		ctrs []corev1.Container
		want int
		ok   bool
	}{
		{"a Guaranteed pod's containers all have -997", []corev1.Container{guaranteed("a"), guaranteed("b")}, -997, true},
		{"a BestEffort pod's 1000", []corev1.Container{ctr("a", "")}, 1000, true},
		{"a Burstable pod's container with the smallest request", []corev1.Container{ctr("big", "500Mi"), ctr("small", "100Mi")}, 900, true},
		{"no containers: unknown", nil, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: tt.ctrs}}
			got, err := Due(pod, capacity)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("Due = %d, %v; want %d (ok %v)", got, err, tt.want, tt.ok)
			}
		})
	}
}

// FuzzRaiseRecord drives what reading a raise record back does with its
// bytes: the envelope (statestore.Parse), the strict decode and Validate.
// A record that passes holds only values the kernel takes and each pid
// once; anything else is ErrCorrupt or ErrUnsupported.
func FuzzRaiseRecord(f *testing.F) {
	dir := f.TempDir()
	store, err := statestore.Open(dir, statestore.Options{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	for i, rec := range []Record{
		{Adj: 1000, Procs: []Proc{{PID: 42, PPID: 1, Start: 123456, Was: -997}, {PID: 43, PPID: 42, Start: 123457, Was: 300}}},
		{Adj: 1000},
		{Adj: 1000, Procs: []Proc{{PID: 7, Was: 1001}}},
	} {
		key := string(podUID) + string(rune('a'+i))
		if err := store.Put(RecordKind, key, rec); err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, RecordKind.Name, key+".rec"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(bytes.Replace(b, []byte(key), []byte(podUID), 1))
	}
	f.Add([]byte(`{"format":1,"kind":"oom-score-adj","key":"` + string(podUID) + `","version":2,"crc32c":0,"data":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := statestore.Parse(b, RecordKind, string(podUID))
		if err != nil {
			if !errors.Is(err, statestore.ErrCorrupt) && !errors.Is(err, statestore.ErrUnsupported) {
				t.Fatalf("Parse: %v, neither corrupt nor unsupported", err)
			}
			return
		}
		var rec Record
		if err := statestore.Decode(r, &rec); err != nil {
			return
		}
		if err := rec.Validate(); err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("an invalid record without a reason")
			}
			return
		}
		m := rec.procs()
		if len(m) != len(rec.Procs) || rec.Adj < minAdj || rec.Adj > maxAdj {
			t.Fatalf("a valid record with pids twice or a value out of range: %+v", rec)
		}
		for _, p := range m {
			if p.PID <= 0 || p.Was < minAdj || p.Was > maxAdj {
				t.Fatalf("a valid record with %+v", p)
			}
		}
		if back := newRecord(rec.Adj, m); !slices.Equal(back.Procs, sorted(rec.Procs)) {
			t.Fatalf("the record written back %+v, read %+v", back, rec)
		}
	})
}

func sorted(ps []Proc) []Proc {
	out := slices.Clone(ps)
	slices.SortFunc(out, func(a, b Proc) int { return a.PID - b.PID })
	return out
}
