package oomadj

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// child starts a process of the test's own, at oom_score_adj adj.
func child(t *testing.T, adj int) int {
	t.Helper()
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Process.Kill()
		c.Wait()
	})
	if err := Write(c.Process.Pid, adj); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

func mustRead(t *testing.T, pid int) int {
	t.Helper()
	v, err := Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Restore writes back what each raised process had, to that process only:
// a record whose start time is not the process's now (its pid recycled)
// is left alone, and a second raise keeps the value from before the first.
func TestRestoreGivesEachRaisedProcessItsOwnValue(t *testing.T) {
	const uid = types.UID("u")
	raiseAll := func(t *testing.T, r *Raiser, pids ...int) {
		t.Helper()
		if err := r.Raise(uid, pids, 1000); err != nil {
			t.Fatal(err)
		}
		for _, pid := range pids {
			if got := mustRead(t, pid); got != 1000 {
				t.Fatalf("pid %d raised to %d, want 1000", pid, got)
			}
		}
	}
	t.Run("each process gets back its own value", func(t *testing.T) {
		var r Raiser
		p1, p2 := child(t, 300), child(t, 200)
		raiseAll(t, &r, p1, p2)
		_, restored, err := r.Restore(uid, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got1, got2 := mustRead(t, p1), mustRead(t, p2); got1 != 300 || got2 != 200 {
			t.Errorf("restored to %d and %d, want 300 and 200", got1, got2)
		}
		if !restored[p1] || !restored[p2] || len(restored) != 2 {
			t.Errorf("restored %v, want both pids", restored)
		}
	})
	t.Run("the clamp applies to what is written back", func(t *testing.T) {
		var r Raiser
		p := child(t, 300)
		raiseAll(t, &r, p)
		if _, _, err := r.Restore(uid, func(v int) int { return max(v, 500) }); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, p); got != 500 {
			t.Errorf("restored to %d, want the clamped 500", got)
		}
	})
	t.Run("raised twice, the value from before the first raise is restored", func(t *testing.T) {
		var r Raiser
		p := child(t, 300)
		raiseAll(t, &r, p)
		raiseAll(t, &r, p)
		if _, _, err := r.Restore(uid, nil); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, p); got != 300 {
			t.Errorf("restored to %d, want 300", got)
		}
	})
	t.Run("a pid now another process's is left alone", func(t *testing.T) {
		var r Raiser
		p := child(t, 300)
		raiseAll(t, &r, p)
		rec := r.raised[uid][p]
		rec.Start++ // as if p had exited and its pid gone to a newer process
		r.raised[uid][p] = rec
		if _, _, err := r.Restore(uid, nil); err != nil {
			t.Fatal(err)
		}
		if got := mustRead(t, p); got != 1000 {
			t.Errorf("the other process was written %d, want it untouched at 1000", got)
		}
	})
	t.Run("a process that exited is skipped, not an error", func(t *testing.T) {
		c := exec.Command("true")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := observe(c.Process.Pid, nil); ok || err != nil {
			t.Errorf("observe an exited process: ok=%v, %v; want neither", ok, err)
		}
	})
	t.Run("forgotten, nothing is written back", func(t *testing.T) {
		var r Raiser
		p := child(t, 300)
		raiseAll(t, &r, p)
		r.Forget(uid)
		recs, restored, err := r.Restore(uid, nil)
		if err != nil || len(recs) != 0 || len(restored) != 0 {
			t.Errorf("restore after forget: %v %v %v, want nothing", recs, restored, err)
		}
		if got := mustRead(t, p); got != 1000 {
			t.Errorf("written %d after forget, want 1000 untouched", got)
		}
	})
}

// A process forked after the raise inherited the raised value: Was finds
// what its nearest raised ancestor had.
func TestWasFollowsTheParentsOfAForkedProcess(t *testing.T) {
	const uid = types.UID("u")
	sh := exec.Command("sh", "-c", "sleep 60 & wait")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sh.Process.Kill()
		sh.Wait()
	})
	if err := Write(sh.Process.Pid, 300); err != nil {
		t.Fatal(err)
	}
	var r Raiser
	if err := r.Raise(uid, []int{sh.Process.Pid}, 1000); err != nil {
		t.Fatal(err)
	}
	// The shell's child, the sleep; forked around the raise, it is not
	// in the records either way.
	var kid int
	for range 200 {
		if kids := children(t, sh.Process.Pid); len(kids) > 0 {
			kid = kids[0]
			break
		}
		exec.Command("sleep", "0.01").Run()
	}
	if kid == 0 {
		t.Fatal("the shell's child did not appear in 2 s")
	}
	t.Cleanup(func() { exec.Command("kill", "-9", strconv.Itoa(kid)).Run() })
	if v, ok := Was(r.raised[uid], kid, 4); !ok || v != 300 {
		t.Errorf("Was(child) = %d, %v; want the shell's 300", v, ok)
	}
	if _, ok := Was(r.raised[uid], sh.Process.Pid, 4); ok {
		t.Error("Was(the shell) found an ancestor of it recorded; the test's own process is not")
	}
	// Raised again with the child among the pod's processes: what it is
	// owed is its parent's value from before the raise, not the raised
	// one it inherited; Restore writes it back.
	if err := r.Raise(uid, []int{sh.Process.Pid, kid}, 1000); err != nil {
		t.Fatal(err)
	}
	if got := r.raised[uid][kid].Was; got != 300 {
		t.Errorf("the forked child recorded as having %d, want its parent's 300", got)
	}
	if _, _, err := r.Restore(uid, nil); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, kid); got != 300 {
		t.Errorf("the forked child restored to %d, want 300", got)
	}
}

func children(t *testing.T, pid int) []int {
	t.Helper()
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(pid)).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		p, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pgrep: %q: %v", f, err)
		}
		pids = append(pids, p)
	}
	return pids
}

func TestParseStatReadsCommandNamesWithSpacesAndParentheses(t *testing.T) {
	// The kernel does not escape the command name: "a) b" is a valid one.
	for _, tt := range []struct {
		name, stat string
		ppid       int
		start      uint64
		ok         bool
	}{
		{"a plain name", "42 (sleep) S 1 42 42 0 -1 4194304 91 0 0 0 0 0 0 0 20 0 1 0 123456 2400000 200", 1, 123456, true},
		{"a name with a space and a parenthesis", "42 (a) b) S 7 42 42 0 -1 4194304 91 0 0 0 0 0 0 0 20 0 1 0 777 2400000 200", 7, 777, true},
		{"a line cut short", "42 (sleep) S 1 42", 0, 0, false},
		{"no command name", "42 sleep S 1", 0, 0, false},
		{"a parent that is not a number", "42 (sleep) S x 42 42 0 -1 4194304 91 0 0 0 0 0 0 0 20 0 1 0 777 2400000 200", 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ppid, start, err := ParseStat(42, tt.stat)
			if (err == nil) != tt.ok || ppid != tt.ppid || start != tt.start {
				t.Errorf("ParseStat = %d, %d, %v; want %d, %d (ok %v)", ppid, start, err, tt.ppid, tt.start, tt.ok)
			}
		})
	}
}
