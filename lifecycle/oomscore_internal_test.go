package lifecycle

import (
	"os/exec"
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
	if err := writeOOMScoreAdj(c.Process.Pid, adj); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

func mustOOMScoreAdj(t *testing.T, pid int) int {
	t.Helper()
	v, err := readOOMScoreAdj(pid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Restore writes back what each raised process had, to that process only:
// a record whose start time is not the process's now (its pid recycled)
// is left alone, and a second raise keeps the value from before the first.
func TestRestoreOOMScoreAdjOfRaisedProcesses(t *testing.T) {
	const uid = types.UID("u")
	newActor := func() *EvictionActor {
		return &EvictionActor{m: &Manager{pods: map[types.UID]*podState{}, cfg: Config{HasCapSysResource: true}}}
	}
	raise := func(t *testing.T, a *EvictionActor, pids ...int) {
		t.Helper()
		if a.raised == nil {
			a.raised = map[types.UID]map[int]raisedProc{}
		}
		recs := map[int]raisedProc{}
		for _, pid := range pids {
			r, ok, err := raiseOOMScoreAdj(pid, 1000, a.raised[uid])
			if err != nil || !ok {
				t.Fatalf("raise pid %d: ok=%v, %v", pid, ok, err)
			}
			recs[pid] = r
		}
		a.raised[uid] = recs
	}

	t.Run("each process gets back its own value", func(t *testing.T) {
		a := newActor()
		p1, p2 := child(t, 300), child(t, 200)
		raise(t, a, p1, p2)
		if got := mustOOMScoreAdj(t, p1); got != 1000 {
			t.Fatalf("raised to %d", got)
		}
		if err := a.RestoreOOMScoreAdj(uid); err != nil {
			t.Fatal(err)
		}
		if got1, got2 := mustOOMScoreAdj(t, p1), mustOOMScoreAdj(t, p2); got1 != 300 || got2 != 200 {
			t.Errorf("restored to %d and %d, want 300 and 200", got1, got2)
		}
	})
	t.Run("raised twice, the value from before the first raise is restored", func(t *testing.T) {
		a := newActor()
		p := child(t, 300)
		raise(t, a, p)
		raise(t, a, p)
		if err := a.RestoreOOMScoreAdj(uid); err != nil {
			t.Fatal(err)
		}
		if got := mustOOMScoreAdj(t, p); got != 300 {
			t.Errorf("restored to %d, want 300", got)
		}
	})
	t.Run("a pid now another process's is left alone", func(t *testing.T) {
		a := newActor()
		p := child(t, 300)
		raise(t, a, p)
		r := a.raised[uid][p]
		r.start++ // as if p had exited and its pid gone to a newer process
		a.raised[uid][p] = r
		if err := a.RestoreOOMScoreAdj(uid); err != nil {
			t.Fatal(err)
		}
		if got := mustOOMScoreAdj(t, p); got != 1000 {
			t.Errorf("the other process was written %d, want it untouched at 1000", got)
		}
	})
	t.Run("a process that exited is skipped, not an error", func(t *testing.T) {
		c := exec.Command("true")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := raiseOOMScoreAdj(c.Process.Pid, 1000, nil); ok || err != nil {
			t.Errorf("raise of an exited process: ok=%v, %v; want neither", ok, err)
		}
	})
}

func TestProcStartParsesCommandNamesWithSpacesAndParentheses(t *testing.T) {
	// The kernel does not escape the command name: "a) b" is a valid one.
	for _, tt := range []struct {
		name, stat string
		want       uint64
		ok         bool
	}{
		{"a plain name", "42 (sleep) S 1 42 42 0 -1 4194304 91 0 0 0 0 0 0 0 20 0 1 0 123456 2400000 200", 123456, true},
		{"a name with a space and a parenthesis", "42 (a) b) S 1 42 42 0 -1 4194304 91 0 0 0 0 0 0 0 20 0 1 0 777 2400000 200", 777, true},
		{"a line cut short", "42 (sleep) S 1 42", 0, false},
		{"no command name", "42 sleep S 1", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStart(42, tt.stat)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("parseProcStart = %d, %v; want %d (ok %v)", got, err, tt.want, tt.ok)
			}
		})
	}
}
