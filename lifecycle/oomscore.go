package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/lifecycle/qos"
)

// raisedProc is a process whose oom_score_adj SetOOMScoreAdj changed, and
// the value it had before: what RestoreOOMScoreAdj puts back.
type raisedProc struct {
	pid int
	// start is the process's start time (/proc/<pid>/stat field 22):
	// with the pid it names the process, since pids are recycled.
	start uint64
	was   int
}

// SetOOMScoreAdj writes adj to every process of the pod, the sandbox's
// included (raising the next victim, so that the kernel OOM killer, if it
// fires anyway, takes the pod nodeguard would have evicted). It records
// what each process had, for RestoreOOMScoreAdj; called again before
// Restore, it keeps the values from before the first call.
func (a *EvictionActor) SetOOMScoreAdj(uid types.UID, adj int) error {
	m := a.m
	m.mu.Lock()
	st, ok := m.pods[uid]
	parent := ""
	if ok {
		parent = st.parent
	}
	m.mu.Unlock()
	if parent == "" {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, ErrNotFound)
	}
	pids, err := m.cfg.Cgroups.Procs(parent)
	if err != nil {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	prev := a.raised[uid]
	recs := make(map[int]raisedProc, len(pids))
	var errs []error
	for _, pid := range pids {
		r, ok, err := raiseOOMScoreAdj(pid, adj, prev)
		if err != nil {
			errs = append(errs, fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err))
			if p, ok := prev[pid]; ok {
				recs[pid] = p // raised by an earlier call: still to restore
			}
		}
		if ok {
			recs[pid] = r
		}
	}
	// A process recorded before and not seen now has exited, or left
	// the pod: either way it is no longer the pod's to restore.
	if a.raised == nil {
		a.raised = map[types.UID]map[int]raisedProc{}
	}
	a.raised[uid] = recs
	return errors.Join(errs...)
}

// raiseOOMScoreAdj writes adj to pid and returns what it had before (the
// value recorded in prev when prev holds this very process). ok is false
// when the process exited before it was written.
func raiseOOMScoreAdj(pid, adj int, prev map[int]raisedProc) (r raisedProc, ok bool, err error) {
	start, err := procStart(pid)
	if exited(err) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	r = raisedProc{pid: pid, start: start}
	if p, ok := prev[pid]; ok && p.start == start {
		r.was = p.was
	} else if r.was, err = readOOMScoreAdj(pid); exited(err) {
		return r, false, nil
	} else if err != nil {
		return r, false, err
	}
	if err := writeOOMScoreAdj(pid, adj); exited(err) {
		return r, false, nil
	} else if err != nil {
		return r, false, err
	}
	return r, true, nil
}

// RestoreOOMScoreAdj undoes SetOOMScoreAdj: every process it raised that
// still runs (same pid, same start time) gets back the value it had, the
// sandbox's pause process too; a container process that joined since gets
// the kubelet's value for its container. Without CAP_SYS_RESOURCE a value
// below the runtime's minimum cannot be written back, and is clamped as
// when the container was created (qos.ClampForCapability).
func (a *EvictionActor) RestoreOOMScoreAdj(uid types.UID) error {
	a.mu.Lock()
	recs := a.raised[uid]
	delete(a.raised, uid)
	a.mu.Unlock()
	m := a.m
	var errs []error
	restored := make(map[int]bool, len(recs))
	for _, r := range recs {
		start, err := procStart(r.pid)
		if exited(err) || (err == nil && start != r.start) {
			continue // gone, its pid perhaps another process's now
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("restore oom_score_adj of pod %s: %w", uid, err))
			continue
		}
		adj, _ := qos.ClampForCapability(r.was, m.cfg.HasCapSysResource, m.cfg.MinOOMScoreAdj)
		if err := writeOOMScoreAdj(r.pid, adj); err != nil && !exited(err) {
			errs = append(errs, fmt.Errorf("restore oom_score_adj of pod %s: %w", uid, err))
			continue
		}
		restored[r.pid] = true
	}
	errs = append(errs, a.restoreJoined(uid, restored))
	return errors.Join(errs...)
}

