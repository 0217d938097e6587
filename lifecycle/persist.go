// Pods applied through the local API are persisted under <root>/api-pods,
// so that they survive a restart of nodeguard as a static pod's file does.

package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// SourceAPI is the source of pods applied through the local API; they are
// persisted under RootDir/api-pods so that a restarted nodeguard keeps them.
const SourceAPI = "api"

// SourceAPIServer is the source of the pods a Kubernetes API server binds
// to the node (node mode; kubenode.Source).
const SourceAPIServer = "kube-apiserver"

// staticSource reports whether pods of source are static pods (the
// manifest directory's): neither the local API's nor the API server's.
// The kubelet never evicts a static pod; an API server's it evicts like
// any other.
func staticSource(source string) bool { return source != SourceAPI && source != SourceAPIServer }

func (m *Manager) persistDir() string { return filepath.Join(m.cfg.RootDir, "api-pods") }

func (m *Manager) persistPath(uid types.UID) string {
	return filepath.Join(m.persistDir(), string(uid)+".json")
}

// persist writes an API pod atomically (temp file, fsync, rename).
func (m *Manager) persist(p *corev1.Pod) error {
	if err := os.MkdirAll(m.persistDir(), 0o700); err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	tmp, err := os.CreateTemp(m.persistDir(), ".pod-*")
	if err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	if err := os.Rename(tmp.Name(), m.persistPath(p.UID)); err != nil {
		return fmt.Errorf("persist pod %s: %w", key(p), err)
	}
	return nil
}

// loadPersisted reads the API pods of an earlier run. A file that does
// not decode is reported and left for the operator, never guessed at.
func (m *Manager) loadPersisted() error {
	entries, err := os.ReadDir(m.persistDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load persisted pods: %w", err)
	}
	var pods []*corev1.Pod
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.persistDir(), e.Name()))
		if err != nil {
			return fmt.Errorf("load persisted pods: %w", err)
		}
		var p corev1.Pod
		if err := json.Unmarshal(b, &p); err != nil {
			m.log.Error("persisted pod does not decode; left in place", "file", e.Name(), "err", err)
			continue
		}
		pods = append(pods, &p)
	}
	if len(pods) == 0 {
		return nil
	}
	_, err = m.apply(pods, SourceAPI)
	return err
}
