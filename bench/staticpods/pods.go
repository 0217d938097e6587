package staticpods

import (
	"cmp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// ReasonReadinessInferred is the reason of a Ready or ContainersReady
// condition that holds because every probed container has run past its
// first probe: the runtime does not show probe results (see the package
// documentation).
const ReasonReadinessInferred = "ReadinessInferred"

// Waiting reasons, the kubelet's where it has one.
const (
	reasonCreating = "ContainerCreating" // no container yet, or created and not started
	reasonUnknown  = "ContainerStatusUnknown"
	reasonRemoved  = "ContainerRemoved" // listed, then gone before its status was read
	reasonNotReady = "ContainersNotReady"
)

// runtimePod is what the runtime holds under one pair of pod labels
// (namespace, name as the agent named it).
type runtimePod struct {
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
}

// groupRuntime groups sandboxes and containers by their pod labels. A
// container without them is placed by its sandbox's; anything else
// without them is not a Kubernetes pod's and is left out.
func groupRuntime(sbs []*runtimeapi.PodSandbox, ctrs []*runtimeapi.Container) map[key]*runtimePod {
	out := map[key]*runtimePod{}
	of := func(k key) *runtimePod {
		rp := out[k]
		if rp == nil {
			rp = &runtimePod{}
			out[k] = rp
		}
		return rp
	}
	bySandbox := make(map[string]key, len(sbs))
	for _, sb := range sbs {
		k, ok := labelKey(sb.GetLabels())
		if !ok {
			continue
		}
		bySandbox[sb.GetId()] = k
		rp := of(k)
		rp.sandboxes = append(rp.sandboxes, sb)
	}
	for _, c := range ctrs {
		k, ok := labelKey(c.GetLabels())
		if !ok {
			if k, ok = bySandbox[c.GetPodSandboxId()]; !ok {
				continue
			}
		}
		rp := of(k)
		rp.containers = append(rp.containers, c)
	}
	return out
}

func labelKey(l map[string]string) (key, bool) {
	ns, name := l[cri.PodNamespaceLabel], l[cri.PodNameLabel]
	return key{ns, name}, ns != "" && name != ""
}

// style is how an agent names a static pod in the runtime.
type style int32

const (
	styleUnknown  style = iota
	stylePlain          // "<name>", as nodeguard
	styleSuffixed       // "<name>-<nodeName>", as the kubelet
)

// resolve maps a runtime name to a known manifest's key: exactly, or with
// suffix ("-<nodeName>") stripped. A name that matches no known manifest
// stays as it is, with styleUnknown.
func resolve(rk key, suffix string, known func(key) bool) (key, style) {
	if known(rk) {
		return rk, stylePlain
	}
	if suffix != "" {
		if name, ok := strings.CutSuffix(rk.name, suffix); ok && name != "" {
			if k := (key{rk.namespace, name}); known(k) {
				return k, styleSuffixed
			}
		}
	}
	return rk, styleUnknown
}

// runtimeName is the io.kubernetes.pod.name an agent of style s gives the
// manifest k.
func runtimeName(k key, s style, suffix string) string {
	if s == styleSuffixed {
		return k.name + suffix
	}
	return k.name
}

// podView is everything known of one pod: its manifest, its file, and
// what the runtime holds of it.
type podView struct {
	key  key
	m    *manifest // nil: no manifest known (a pod the runtime has from elsewhere)
	file bool      // its manifest file exists
	// deleted: when its file was removed or seen gone (zero while it is
	// there, and for a pod without a manifest).
	deleted time.Time
	rt      runtimePod
}

// present is the gone rule turned around: the file exists, or a sandbox
// of the pod is ready, or a container of it runs. A stopped sandbox and
// exited containers do not keep a pod whose file is gone.
func (v *podView) present() bool {
	if v.file {
		return true
	}
	for _, sb := range v.rt.sandboxes {
		if sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY {
			return true
		}
	}
	for _, c := range v.rt.containers {
		if c.GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING {
			return true
		}
	}
	return false
}

// sandbox is the pod's newest sandbox (by created_at, then id for a total
// order), or nil.
func (v *podView) sandbox() *runtimeapi.PodSandbox {
	var newest *runtimeapi.PodSandbox
	for _, sb := range v.rt.sandboxes {
		if newest == nil || cmp.Or(cmp.Compare(sb.GetCreatedAt(), newest.GetCreatedAt()), strings.Compare(sb.GetId(), newest.GetId())) > 0 {
			newest = sb
		}
	}
	return newest
}

// slot is one container to report: the manifest's (or, without one, the
// runtime's) and the newest runtime container of that name in the newest
// sandbox, if any.
type slot struct {
	want wantContainer
	c    *runtimeapi.Container
}

// slots lists the containers to report, in the manifest's order; without
// a usable manifest, the names the newest sandbox holds, sorted.
func (v *podView) slots(sb *runtimeapi.PodSandbox) []slot {
	newest := map[string]*runtimeapi.Container{}
	if sb != nil {
		for _, c := range v.rt.containers {
			if c.GetPodSandboxId() != sb.GetId() {
				continue
			}
			name := containerName(c)
			cur := newest[name]
			if cur == nil || cmp.Or(cmp.Compare(c.GetMetadata().GetAttempt(), cur.GetMetadata().GetAttempt()),
				cmp.Compare(c.GetCreatedAt(), cur.GetCreatedAt()), strings.Compare(c.GetId(), cur.GetId())) > 0 {
				newest[name] = c
			}
		}
	}
	var out []slot
	if v.m != nil && v.m.err == nil {
		for _, w := range v.m.containers {
			out = append(out, slot{want: w, c: newest[w.name]})
		}
		return out
	}
	for name, c := range newest {
		out = append(out, slot{want: wantContainer{name: name, image: c.GetImage().GetImage()}, c: c})
	}
	slices.SortFunc(out, func(a, b slot) int { return strings.Compare(a.want.name, b.want.name) })
	return out
}

func containerName(c *runtimeapi.Container) string {
	if n := c.GetLabels()[cri.ContainerNameLabel]; n != "" {
		return n
	}
	return c.GetMetadata().GetName()
}

// needsStatus reports whether a slot's container is reported from its
// ContainerStatus: running (started_at) or exited (exit code, times).
func needsStatus(c *runtimeapi.Container) bool {
	switch c.GetState() {
	case runtimeapi.ContainerState_CONTAINER_RUNNING, runtimeapi.ContainerState_CONTAINER_EXITED:
		return true
	}
	return false
}

// build makes the v1 Pod of a present view; status gives the
// ContainerStatus of the slots' containers that need one (nil when it
// was gone before it could be read).
func (v *podView) build(status func(id string) *runtimeapi.ContainerStatus, now time.Time) *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: v.key.namespace, Name: v.key.name},
	}
	if !v.file && !v.deleted.IsZero() {
		p.DeletionTimestamp = &metav1.Time{Time: v.deleted}
	}
	sb := v.sandbox()
	if sb != nil {
		p.UID = types.UID(sb.GetMetadata().GetUid())
		if p.UID == "" {
			p.UID = types.UID(sb.GetLabels()[cri.PodUIDLabel])
		}
		p.CreationTimestamp = metav1.Time{Time: time.Unix(0, sb.GetCreatedAt())}
	}
	// (SANDBOX_READY is the zero state: a nil sandbox's getter gives it.)
	sandboxReady := sb != nil && sb.GetState() == runtimeapi.PodSandboxState_SANDBOX_READY
	allReady, inferred := true, false
	for _, s := range v.slots(sb) {
		cs := containerStatus(s, status, now)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
		allReady = allReady && cs.Ready
		inferred = inferred || (cs.Ready && s.want.readyAfter > 0)
	}
	restart := corev1.RestartPolicyAlways
	if v.m != nil && v.m.err == nil {
		restart = v.m.restart
	}
	p.Status.Phase = phase(restart, sandboxReady, p.Status.ContainerStatuses)
	if v.m != nil && v.m.err != nil {
		p.Status.Message = v.m.err.Error()
	}
	ready := corev1.PodCondition{Status: corev1.ConditionFalse, Reason: reasonNotReady}
	switch {
	case p.Status.Phase == corev1.PodRunning && allReady && inferred:
		ready = corev1.PodCondition{Status: corev1.ConditionTrue, Reason: ReasonReadinessInferred,
			Message: "probed containers have run past their first probe; the runtime does not show probe results"}
	case p.Status.Phase == corev1.PodRunning && allReady:
		ready = corev1.PodCondition{Status: corev1.ConditionTrue}
	}
	for _, t := range []corev1.PodConditionType{corev1.ContainersReady, corev1.PodReady} {
		c := ready
		c.Type = t
		p.Status.Conditions = append(p.Status.Conditions, c)
	}
	return p
}