// restoreJoined gives the kubelet's value to the container processes of
// the pod that RestoreOOMScoreAdj did not restore: those that joined after
// the raise (a fork inherits its parent's raised value).
func (a *EvictionActor) restoreJoined(uid types.UID, restored map[int]bool) error {
	m := a.m
	m.mu.Lock()
	st, ok := m.pods[uid]
	var sandbox, parent string
	var pod *corev1.Pod
	if ok {
		sandbox, parent, pod = st.sandboxID, st.parent, st.pod
	}
	m.mu.Unlock()
	if !ok || sandbox == "" || parent == "" {
		return nil // gone: nothing to restore
	}
	cctx, cancel := call(context.Background())
	ctrs, err := m.cfg.Runtime.ListContainers(cctx, sandbox, nil)
	cancel()
	if err != nil {
		return fmt.Errorf("restore oom_score_adj of %s: %w", key(pod), err)
	}
	var errs []error
	for _, c := range ctrs {
		spec := findContainer(pod, c.GetMetadata().GetName())
		if spec == nil {
			continue
		}
		adj, err := qos.OOMScoreAdj(pod, spec, m.cfg.MemoryCapacity)
		if err != nil {
			continue
		}
		adj, _ = qos.ClampForCapability(adj, m.cfg.HasCapSysResource, m.cfg.MinOOMScoreAdj)
		pids, err := m.cfg.Cgroups.ContainerProcs(parent, c.Id)
		if err != nil {
			errs = append(errs, fmt.Errorf("restore oom_score_adj of %s: %w", key(pod), err))
			continue
		}
		for _, pid := range pids {
			if restored[pid] {
				continue
			}
			if err := writeOOMScoreAdj(pid, adj); err != nil && !exited(err) {
				errs = append(errs, fmt.Errorf("restore oom_score_adj of %s: %w", key(pod), err))
			}
		}
	}
	return errors.Join(errs...)
}

func findContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// exited reports whether err says the process is gone: its /proc
// directory removed, or a zombie whose oom_score_adj can no longer be
// written (ESRCH).
func exited(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
}

func procPath(pid int, file string) string {
	return "/proc/" + strconv.Itoa(pid) + "/" + file
}

// procStart returns the start time of pid (field 22 of /proc/<pid>/stat,
// in clock ticks since boot).
func procStart(pid int) (uint64, error) {
	b, err := os.ReadFile(procPath(pid, "stat"))
	if err != nil {
		return 0, fmt.Errorf("read the start time of pid %d: %w", pid, err)
	}
	return parseProcStart(pid, string(b))
}

// parseProcStart reads field 22 of pid's /proc/<pid>/stat line s.
func parseProcStart(pid int, s string) (uint64, error) {
	// The command name (field 2) is in parentheses and may hold spaces
	// and parentheses itself: the fields are counted after the last ')'.
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("parse %s: no command name", procPath(pid, "stat"))
	}
	f := strings.Fields(s[end+1:])
	const startField = 22 - 3 // f[0] is field 3, the state
	if len(f) <= startField {
		return 0, fmt.Errorf("parse %s: %d fields, want at least 22", procPath(pid, "stat"), len(f)+2)
	}
	v, err := strconv.ParseUint(f[startField], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: start time: %w", procPath(pid, "stat"), err)
	}
	return v, nil
}

func readOOMScoreAdj(pid int) (int, error) {
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

func writeOOMScoreAdj(pid, adj int) error {
	if err := os.WriteFile(procPath(pid, "oom_score_adj"), []byte(strconv.Itoa(adj)), 0); err != nil {
		return fmt.Errorf("oom_score_adj of pid %d to %d: %w", pid, adj, err)
	}
	return nil
}
