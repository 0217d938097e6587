// The desired state: the pods the sources (manifest directory, local API)
// want, and the views of them callers read.

package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nodeguard/nodeguard/lifecycle/podspec"
	"github.com/nodeguard/nodeguard/netplumb"
	"github.com/nodeguard/nodeguard/qos"
)

// Apply validates pods and makes them desired. A pod with the name of a
// desired pod but another spec replaces it (the old one is removed first,
// as a static pod whose manifest changed). Until SourcesReady, a static
// pod (the manifest directory's, loaded at start) that does not validate
// or fit the node is not refused but kept, Failed with the reason, as at
// the kubelet's re-admission after a restart (restore.go); after, it is
// refused, and the file's pods keep running as they were.
func (m *Manager) Apply(_ context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error) {
	return m.apply(pods, source)
}

func (m *Manager) apply(pods []*corev1.Pod, source string) ([]*corev1.Pod, error) {
	if staticSource(source) && !m.sourcesReady.Load() && m.firstLoad(source) {
		out := make([]*corev1.Pod, 0, len(pods))
		for _, p := range pods {
			p, err := m.restore(p, source)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
		m.rememberStatic(source, pods)
		return out, nil
	}
	var out []*corev1.Pod
	for _, p := range pods {
		p, err := m.admit(p, source)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if source == SourceAPI {
		if err := m.persistAll(out); err != nil {
			return nil, err
		}
	}
	m.add(out, source, nil)
	if staticSource(source) {
		// The file loads: whatever kept it unavailable is over.
		m.SourceUnavailable(source, nil)
	}
	m.rememberStatic(source, pods)
	return out, nil
}

// admit returns pod defaulted, stamped with its source, and an error when
// it does not validate (ErrInvalid) or the node does not admit it
// (ErrRejected): its nodeSelector, Config.Admit. A pod already desired is
// not admitted again, only validated.
func (m *Manager) admit(p *corev1.Pod, source string) (*corev1.Pod, error) {
	// A pod this agent stamped (a persisted API pod read back) carries
	// the creation time it gave it: no warning for that.
	stamped := p.Annotations[AnnotationSource] == source
	p = p.DeepCopy()
	podspec.Default(p, source)
	defer m.stamp(p, source)
	if prio, ferr := podspec.ResolvePriority(p, m.cfg.PodOptions); ferr != nil {
		return p, fmt.Errorf("%w: pod %s/%s: %s", ErrInvalid, p.Namespace, p.Name, ferr.Error())
	} else if p.Spec.Priority == nil {
		p.Spec.Priority = &prio
	}
	warnings, errs := podspec.Validate(p, m.cfg.PodOptions)
	// Bandwidth annotations are refused here, with their key, not by
	// the runtime's RunPodSandbox later.
	for _, k := range []string{netplumb.AnnotationIngressBandwidth, netplumb.AnnotationEgressBandwidth} {
		if v, ok := p.Annotations[k]; ok {
			if _, err := netplumb.BandwidthFromAnnotations(map[string]string{k: v}); err != nil {
				errs = append(errs, field.Invalid(field.NewPath("metadata", "annotations").Key(k), v, err.Error()))
			}
		}
	}
	if m.cfg.Volumes != nil {
		// What only this node can judge: the hostPath allowlist and
		// types, traversal in paths.
		errs = append(errs, m.cfg.Volumes.Validate(p)...)
	} else {
		// Without a volume manager, refusing beats starting
		// containers without their volumes.
		for i, v := range p.Spec.Volumes {
			errs = append(errs, field.NotSupported(field.NewPath("spec", "volumes").Index(i), v.Name, []string{}))
		}
	}
	if len(errs) > 0 {
		return p, fmt.Errorf("%w: pod %s/%s: %s", ErrInvalid, p.Namespace, p.Name, errs.ToAggregate().Error())
	}
	if !m.desired(p.UID) {
		if err := matchNodeSelector(p, m.cfg.NodeLabels); err != nil {
			return p, fmt.Errorf("%w: pod %s/%s: %w", ErrRejected, p.Namespace, p.Name, err)
		}
	}
	if m.cfg.Admit != nil && !m.desired(p.UID) {
		if err := m.cfg.Admit(p); err != nil {
			return p, fmt.Errorf("%w: pod %s/%s: %w", ErrRejected, p.Namespace, p.Name, err)
		}
	}
	warnings = append(warnings, m.unenforcedLocalStorage(p, source)...)
	for _, w := range warnings {
		if source == SourceAPIServer && (strings.Contains(w, "ignored: set by an API server") || strings.Contains(w, "nodeguard does no scheduling")) {
			continue // the API server set them, and its scheduler placed the pod
		}
		if stamped && strings.HasPrefix(w, "metadata.creationTimestamp:") {
			continue
		}
		m.log.Warn("pod field ignored", "pod", p.Namespace+"/"+p.Name, "warning", w)
	}
	return p, nil
}

// stamp marks p with its source and, when it has none, its creation time.
func (m *Manager) stamp(p *corev1.Pod, source string) {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[AnnotationSource] = source
	if p.CreationTimestamp.IsZero() {
		p.CreationTimestamp = metav1.NewTime(m.now())
	}
}

// add makes the admitted pods out desired, replacing desired pods of
// their names. rejected, when set, ends them as soon as they are added
// (restore.go). A pod recorded as evicted is added Failed.
func (m *Manager) add(out []*corev1.Pod, source string, rejected *evictionRecord) {
	// The eviction records are read before the lock: a read may
	// quarantine or rewrite one.
	evs := make([]*evictionRecord, len(out))
	for i, p := range out {
		if !m.desired(p.UID) {
			evs[i] = m.loadEviction(p.UID)
		}
	}
	var added []*corev1.Pod
	m.mu.Lock()
	for i, p := range out {
		if source == SourceAPI {
			m.apiAvailable(apiPodKey(p.Namespace, p.Name)) // its sandbox of old is an orphan now
		}
		for uid, st := range m.pods {
			if st.pod.Namespace == p.Namespace && st.pod.Name == p.Name && uid != p.UID && !st.deleting {
				st.deleting = true
				st.poke()
			}
		}
		if st, ok := m.pods[p.UID]; ok && !st.deleting {
			// The same UID is the same pod (UIDs of manifests are
			// derived from their content); a pod is never mutated in
			// place, so the reconciler may read st.pod unlocked.
			continue
		}
		st := &podState{pod: p, source: source, backoff: map[string]*backoff{}, created: m.now(), kick: make(chan struct{}, 1),
			status: corev1.PodStatus{Phase: corev1.PodPending}}
		ev := evs[i]
		if ev == nil && rejected != nil {
			ev = new(evictionRecord)
			*ev = *rejected
		}
		if ev != nil {
			st.evicted = ev
			st.status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: ev.reason(), Message: ev.Message}
		}
		m.pods[p.UID] = st
		added = append(added, p)
	}
	m.mu.Unlock()
	if source != SourceAPIServer { // the API server's pods carry their token volume
		for _, p := range added {
			logNoServiceAccountToken(m.log, p)
		}
	}
	m.poke()
}

// Delete stops and removes a pod; it returns once the removal is queued.
// An API pod's record goes at once. A pod kept because its persisted
// record could not be read (sources.go) is no longer kept: its sandbox is
// an orphan.
func (m *Manager) Delete(_ context.Context, namespace, name string) error {
	k := apiPodKey(namespace, name)
	m.mu.Lock()
	var found *podState
	going := false // a pod of the name is being removed already
	for _, st := range m.pods {
		if st.pod.Namespace == namespace && st.pod.Name == name {
			if !st.deleting {
				found = st
				break
			}
			going = true
		}
	}
	unkept := m.apiAvailable(k)
	if found != nil {
		found.deleting = true
		found.poke()
	}
	m.mu.Unlock()
	if found == nil && !unkept {
		if going {
			return nil // as the API server answers a delete of a terminating pod
		}
		return fmt.Errorf("%w: %s/%s", ErrNotFound, namespace, name)
	}
	switch {
	case found != nil && found.source == SourceAPI:
		// Only this pod's record: a pod applied under the name since
		// keeps its own.
		m.unpersist(namespace, name, found.pod.UID)
	case unkept:
		// A record that could not be read (its stand-in) or of a
		// newer agent goes with its pod, unless the name was applied
		// since; what it held back may be pruned now.
		m.unpersistUnread(k)
		if m.sourcesReady.Load() {
			m.pruneRecords()
		}
	}
	m.poke()
	return nil
}

// Terminate stops and removes the pod uid within grace (an API
// deletion's grace period, which may be shorter than the spec's), as
// Delete. It reports whether the pod was known; a pod being removed
// already keeps its removal, with the shorter of the two grace periods.
func (m *Manager) Terminate(uid types.UID, grace time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, ok := m.pods[uid]
	if !ok {
		return false
	}
	if st.graceOverride == nil || grace < *st.graceOverride {
		st.graceOverride = &grace
	}
	if !st.deleting {
		st.deleting = true
		st.poke()
		m.poke()
	}
	return true
}

// Forget drops pods of a source that are no longer in it (the manifest
// directory lost a file); keep are the UIDs still there.
func (m *Manager) Forget(source string, keep map[types.UID]bool) {
	m.mu.Lock()
	kept := false
	for uid, st := range m.pods {
		if st.source != source {
			continue
		}
		if keep[uid] {
			kept = true
		} else if !st.deleting {
			st.deleting = true
			st.poke()
		}
	}
	_, broken := m.unavailable.sources[source]
	m.mu.Unlock()
	m.poke()
	if !kept && !broken {
		m.forgetStatic(source) // the file is gone
	}
}

// desiredPods are the pod specs the node runs, unevicted: what the QoS
// cgroups' cpu shares are computed from.
func (m *Manager) desiredPods() []*corev1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(m.pods))
	for _, st := range m.pods {
		if st.evicted == nil {
			out = append(out, st.pod)
		}
	}
	return out
}