// containerStatus is one slot's v1 status.
func containerStatus(s slot, status func(id string) *runtimeapi.ContainerStatus, now time.Time) corev1.ContainerStatus {
	cs := corev1.ContainerStatus{Name: s.want.name, Image: s.want.image}
	if s.c == nil {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reasonCreating}
		return cs
	}
	cs.RestartCount = int32(s.c.GetMetadata().GetAttempt())
	cs.ImageID = s.c.GetImageRef()
	if cs.Image == "" {
		cs.Image = s.c.GetImage().GetImage()
	}
	if !needsStatus(s.c) {
		reason := reasonCreating
		if s.c.GetState() != runtimeapi.ContainerState_CONTAINER_CREATED {
			reason = reasonUnknown
		}
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reason}
		return cs
	}
	st := status(s.c.GetId())
	if st == nil {
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reasonRemoved}
		return cs
	}
	switch st.GetState() {
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		started := time.Unix(0, st.GetStartedAt())
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: started}}
		t := true
		cs.Started = &t
		cs.Ready = now.Sub(started) >= s.want.readyAfter
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		cs.State.Terminated = &corev1.ContainerStateTerminated{
			ExitCode:   st.GetExitCode(),
			Reason:     st.GetReason(),
			Message:    st.GetMessage(),
			StartedAt:  metav1.Time{Time: time.Unix(0, st.GetStartedAt())},
			FinishedAt: metav1.Time{Time: time.Unix(0, st.GetFinishedAt())},
		}
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reasonCreating}
	default:
		cs.State.Waiting = &corev1.ContainerStateWaiting{Reason: reasonUnknown}
	}
	return cs
}

// phase is the pod's phase from its containers: Running when the sandbox
// is ready and every container runs; Succeeded or Failed when every
// container has exited and the restart policy will not start them again;
// Pending otherwise.
func phase(restart corev1.RestartPolicy, sandboxReady bool, cs []corev1.ContainerStatus) corev1.PodPhase {
	if len(cs) == 0 {
		return corev1.PodPending
	}
	running, exited, failed := 0, 0, 0
	for _, c := range cs {
		switch {
		case c.State.Running != nil:
			running++
		case c.State.Terminated != nil:
			exited++
			if c.State.Terminated.ExitCode != 0 {
				failed++
			}
		}
	}
	switch {
	case running == len(cs) && sandboxReady:
		return corev1.PodRunning
	case exited < len(cs):
		return corev1.PodPending
	case restart == corev1.RestartPolicyNever && failed > 0:
		return corev1.PodFailed
	case restart == corev1.RestartPolicyNever, restart == corev1.RestartPolicyOnFailure && failed == 0:
		return corev1.PodSucceeded
	}
	return corev1.PodPending
}
