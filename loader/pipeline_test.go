package loader_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/loader"
	"github.com/nodeguard/nodeguard/loader/event"
)

// The test binary doubles as the memory hog: with NODEGUARD_TEST_HOG set it
// raises its oom_score_adj and then touches memory until it is killed, from
// one thread ("1") or from hogThreads threads at once ("threads").
func TestMain(m *testing.M) {
	switch os.Getenv("NODEGUARD_TEST_HOG") {
	case "1":
		hog(1)
	case "threads":
		hog(hogThreads)
	}
	os.Exit(m.Run())
}

// hogThreads threads faulting at once make the kernel mark several threads
// of one killed process as OOM victims, each with its own mark_victim.
const hogThreads = 8

func hog(threads int) {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte("500"), 0); err != nil {
		fmt.Fprintln(os.Stderr, "hog: set oom_score_adj:", err)
		os.Exit(3)
	}
	var wg sync.WaitGroup
	for t := 0; t < threads; t++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // each on its own kernel thread
			var keep [][]byte
			for i := 0; i < 1024/threads; i++ { // 1 GiB in all at most: bounded even if no limit applies
				b := make([]byte, 1<<20)
				for j := 0; j < len(b); j += 4096 {
					b[j] = 1
				}
				keep = append(keep, b)
			}
			runtime.KeepAlive(keep)
		}()
	}
	wg.Wait()
	fmt.Fprintln(os.Stderr, "hog: allocated 1 GiB without being killed")
	os.Exit(4)
}

func open(t *testing.T, opts loader.Options) *loader.Pipeline {
	t.Helper()
	p, err := loader.Open(opts)
	if err != nil {
		t.Fatalf("open pipeline: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close pipeline: %v", err)
		}
	})
	return p
}

func monitor(t *testing.T, p *loader.Pipeline, sb *cgtest.Sandbox) {
	t.Helper()
	for _, d := range sb.Dirs() {
		if _, err := p.MonitorTree(d.Hierarchy.ID, d.Path, d.Rel); err != nil {
			t.Fatal(err)
		}
	}
}

// ids are the memory cgroup and cgroup2 keys of a sandbox.
type ids struct {
	memcg   loader.CgroupKey
	unified loader.CgroupKey // zero when there is no separate cgroup2 dir
}

func sandboxIDs(t *testing.T, sb *cgtest.Sandbox) ids {
	t.Helper()
	l := sb.Layout()
	mem, err := sb.MemoryID()
	if err != nil {
		t.Fatal(err)
	}
	out := ids{memcg: loader.CgroupKey{ID: mem, HierarchyID: l.Memory.ID}}
	if sb.UnifiedDir() != "" {
		u, err := sb.UnifiedID()
		if err != nil {
			t.Fatal(err)
		}
		out.unified = loader.CgroupKey{ID: u, HierarchyID: 0}
	}
	return out
}

func (i ids) owns(h *event.Header) bool {
	return h.MemcgID == i.memcg.ID || (i.unified.ID != 0 && h.CgroupID == i.unified.ID)
}

// TestPipelineDeliversARealOOM drives a real memory cgroup OOM and checks
// every event kind the pipeline promises, on each attach path.
func TestPipelineDeliversARealOOM(t *testing.T) {
	cgtest.RequirePrivileged(t)
	for _, tc := range []struct {
		name  string
		paths []loader.AttachPath
		hog   string
	}{
		{"with the fastest path the kernel allows", nil, "1"},
		{"with classic tracepoints only", []loader.AttachPath{loader.PathTracepoint}, "1"},
		// Every thread of the killed hog that faults again marks itself a
		// victim: still one kill, one event, under the process's pid.
		{"with the fastest path and a many-threaded hog", nil, "threads"},
		{"with classic tracepoints and a many-threaded hog", []loader.AttachPath{loader.PathTracepoint}, "threads"},
	} {
		t.Run(tc.name, func(t *testing.T) { testRealOOM(t, tc.paths, tc.hog) })
	}
}

