// Pods applied through the local API are persisted in the state store
// (internal/statestore), one record per pod name, so that they survive a
// restart of nodeguard as a static pod's file does.

package lifecycle

import (
	"errors"
	"fmt"

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
	Pod *corev1.Pod `json:"pod"`
}

// Validate refuses a record without a pod, a name or a UID: nothing could
// be run from it, nor its sandbox recognised.
func (r *apiPodRecord) Validate() error {
	switch {
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
// decode is quarantined.
func (m *Manager) readAPIPod(k string) (*corev1.Pod, error) {
	r, ok, err := m.state.Get(KindAPIPod, k)
	if err != nil || !ok {
		return nil, err
	}
	p, err := decodeAPIPod(r)
	if err != nil {
		return nil, m.state.Reject(KindAPIPod, k, err)
	}
	return p, nil
}
