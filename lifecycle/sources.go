// Sources that could not be loaded: the kubelet's sources-ready rule made
// finer. Nothing is torn down on the word of a source that has not loaded
// once (SourcesReady), and after that a pod whose source is broken (its
// manifest file does not load, its persisted record could not be read)
// keeps its sandbox, containers, cgroup and volumes: it is not an orphan,
// its source just cannot say so.

package lifecycle

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// ReasonSourceUnavailable is the reason of the Warning event of a pod
// kept running, not desired, because its source could not be loaded.
const ReasonSourceUnavailable = "SourceUnavailable"

// unavailable is what could not be loaded, each with why (Manager.mu).
type unavailable struct {
	// sources: a manifest file's source ("file:<path>") that does not
	// load; SourceAPI when the API pods' records could not be listed.
	sources map[string]error
	// apiPods: API pod records (by key, "namespace/name") that could not
	// be read.
	apiPods map[string]error
	// uids: pods of an older agent's files that did not decode (their
	// name unknown: the file was named by the UID).
	uids map[types.UID]error
	// told: the pods kept that were logged and given their event.
	told map[types.UID]bool
}

func newUnavailable() unavailable {
	return unavailable{sources: map[string]error{}, apiPods: map[string]error{}, uids: map[types.UID]error{}, told: map[types.UID]bool{}}
}

func (u *unavailable) any() bool { return len(u.sources)+len(u.apiPods)+len(u.uids) > 0 }

// why is why sb, of a pod not desired, must be kept; nil when it need not.
func (u *unavailable) why(sb *runtimeapi.PodSandbox) error {
	src := sb.GetAnnotations()[AnnotationSource]
	if err := u.sources[src]; err != nil {
		return fmt.Errorf("source %s: %w", src, err)
	}
	md := sb.GetMetadata()
	if src == SourceAPI {
		if err := u.apiPods[apiPodKey(md.GetNamespace(), md.GetName())]; err != nil {
			return fmt.Errorf("persisted pod %s/%s: %w", md.GetNamespace(), md.GetName(), err)
		}
	}
	if err := u.uids[types.UID(md.GetUid())]; err != nil {
		return fmt.Errorf("persisted pod %s: %w", md.GetUid(), err)
	}
	return nil
}

// SourceUnavailable says that source could not be loaded (err), or that it
// loads again (err nil): until then the sandboxes of its pods that are not
// desired are kept as they are, not torn down as orphans, and volumes and
// pod cgroups are not collected. The manifest directory's source says it
// of each file (filesource).
func (m *Manager) SourceUnavailable(source string, err error) {
	if err != nil {
		// Only what runs with no desired pod behind it needs keeping: a
		// source whose pods are desired (its file broke during this run;
		// they run as they were) or that loaded since the sources were
		// ready (nothing of it runs unknown) is not marked, so that one
		// broken file does not hold up collection on the whole node.
		if m.sourcesReady.Load() || m.hasSource(source) {
			return
		}
		// At start: the file's last accepted pods run (staticpods.go).
		if m.restoreStatic(source, err) {
			return
		}
		m.mu.Lock()
		m.unavailable.sources[source] = err
		m.mu.Unlock()
		return
	}
	m.mu.Lock()
	if _, ok := m.unavailable.sources[source]; !ok {
		m.mu.Unlock()
		return
	}
	delete(m.unavailable.sources, source)
	// What it kept may be orphans now; each is told again if kept again.
	clear(m.unavailable.told)
	m.orphanScan.Store(true)
	m.mu.Unlock()
	m.poke()
	if m.sourcesReady.Load() {
		// Records left while it was unavailable (its file removed, or
		// others' files) may be nobody's now.
		m.pruneRecords()
	}
}

func (m *Manager) sourceUnavailable(source string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unavailable.sources[source] = err
}

func (m *Manager) apiUnavailable(k string, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unavailable.apiPods[k] = err
}

func (m *Manager) uidUnavailable(uid types.UID, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unavailable.uids[uid] = err
}

// apiAvailable forgets that the API pod k's record could not be read: the
// name was applied again, or deleted. The caller holds m.mu.
func (m *Manager) apiAvailable(k string) bool {
	if _, ok := m.unavailable.apiPods[k]; !ok {
		return false
	}
	delete(m.unavailable.apiPods, k)
	clear(m.unavailable.told)
	m.orphanScan.Store(true)
	return true
}

// anyUnavailable reports whether some source or record could not be
// loaded.
func (m *Manager) anyUnavailable() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unavailable.any()
}

// keptSandbox is a sandbox of a pod not desired that is kept, and why.
type keptSandbox struct {
	sb  *runtimeapi.PodSandbox
	why error
}

// tellKept logs, and records as a Warning event on the pod, once per pod,
// that its sandbox is kept because its source could not be loaded.
func (m *Manager) tellKept(kept map[types.UID]keptSandbox) {
	for uid, k := range kept {
		m.mu.Lock()
		told := m.unavailable.told[uid]
		m.unavailable.told[uid] = true
		m.mu.Unlock()
		if told {
			continue
		}
		md := k.sb.GetMetadata()
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: md.GetNamespace(), Name: md.GetName(), UID: uid,
			Annotations: map[string]string{AnnotationSource: k.sb.GetAnnotations()[AnnotationSource]}}}
		if pod.Name == "" {
			pod.Namespace, pod.Name = k.sb.GetLabels()[cri.PodNamespaceLabel], k.sb.GetLabels()[cri.PodNameLabel]
		}
		m.event(pod, "", corev1.EventTypeWarning, ReasonSourceUnavailable,
			fmt.Sprintf("The pod's source could not be loaded (%v); its sandbox, containers and volumes are kept as they are until it loads or the pod is deleted", k.why))
	}
}

// hasSource reports whether some pod of source is desired.
func (m *Manager) hasSource(source string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, st := range m.pods {
		if st.source == source {
			return true
		}
	}
	return false
}

// firstLoad reports whether source is applied for the first time in this
// run, and marks it applied: only a first load is a re-admission (a pod
// that no longer fits is kept, Failed); a later edit goes through the
// ordinary admission, whose refusal leaves the running pods as they are.
func (m *Manager) firstLoad(source string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.loadedSources[source] {
		return false
	}
	m.loadedSources[source] = true
	return true
}