func testRealOOM(t *testing.T, paths []loader.AttachPath, hogMode string) {
	p := open(t, loader.Options{Paths: paths, MinReclaimEpisode: 0})
	for _, h := range p.Hooks() {
		if h.Path == loader.PathOff {
			t.Fatalf("hook %s not attached: %v", h.Name, h.Failures)
		}
		if paths != nil && h.Path != paths[0] {
			t.Fatalf("hook %s attached on %s, want %s", h.Name, h.Path, paths[0])
		}
	}

	parent := cgtest.New(t)
	monitor(t, p, parent)
	outside := cgtest.New(t) // a sibling that must stay silent

	// Made after monitoring began: the mkdir hook must add it in the kernel.
	victim := parent.Child(t, "victim")
	if err := victim.SetMemoryLimit(64 << 20); err != nil {
		t.Fatal(err)
	}
	vIDs := sandboxIDs(t, victim)
	oIDs := sandboxIDs(t, outside)
	if ok, err := p.Monitored(vIDs.memcg); err != nil || !ok {
		t.Fatalf("child memcg %d not monitored after mkdir (err %v)", vIDs.memcg.ID, err)
	}

	// Noise outside the monitored subtree: exits and an oom_score_adj write.
	noise := exec.Command("/bin/sh", "-c", "echo 900 > /proc/self/oom_score_adj; /bin/true; /bin/true")
	if err := outside.Start(t, noise); err != nil {
		t.Fatal(err)
	}
	if err := noise.Wait(); err != nil {
		t.Fatalf("noise process: %v", err)
	}

	hogCmd := exec.Command(os.Args[0], "-test.run=^$")
	hogCmd.Env = append(os.Environ(), "NODEGUARD_TEST_HOG="+hogMode)
	if err := victim.Start(t, hogCmd); err != nil {
		t.Fatal(err)
	}
	hogPID := uint32(hogCmd.Process.Pid)
	werr := hogCmd.Wait()
	var exitErr *exec.ExitError
	if !errors.As(werr, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("hog should die of SIGKILL from the OOM killer, got %v", werr)
	}

	victimRel := victim.Rel()
	victimMemDir := victim.MemoryDir()
	kernelKills, err := victim.OOMKills()
	if err != nil {
		t.Fatal(err)
	}
	if err := victim.Remove(); err != nil {
		t.Fatal(err)
	}

	var (
		gotMkdir, gotRmdir, gotOOM, gotReclaim, gotExit, gotAdj bool
		oomEvents                                               uint64
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for !(gotMkdir && gotRmdir && gotOOM && gotReclaim && gotExit && gotAdj) {
		var ev event.Event
		select {
		case ev = <-p.Events():
		case <-ctx.Done():
			t.Fatalf("missing events after 10s: mkdir=%v rmdir=%v oom_kill=%v reclaim=%v exit=%v oom_score_adj=%v",
				gotMkdir, gotRmdir, gotOOM, gotReclaim, gotExit, gotAdj)
		}
		h := ev.Hdr()
		if oIDs.owns(h) {
			t.Fatalf("event from the unmonitored sibling arrived: %s", event.Human(ev, ""))
		}
		switch e := ev.(type) {
		case *event.Cgroup:
			if e.ID == oIDs.memcg.ID && e.HierarchyID == oIDs.memcg.HierarchyID {
				t.Fatalf("cgroup event for the unmonitored sibling: %+v", e)
			}
			if e.ID != vIDs.memcg.ID || e.HierarchyID != vIDs.memcg.HierarchyID {
				continue
			}
			if e.Kind == event.KindCgroupMkdir {
				gotMkdir = true
				if e.Path == "" || victimMemDir[len(victimMemDir)-len(e.Path):] != e.Path {
					t.Errorf("mkdir path %q is not the tail of %q (rel %s)", e.Path, victimMemDir, victimRel)
				}
				if e.ParentID == 0 && e.Flags&event.FlagClassicTP == 0 {
					t.Errorf("tp_btf mkdir without parent id: %+v", e)
				}
			} else {
				gotRmdir = true
			}
		case *event.OOMKill:
			if e.PID != hogPID {
				t.Fatalf("oom_kill victim pid %d, want the hog %d", e.PID, hogPID)
			}
			if e.MemcgID != vIDs.memcg.ID {
				t.Fatalf("oom_kill memcg id %d, want the victim cgroup %d", e.MemcgID, vIDs.memcg.ID)
			}
			if e.Flags.Has(event.FlagNoTaskDetails) {
				// Classic mark_victim before 6.8 carries only the pid.
				t.Logf("kernel offers no task details on this path: %s", event.Human(ev, ""))
			} else {
				if e.OOMScoreAdj != 500 {
					t.Errorf("oom_kill oom_score_adj %d, want 500", e.OOMScoreAdj)
				}
				if e.RSSBytes() < 32<<20 {
					t.Errorf("oom_kill rss %d bytes, want most of the 64 MiB limit", e.RSSBytes())
				}
			}
			oomEvents++
			gotOOM = true
		case *event.Reclaim:
			if e.Type == event.ReclaimMemcg && e.MemcgID == vIDs.memcg.ID {
				gotReclaim = true
			}
		case *event.Exit:
			if e.PID == hogPID {
				if e.Signal() != uint32(syscall.SIGKILL) {
					t.Fatalf("hog exit signal %d, want SIGKILL", e.Signal())
				}
				gotExit = true
			}
		case *event.OOMScoreAdj:
			if e.PID == hogPID && e.OOMScoreAdj == 500 {
				gotAdj = true
			}
		}
	}

	// The kernel's own count (memory.events on cgroup2, memory.oom_control
	// on v1) must agree with the events: one kill, one event.
	drainOOM(p, vIDs, &oomEvents)
	if oomEvents != kernelKills {
		t.Errorf("saw %d oom_kill events for the victim cgroup, the kernel counted %d", oomEvents, kernelKills)
	}

	stats, err := p.ReclaimStats()
	if err != nil {
		t.Fatal(err)
	}
	var episodes uint64
	for _, s := range stats {
		if s.Cgroup == vIDs.memcg && s.Type == uint32(event.ReclaimMemcg) {
			episodes = s.Episodes
		}
	}
	if episodes == 0 {
		t.Errorf("no memcg reclaim aggregate for the victim cgroup %d", vIDs.memcg.ID)
	}
	if ok, _ := p.Monitored(vIDs.memcg); ok {
		t.Error("removed cgroup still in the monitored set: rmdir must take it out")
	}
	rs, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range rs {
		if s.Lost() != 0 {
			t.Errorf("ring %s lost records in a quiet test: %+v", s.Ring, s)
		}
	}
}

// drainOOM counts the oom_kill events for the victim still queued.
func drainOOM(p *loader.Pipeline, v ids, n *uint64) {
	deadline := time.After(200 * time.Millisecond)
	for {
		select {
		case ev := <-p.Events():
			if e, ok := ev.(*event.OOMKill); ok && e.MemcgID == v.memcg.ID {
				*n++
			}
		case <-deadline:
			return
		}
	}
}

// TestRingOverflowIsAccountedExactly overfills a one-page ring and a tiny
// queue on purpose: every record sent must be received or counted dropped.
func TestRingOverflowIsAccountedExactly(t *testing.T) {
	cgtest.RequirePrivileged(t)
	p := open(t, loader.Options{
		Families:  []string{loader.FamilyBench},
		RingSizes: map[loader.Ring]int{loader.RingBench: os.Getpagesize()},
		QueueSize: 16,
	})
	const bursts, per = 200, 500
	for i := 0; i < bursts; i++ {
		if err := p.BenchTrigger(per); err != nil {
			t.Fatal(err)
		}
	}
	// Now drain: consume until the reader has read everything submitted.
	received := 0
	deadline := time.Now().Add(10 * time.Second)
	var st loader.RingStats
	for {
		for drained := false; !drained; {
			select {
			case <-p.Events():
				received++
			default:
				drained = true
			}
		}
		all, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		st = all[0]
		if st.Read == st.Submitted && uint64(received) == st.Delivered {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ring never drained: %+v, received %d", st, received)
		}
		time.Sleep(10 * time.Millisecond)
	}
	sent := uint64(bursts * per)
	if st.Submitted+st.ReserveFailed != sent {
		t.Errorf("kernel accounted %d submitted + %d reserve failures = %d, want %d sent",
			st.Submitted, st.ReserveFailed, st.Submitted+st.ReserveFailed, sent)
	}
	if st.ReserveFailed == 0 || st.QueueDropped == 0 {
		t.Errorf("the test must overflow both the ring and the queue: %+v", st)
	}
	if got := uint64(received) + st.QueueDropped + st.Malformed + st.ReserveFailed; got != sent {
		t.Errorf("received %d + queue dropped %d + malformed %d + ring dropped %d = %d, want %d sent",
			received, st.QueueDropped, st.Malformed, st.ReserveFailed, got, sent)
	}
	t.Logf("sent %d = received %d + queue dropped %d + ring dropped %d", sent, received, st.QueueDropped, st.ReserveFailed)
}

// TestHooksReportEveryAttempt forces a path that cannot work for the bench
// hook (it has no tp_btf variant) and checks that the failure is reported,
// not hidden.
func TestHooksReportEveryAttempt(t *testing.T) {
	cgtest.RequirePrivileged(t)
	p := open(t, loader.Options{Families: []string{loader.FamilyBench, loader.FamilyOOM}, Paths: []loader.AttachPath{loader.PathTPBTF}, NoReaders: true})
	for _, h := range p.Hooks() {
		switch h.Name {
		case "sys_enter":
			if h.Path != loader.PathOff {
				t.Errorf("bench hook attached on %s though only tp_btf was allowed", h.Path)
			}
		case "mark_victim", "oom_score_adj_update":
			if h.Path != loader.PathTPBTF {
				t.Errorf("%s on %s, want tp_btf: %v", h.Name, h.Path, h.Failures)
			}
		}
	}
}
