package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
)

// ConfigMap returns the keys of ConfigMap namespace/name from SourceDir,
// the same files a configMap volume projects, for a container's env
// (configMapKeyRef, envFrom). found is false, with a nil error, when the
// ConfigMap does not exist (or no SourceDir is configured): the caller
// decides, by its optional flag, whether that is an error.
func (m *Volumes) ConfigMap(namespace, name string) (data map[string][]byte, found bool, err error) {
	return m.source(sourceConfigMaps, namespace, name)
}

// Secret is ConfigMap for Secret namespace/name.
func (m *Volumes) Secret(namespace, name string) (data map[string][]byte, found bool, err error) {
	return m.source(sourceSecrets, namespace, name)
}

func (m *Volumes) source(kind, namespace, name string) (map[string][]byte, bool, error) {
	if !validComponent(namespace) || !validComponent(name) {
		return nil, false, fmt.Errorf("read %s %s/%s: %w: not a single path component", kind, namespace, name, ErrUnsafePath)
	}
	if m.objects != nil {
		data, found, err := m.objects.Object(kind, namespace, name)
		if err != nil {
			return nil, false, fmt.Errorf("read %s %s/%s: %w", kind, namespace, name, err)
		}
		return data, found, nil
	}
	if m.sourceDir == "" {
		return nil, false, nil
	}
	data, err := readSource(filepath.Join(m.sourceDir, kind, namespace, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s %s/%s: %w", kind, namespace, name, err)
	}
	return data, true, nil
}

// Objects is where configMaps, secrets and service account tokens come
// from when a control plane has them (node mode).
type Objects interface {
	// Object returns the data of a ConfigMap or Secret (kind "configmaps"
	// or "secrets"); found is false, with a nil error, when it does not
	// exist.
	Object(kind, namespace, name string) (data map[string][]byte, found bool, err error)
	// Token returns a token of pod's service account bound to pod, for
	// audience (empty: the API server's) and valid for expirationSeconds.
	Token(pod *corev1.Pod, audience string, expirationSeconds int64) ([]byte, error)
}

// SourceConfigMaps and SourceSecrets are the kinds Objects.Object is asked
// for.
const (
	SourceConfigMaps = sourceConfigMaps
	SourceSecrets    = sourceSecrets
)
