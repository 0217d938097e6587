package guard

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/oomadj"
)

// SetOOMScoreAdj raises every process of the pod to adj (the next
// victim's raise), recording what each had: the kubelet's value, which
// RestoreOOMScoreAdj puts back. Nothing else of the kubelet's choices is
// ever written.
func (a *Actor) SetOOMScoreAdj(uid types.UID, adj int) error {
	p, ok := a.foundPod(uid)
	if !ok {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, ErrNotFound)
	}
	d, err := a.cfg.Finder.Layout.Memory.Resolve(p.Cgroup)
	if err != nil {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err)
	}
	pids, err := cgroups.TreeProcs(d.Path)
	if err != nil {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err)
	}
	if err := a.raiser.Raise(uid, pids, adj); err != nil {
		return fmt.Errorf("set oom_score_adj of pod %s: %w", uid, err)
	}
	return nil
}

// RestoreOOMScoreAdj puts back what SetOOMScoreAdj raised: each raised
// process gets its own value back; a process forked in the pod since
// (which inherited the raised value) gets its nearest raised ancestor's.
// A process the runtime started in the pod since has the kubelet's value
// already, and is not written.
func (a *Actor) RestoreOOMScoreAdj(uid types.UID) error {
	recs, restored, err := a.raiser.Restore(uid, nil)
	if err != nil {
		err = fmt.Errorf("restore oom_score_adj of pod %s: %w", uid, err)
	}
	p, ok := a.foundPod(uid)
	if !ok || len(recs) == 0 {
		return err
	}
	d, rerr := a.cfg.Finder.Layout.Memory.Resolve(p.Cgroup)
	if rerr != nil {
		return err
	}
	pids, lerr := cgroups.TreeProcs(d.Path)
	if lerr != nil {
		return err
	}
	errs := []error{err}
	for _, pid := range pids {
		if restored[pid] {
			continue
		}
		if v, ok := oomadj.Was(recs, pid, oomadj.MaxDepth); ok {
			if werr := oomadj.Write(pid, v); werr != nil && !oomadj.Exited(werr) {
				errs = append(errs, fmt.Errorf("restore oom_score_adj of pod %s: %w", uid, werr))
			}
		}
	}
	return errors.Join(errs...)
}
