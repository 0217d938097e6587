// Pods applied through the local API are persisted in the state store
// (internal/statestore), one record per pod name, so that they survive a
// restart of nodeguard as a static pod's file does.

package lifecycle

import (
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

// SourceAPI is the source of pods applied through the local API; they are
// persisted in the state store (KindAPIPod) so that a restarted nodeguard
// keeps them.
const SourceAPI = "api"

// SourceAPIServer is the source of the pods a Kubernetes API server binds
// to the node (node mode; kubenode.Source).
const SourceAPIServer = "kube-apiserver"

// KindAPIPod is the state store's kind of a pod applied through the local
// API: one record per pod name, keyed "namespace/name", holding the pod
// as applied (defaulted, with its UID). An apply under the name replaces
// it; a Delete removes it, and so does the pod's final teardown unless a
// newer pod of the name was applied meanwhile.
var KindAPIPod = statestore.Kind{Name: "api-pod", Version: 1}

// staticSource reports whether pods of source are static pods (the
// manifest directory's): neither the local API's nor the API server's.
// The kubelet never evicts a static pod; an API server's it evicts like
// any other.
func staticSource(source string) bool { return source != SourceAPI && source != SourceAPIServer }

// apiPodRecord is KindAPIPod's payload, version 1.
type apiPodRecord struct {
	Pod *corev1.Pod `json:"pod,omitempty"`
	// Unreadable marks a stand-in: the name's record could not be
	// read (it was quarantined, and this says why). It keeps the name's
	// sandboxes from being taken for orphans at every later start, until
	// the name is applied again or deleted.
	Unreadable string `json:"unreadable,omitempty"`
}

// errUnreadRecord is a stand-in's: the pod's record was lost.
var errUnreadRecord = errors.New("the pod's record could not be read and was quarantined")

// Validate refuses a record without a pod, a name or a UID: nothing could
// be run from it, nor its sandbox recognised; a stand-in holds no pod.
func (r *apiPodRecord) Validate() error {
	switch {
	case r.Unreadable != "" && r.Pod != nil:
		return errors.New("a stand-in with a pod")
	case r.Unreadable != "":
		return nil
	case r.Pod == nil:
		return errors.New("no pod")
	case r.Pod.Name == "":
		return errors.New("pod without a name")
	case r.Pod.UID == "":
		return fmt.Errorf("pod %s without a UID", key(r.Pod))
	}
	return nil
}

// apiPodKey is the record key of the API pod namespace/name.
func apiPodKey(namespace, name string) string { return namespace + "/" + name }

// decodeAPIPod decodes and validates one KindAPIPod record: its payload
// strictly, a pod with a name and a UID, filed under its own name. It is
// what loading does with each record (and what FuzzAPIPodRecord drives).
func decodeAPIPod(r statestore.Record) (*corev1.Pod, error) {
	var rec apiPodRecord
	if err := statestore.Decode(r, &rec); err != nil {
		return nil, err
	}
	if err := rec.Validate(); err != nil {
		return nil, fmt.Errorf("validate %s: %w", r.Key, err)
	}
	if rec.Unreadable != "" {
		return nil, fmt.Errorf("%w: %s", errUnreadRecord, rec.Unreadable)
	}
	if k := apiPodKey(rec.Pod.Namespace, rec.Pod.Name); k != r.Key {
		return nil, fmt.Errorf("validate %s: the record holds pod %s", r.Key, k)
	}
	return rec.Pod, nil
}

// persist writes an API pod's record, replacing the name's, atomically
// and durably.
func (m *Manager) persist(p *corev1.Pod) error {
	k := apiPodKey(p.Namespace, p.Name)
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	if err := m.state.Put(KindAPIPod, k, apiPodRecord{Pod: p}); err != nil {
		return fmt.Errorf("persist pod %s: %w", k, err)
	}
	m.apiRecords[k] = p.UID
	return nil
}

// persistAll persists pods, one apply's, all or none: when one cannot be
// written, the records written before it are put back as they were (the
// name's earlier record, or none), so that a refused apply leaves no pod
// to be run by the next start.
func (m *Manager) persistAll(pods []*corev1.Pod) error {
	type was struct {
		k   string
		rec *statestore.Record
		uid types.UID
	}
	var done []was
	for _, p := range pods {
		k := apiPodKey(p.Namespace, p.Name)
		w := was{k: k}
		if r, ok, err := m.state.Get(KindAPIPod, k); err == nil && ok {
			w.rec = &r
		}
		m.persistMu.Lock()
		w.uid = m.apiRecords[k]
		m.persistMu.Unlock()
		if err := m.persist(p); err != nil {
			for _, d := range slices.Backward(done) {
				m.unwrite(d.k, d.rec, d.uid)
			}
			return err
		}
		done = append(done, w)
	}
	return nil
}

// unwrite puts the record k back as it was before a refused apply: rec
// (nil: there was none) for the pod uid.
func (m *Manager) unwrite(k string, rec *statestore.Record, uid types.UID) {
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	var err error
	if rec == nil {
		err = m.state.Delete(KindAPIPod, k)
		delete(m.apiRecords, k)
	} else {
		err = m.state.Put(KindAPIPod, k, rec.Data)
		if uid != "" {
			m.apiRecords[k] = uid
		}
	}
	if err != nil {
		m.log.Error("record of a refused apply not put back", "pod", k, "err", err)
	}
}

// unpersist removes the record of the API pod namespace/name if it is
// still the one of uid ("" : whichever): a pod replaced under its name
// leaves its successor's record alone.
func (m *Manager) unpersist(namespace, name string, uid types.UID) {
	k := apiPodKey(namespace, name)
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	if cur, ok := m.apiRecords[k]; !ok || (uid != "" && cur != uid) {
		return
	}
	if err := m.state.Delete(KindAPIPod, k); err != nil {
		m.log.Warn("forget persisted pod", "pod", k, "err", err)
		return
	}
	delete(m.apiRecords, k)
}

// unpersistUnread removes the record k that this agent could not read
// (its stand-in, or a newer agent's record), unless a pod was applied
// under the name since (its record is the one there now).
func (m *Manager) unpersistUnread(k string) {
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	if _, ok := m.apiRecords[k]; ok {
		return
	}
	if err := m.state.Delete(KindAPIPod, k); err != nil {
		m.log.Warn("forget persisted pod", "pod", k, "err", err)
	}
}

// loadPersisted admits the API pods of an earlier run, one at a time, as
// the kubelet re-admits its pods at restart (HandlePodAdditions): a pod
// that no longer validates or fits the node is kept, Failed with the
// reason (restore). A record that cannot be read is quarantined by the
// store (logged, counted) and one of a newer agent left in place: either
// way its pod's sandboxes are kept, untouched, as a broken source's
// (sources.go). Nothing here fails New.
func (m *Manager) loadPersisted() {
	keys, err := m.state.Keys(KindAPIPod)
	if err != nil {
		// Nothing is known of any API pod: none of their sandboxes is
		// removed this run.
		m.log.Error("persisted API pods not read: their sandboxes are kept as they are", "err", err)
		m.sourceUnavailable(SourceAPI, err)
		return
	}
	for _, k := range keys {
		p, err := m.readAPIPod(k)
		if err != nil {
			m.apiUnavailable(k, err)
			continue
		}
		if p == nil {
			continue // gone since listed
		}
		m.persistMu.Lock()
		m.apiRecords[k] = p.UID
		m.persistMu.Unlock()
		if _, err := m.restore(p, SourceAPI); err != nil {
			m.log.Error("persisted pod not restored", "pod", k, "err", err)
		}
	}
}

// readAPIPod reads the record k; nil without one. A record that does not
// decode is quarantined and a stand-in written in its place.
func (m *Manager) readAPIPod(k string) (*corev1.Pod, error) {
	r, ok, err := m.state.Get(KindAPIPod, k)
	if err != nil {
		m.standIn(k, err)
		return nil, err
	}
	if !ok {
		return nil, nil
	}
	p, err := decodeAPIPod(r)
	if errors.Is(err, errUnreadRecord) {
		return nil, err // the stand-in stays
	}
	if err != nil {
		err = m.state.Reject(KindAPIPod, k, err)
		m.standIn(k, err)
		return nil, err
	}
	return p, nil
}

// standIn writes a stand-in in place of the record k just
// quarantined (why), so that the next start too keeps the name's
// sandboxes and volumes instead of taking them for orphans.
func (m *Manager) standIn(k string, why error) {
	if !errors.Is(why, statestore.ErrCorrupt) {
		return // a newer agent's record is left in place: it says as much
	}
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	if _, ok := m.apiRecords[k]; ok {
		return // applied since
	}
	if err := m.state.Put(KindAPIPod, k, apiPodRecord{Unreadable: why.Error()}); err != nil {
		m.log.Error("stand-in of an unreadable pod record not written: its sandboxes are kept this run only", "pod", k, "err", err)
	}
}
