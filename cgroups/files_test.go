package cgroups

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// exit is a child's end: done is closed when Wait has returned err.
type exit struct {
	done chan struct{}
	err  error
}

// sleeper starts a child that sleeps until killed. The test kills what
// is left.
func sleeper(t *testing.T) (*exec.Cmd, *exit) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &exit{done: make(chan struct{})}
	go func() {
		e.err = cmd.Wait()
		close(e.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-e.done
	})
	return cmd, e
}

// killedBySIGKILL waits (at most 5 s) for a sleeper to end and reports
// whether SIGKILL ended it.
func killedBySIGKILL(t *testing.T, e *exit) bool {
	t.Helper()
	select {
	case <-e.done:
		var ee *exec.ExitError
		if !errors.As(e.err, &ee) {
			return false
		}
		ws, ok := ee.Sys().(syscall.WaitStatus)
		return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	case <-time.After(5 * time.Second):
		return false
	}
}

// alive reports whether the sleeper is still running 50 ms from now.
func alive(e *exit) bool {
	select {
	case <-e.done:
		return false
	case <-time.After(50 * time.Millisecond):
		return true
	}
}

// readsOf returns a cgroup.procs reader that answers with each of reads
// in turn, and with the last one from then on.
func readsOf(reads ...[]int) func(string) ([]int, error) {
	n := 0
	return func(string) ([]int, error) {
		r := reads[min(n, len(reads)-1)]
		n++
		return slices.Clone(r), nil
	}
}

func TestSigkillTreeSignalsOnlyPidsStillListedAfterThePidfdIsOpen(t *testing.T) {
	stays, staysDone := sleeper(t)
	leaves, leavesDone := sleeper(t)
	// leaves is gone from cgroup.procs at the second read: by then its pid
	// may be someone else's, and it must not be hit.
	reads := readsOf([]int{stays.Process.Pid, leaves.Process.Pid}, []int{stays.Process.Pid}, []int{})
	n, err := sigkillTree(t.TempDir(), reads)
	if err != nil || n != 1 {
		t.Fatalf("sigkillTree = %d, %v; want 1, nil", n, err)
	}
	if !killedBySIGKILL(t, staysDone) {
		t.Error("the pid listed at both reads was not SIGKILLed")
	}
	if !alive(leavesDone) {
		t.Error("the pid that left before the second read was signalled")
	}
}

func TestSigkillTreeLeavesAPidListedOnlyAtTheSecondReadToTheNextRound(t *testing.T) {
	first, firstDone := sleeper(t)
	late, lateDone := sleeper(t)
	a, b := first.Process.Pid, late.Process.Pid
	// b moved in between the reads: it is not pinned yet, so it waits for
	// the next round, which pins and signals it.
	n, err := sigkillTree(t.TempDir(), readsOf([]int{a}, []int{a, b}, []int{a, b}))
	if err != nil || n != 2 {
		t.Fatalf("sigkillTree = %d, %v; want 2, nil", n, err)
	}
	if !killedBySIGKILL(t, firstDone) || !killedBySIGKILL(t, lateDone) {
		t.Error("not both SIGKILLed")
	}
}

func TestSigkillTreeAndEmptyTreeOfAMissingCgroupDoNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	if n, err := SigkillTree(dir); n != 0 || err != nil {
		t.Errorf("SigkillTree = %d, %v; want 0, nil", n, err)
	}
	if err := EmptyTree(dir, time.Now()); err != nil {
		t.Errorf("EmptyTree = %v, want nil", err)
	}
}

func TestSigkillTreeFailsOnAMalformedCgroupProcs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileProcs), []byte("12\nnot-a-pid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := SigkillTree(dir); !errors.Is(err, ErrMalformed) {
		t.Errorf("SigkillTree = %v, want ErrMalformed", err)
	}
}

func TestEmptyTreeGivesUpAtTheDeadlineNamingWhatIsLeft(t *testing.T) {
	// A regular file that keeps listing a pid: the "process" never
	// leaves. The pid is this test's own sleeper, which SIGKILL ends.
	cmd, done := sleeper(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileProcs), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := EmptyTree(dir, time.Now().Add(50*time.Millisecond))
	if !errors.Is(err, ErrPopulated) {
		t.Errorf("EmptyTree = %v, want ErrPopulated", err)
	}
	if !killedBySIGKILL(t, done) {
		t.Error("the listed process was not SIGKILLed")
	}
}

func TestControllersAndMemoryLimitFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileControllers), []byte("cpu io memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Controllers(dir)
	if err != nil || !slices.Equal(got, []string{"cpu", "io", "memory", "pids"}) {
		t.Errorf("Controllers = %q, %v", got, err)
	}
	if _, err := Controllers(filepath.Join(dir, "gone")); !Gone(err) {
		t.Errorf("Controllers of a missing cgroup = %v, want a gone error", err)
	}
	for _, tt := range []struct {
		h    Hierarchy
		want string
	}{
		{Hierarchy{ID: 0}, "memory.max"},
		{Hierarchy{ID: 4, Controllers: []string{"memory"}}, "memory.limit_in_bytes"},
	} {
		if got := tt.h.MemoryLimitFile(); got != tt.want {
			t.Errorf("hierarchy %d: MemoryLimitFile = %q, want %q", tt.h.ID, got, tt.want)
		}
	}
}