// List returns every pod with its status, sorted by namespace and name.
func (m *Manager) List() []*corev1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(m.pods))
	for _, st := range m.pods {
		out = append(out, st.view())
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int {
		if a.Namespace != b.Namespace {
			return cmpString(a.Namespace, b.Namespace)
		}
		return cmpString(a.Name, b.Name)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Get returns one pod with its status.
func (m *Manager) Get(namespace, name string) (*corev1.Pod, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, st := range m.pods {
		if st.pod.Namespace == namespace && st.pod.Name == name {
			return st.view(), true
		}
	}
	return nil, false
}

func (st *podState) view() *corev1.Pod {
	p := st.pod.DeepCopy()
	p.Status = *st.status.DeepCopy()
	p.Status.QOSClass = qos.Class(st.pod)
	if st.deleting {
		now := metav1.Now()
		p.DeletionTimestamp = &now
	}
	return p
}

// SourcesReady says that every pod source (the manifest directory, the
// persisted API pods) has been loaded: from now on a nodeguard sandbox
// whose pod is not desired is removed.
func (m *Manager) SourcesReady() {
	m.sourcesReady.Store(true)
	m.pruneRecords()
	m.orphanScan.Store(true)
	m.poke()
}

func (m *Manager) desired(uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.pods[uid]
	return ok
}

func (m *Manager) isEvicted(st *podState) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return st.evicted != nil
}

// Wait blocks until pred holds for the pod or ctx ends (tests, bench).
func (m *Manager) Wait(ctx context.Context, namespace, name string, pred func(*corev1.Pod, bool) bool) error {
	for {
		p, ok := m.Get(namespace, name)
		if pred(p, ok) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s/%s: %w", namespace, name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// logNoServiceAccountToken says, once per pod, that a pod which names a
// service account or asks for its token runs without it: both fields are
// accepted, as by a standalone kubelet, but nothing standalone can issue a
// token. Pods that say neither are not told (every pod would be).
func logNoServiceAccountToken(log *slog.Logger, p *corev1.Pod) {
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = p.Spec.DeprecatedServiceAccount
	}
	automount := p.Spec.AutomountServiceAccountToken
	if (automount != nil && !*automount) || (sa == "" && automount == nil) {
		return
	}
	if sa == "" {
		sa = "default"
	}
	log.Info("no service account token mounted: there is no control plane to issue one", "pod", key(p), "service_account", sa)
}
