// The files an older nodeguard kept outside the state store, moved into it
// once at start: <root>/api-pods/<uid>.json (a file per applied pod, an
// old version's left behind when the name was applied again) and
// <root>/evicted/<uid>.json.

package lifecycle

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

// The directories beneath the root dir of an older agent's records.
const (
	legacyAPIPodsDir  = "api-pods"
	legacyEvictedDir  = "evicted"
	legacyRecordExt   = ".json"
	legacyTempPattern = ".pod-" // its persist's temporary files
)

// migrateLegacy moves an older agent's files into the store. A file is
// removed only once its record is durable; a file that cannot be read is
// quarantined by the store (logged, counted) and what it names kept: an
// API pod's sandboxes are not orphans (sources.go), an evicted pod stays
// stopped.
func (m *Manager) migrateLegacy() {
	m.migrateAPIPods(filepath.Join(m.cfg.RootDir, legacyAPIPodsDir))
	m.migrateEvictions(filepath.Join(m.cfg.RootDir, legacyEvictedDir))
}

// legacyFiles lists dir's record files, and removes its temporary ones.
func (m *Manager) legacyFiles(dir string) []string {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		m.log.Error("older records not read", "dir", dir, "err", err)
		return nil
	}
	var out []string
	for _, e := range entries {
		switch name := e.Name(); {
		case e.IsDir():
		case strings.HasPrefix(name, legacyTempPattern):
			_ = os.Remove(filepath.Join(dir, name))
		case strings.HasSuffix(name, legacyRecordExt):
			out = append(out, filepath.Join(dir, name))
		}
	}
	return out
}

// legacyUID is the pod UID a legacy file is named by.
func legacyUID(path string) types.UID {
	return types.UID(strings.TrimSuffix(filepath.Base(path), legacyRecordExt))
}

// migrateAPIPods writes one KindAPIPod record per pod name found in dir:
// the newest of the name's files (newerPod), or the record already there
// when it is newer still, then removes the files.
func (m *Manager) migrateAPIPods(dir string) {
	files := m.legacyFiles(dir)
	if len(files) == 0 {
		return
	}
	type found struct {
		pod  *corev1.Pod
		path string
	}
	byName := map[string][]found{}
	for _, path := range files {
		p, err := decodeLegacyPod(path)
		if err != nil {
			err = m.state.QuarantineFile(KindAPIPod, path, err)
			m.uidUnavailable(legacyUID(path), err)
			continue
		}
		if p.UID == "" {
			p.UID = legacyUID(path)
		}
		if p.Namespace == "" {
			p.Namespace = corev1.NamespaceDefault // as applied
		}
		k := apiPodKey(p.Namespace, p.Name)
		byName[k] = append(byName[k], found{p, path})
	}
	for _, k := range slices.Sorted(maps.Keys(byName)) {
		group := byName[k]
		best := group[0].pod
		for _, f := range group[1:] {
			if newerPod(f.pod, best) > 0 {
				best = f.pod
			}
		}
		cur, err := m.readAPIPod(k)
		switch {
		case err != nil:
			m.log.Warn("persisted pod unreadable: the older agent's file replaces it", "pod", k, "err", err)
		case cur != nil && newerPod(cur, best) >= 0:
			best = nil // the store's is newer: the files are stale
		}
		if best != nil {
			if err := m.state.Put(KindAPIPod, k, apiPodRecord{Pod: best}); err != nil {
				m.log.Error("older agent's persisted pod not migrated: its files are kept, its sandboxes too", "pod", k, "err", err)
				m.apiUnavailable(k, err)
				continue
			}
		}
		for _, f := range group {
			if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				m.log.Warn("remove an older agent's persisted pod", "file", f.path, "err", err)
			}
		}
		m.log.Info("older agent's persisted pod migrated to the state store", "pod", k, "files", len(group))
	}
	_ = os.Remove(dir) // once empty
}

// decodeLegacyPod reads an older agent's persisted pod file.
func decodeLegacyPod(path string) (*corev1.Pod, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p *corev1.Pod
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	if p == nil || p.Name == "" {
		return nil, errors.New("no pod with a name")
	}
	return p, nil
}

// newerPod orders two generations of one pod name: the later
// creationTimestamp, then the larger resourceVersion (numerically when
// both are numbers, as an API server's are) and generation, then the
// larger UID as a deterministic last tie-break.
func newerPod(a, b *corev1.Pod) int {
	return cmp.Or(
		a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time),
		compareResourceVersion(a.ResourceVersion, b.ResourceVersion),
		cmp.Compare(a.Generation, b.Generation),
		cmp.Compare(a.UID, b.UID),
	)
}

func compareResourceVersion(a, b string) int {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA == nil && errB == nil {
		return cmp.Compare(x, y)
	}
	return cmp.Compare(a, b)
}

// migrateEvictions writes each eviction file of dir as a KindEviction
// record (one already in the store wins: a newer agent wrote it) and
// removes the file. A file that cannot be read still ends its pod: it is
// quarantined and a record saying so written in its place.
func (m *Manager) migrateEvictions(dir string) {
	for _, path := range m.legacyFiles(dir) {
		uid := legacyUID(path)
		ev, readErr := decodeLegacyEviction(path)
		if readErr != nil {
			ev = &evictionRecord{Reason: ReasonEvicted, At: m.now(),
				Message: "The pod's eviction record could not be read; the pod is kept stopped as evicted: " + readErr.Error()}
		}
		if ev.At.IsZero() {
			ev.At = m.now()
		}
		_, ok, err := m.state.Get(KindEviction, string(uid))
		switch {
		case errors.Is(err, statestore.ErrCorrupt):
			ok, err = false, nil // quarantined by the Get: the file takes its place
		case errors.Is(err, statestore.ErrUnsupported):
			ok, err = true, nil // a newer agent's record wins
		}
		if err == nil && !ok {
			err = m.state.Put(KindEviction, string(uid), ev)
		}
		if err != nil {
			m.log.Error("older agent's eviction record not migrated: kept, and its pod stopped", "uid", uid, "file", path, "err", err)
			m.mu.Lock()
			m.legacyEvictions[uid] = ev
			m.mu.Unlock()
			continue
		}
		if readErr != nil {
			m.state.QuarantineFile(KindEviction, path, readErr)
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("remove an older agent's eviction record", "file", path, "err", err)
		}
	}
	_ = os.Remove(dir) // once empty
}

// decodeLegacyEviction reads an older agent's eviction file.
func decodeLegacyEviction(path string) (*evictionRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var e *evictionRecord
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, err
	}
	if e == nil {
		return nil, fmt.Errorf("%s: null", path)
	}
	if e.Grace < 0 {
		return nil, fmt.Errorf("%s: negative grace period", path)
	}
	return e, nil
}
