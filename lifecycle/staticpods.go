// The last accepted content of each manifest file, so that a file torn by
// a crash (or broken by hand) while nodeguard was down does not take its
// static pods with it: within one run the manager keeps a broken file's
// pods as they were; across a restart it needs what they were.

package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

// KindStaticPods is the state store's kind of a manifest file's last
// accepted pods: one record per file, keyed by its source ("file:<path>"),
// holding the pods as the file gave them (before defaulting: restored,
// they go through the same admission as the file's). Written when the
// file's pods are applied and its content changed, removed when the file
// is gone.
var KindStaticPods = statestore.Kind{Name: "static-pods", Version: 1}

// staticPodsRecord is KindStaticPods' payload, version 1.
type staticPodsRecord struct {
	Pods []*corev1.Pod `json:"pods"`
}

// Validate refuses a record without pods or with a pod without a name.
func (r *staticPodsRecord) Validate() error {
	if len(r.Pods) == 0 {
		return errors.New("no pods")
	}
	for i, p := range r.Pods {
		if p == nil || p.Name == "" {
			return fmt.Errorf("pod %d: no name", i)
		}
	}
	return nil
}

// decodeStaticPods decodes and validates one KindStaticPods record (what
// restoring does, and what FuzzStaticPodsRecord drives).
func decodeStaticPods(r statestore.Record) ([]*corev1.Pod, error) {
	var rec staticPodsRecord
	if err := statestore.Decode(r, &rec); err != nil {
		return nil, err
	}
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("validate %s: %w", r.Key, err)
	}
	return rec.Pods, nil
}

// rememberStatic records pods as the last accepted content of the
// manifest file of source, unless that is what was last recorded. A
// failure is logged: the pods run all the same, and only a restart with
// the file broken would miss the record.
func (m *Manager) rememberStatic(source string, pods []*corev1.Pod) {
	if !staticSource(source) || len(pods) == 0 {
		return
	}
	b, err := json.Marshal(pods)
	if err != nil {
		m.log.Warn("static pods not recorded", "source", source, "err", err)
		return
	}
	sum := crc32.ChecksumIEEE(b)
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	if cur, ok := m.staticRecords[source]; ok && cur == sum {
		return
	}
	if err := m.state.Put(KindStaticPods, source, staticPodsRecord{Pods: pods}); err != nil {
		m.log.Warn("static pods not recorded: a restart while their file is broken will not find them", "source", source, "err", err)
		return
	}
	m.staticRecords[source] = sum
}

// forgetStatic removes the record of source (its file is gone).
func (m *Manager) forgetStatic(source string) {
	if !staticSource(source) {
		return
	}
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	if err := m.state.Delete(KindStaticPods, source); err != nil {
		m.log.Warn("static pods record not removed", "source", source, "err", err)
		return
	}
	delete(m.staticRecords, source)
}

// restoreStatic runs the last accepted pods of source, whose file does not
// load (why) at start: they are admitted as the file's were, and stay
// desired until the file loads again (its pods then replace them) or is
// removed. Without a readable record it reports false, and the source's
// sandboxes are only kept (sources.go).
func (m *Manager) restoreStatic(source string, why error) bool {
	r, ok, err := m.state.Get(KindStaticPods, source)
	if err != nil || !ok {
		return false
	}
	pods, err := decodeStaticPods(r)
	if err != nil {
		m.state.Reject(KindStaticPods, source, err)
		return false
	}
	var restored []*corev1.Pod
	for _, p := range pods {
		q, err := m.restore(p, source)
		if err != nil {
			m.log.Error("static pod not restored from its last accepted manifest", "source", source, "pod", key(p), "err", err)
			continue
		}
		restored = append(restored, q)
	}
	for _, q := range restored {
		m.event(q, "", corev1.EventTypeWarning, ReasonSourceUnavailable,
			fmt.Sprintf("The pod's manifest could not be loaded (%v); it runs as last accepted until the file loads again or is removed", why))
	}
	m.log.Warn("manifest does not load: its pods run as last accepted", "source", source, "pods", len(restored), "err", why)
	m.persistMu.Lock()
	if b, err := json.Marshal(pods); err == nil {
		m.staticRecords[source] = crc32.ChecksumIEEE(b)
	}
	m.persistMu.Unlock()
	return len(restored) > 0
}

// pruneRecords removes the records no pod owns any more, once every
// source has loaded: the static pods of a file removed while nodeguard was
// down (a source with no pod that is not unavailable: its file neither
// loads nor fails), and, while no source or record is unavailable,
// eviction records of pods deleted or replaced in an instant the agent
// died in (a quarantined API pod record may be the only one that names an
// eviction's pod, so none is pruned then).
func (m *Manager) pruneRecords() {
	m.mu.Lock()
	uids := make(map[types.UID]bool, len(m.pods))
	sources := map[string]bool{}
	for uid, st := range m.pods {
		uids[uid] = true
		sources[st.source] = true
	}
	for src := range m.unavailable.sources {
		sources[src] = true
	}
	whole := !m.unavailable.any()
	m.mu.Unlock()
	if keys, err := m.state.Keys(KindStaticPods); err == nil {
		for _, k := range keys {
			if !sources[k] {
				m.forgetUnownedStatic(k)
			}
		}
	}
	if !whole {
		return
	}
	if keys, err := m.state.Keys(KindEviction); err == nil {
		for _, k := range keys {
			// Looked at again: a pod applied (and evicted) since the
			// snapshot owns its record.
			if !uids[types.UID(k)] && !m.desired(types.UID(k)) {
				m.forgetEviction(types.UID(k))
			}
		}
	}
}

// forgetUnownedStatic removes the record of source unless a pod of it was
// applied since the caller looked (rememberStatic writes under persistMu
// after the pods are added, so a record written before this check has its
// pods desired).
func (m *Manager) forgetUnownedStatic(source string) {
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	m.mu.Lock()
	_, broken := m.unavailable.sources[source]
	owned := broken
	for _, st := range m.pods {
		if st.source == source {
			owned = true
			break
		}
	}
	m.mu.Unlock()
	if owned {
		return
	}
	if err := m.state.Delete(KindStaticPods, source); err != nil {
		m.log.Warn("static pods record not removed", "source", source, "err", err)
		return
	}
	delete(m.staticRecords, source)
}
