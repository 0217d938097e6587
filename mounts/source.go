package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// ConfigMap returns the keys of ConfigMap namespace/name from SourceDir,
// the same files a configMap volume projects, for a container's env
// (configMapKeyRef, envFrom). found is false, with a nil error, when the
// ConfigMap does not exist (or no SourceDir is configured): the caller
// decides, by its optional flag, whether that is an error.
func (m *Manager) ConfigMap(namespace, name string) (data map[string][]byte, found bool, err error) {
	return m.source(sourceConfigMaps, namespace, name)
}

// Secret is ConfigMap for Secret namespace/name.
func (m *Manager) Secret(namespace, name string) (data map[string][]byte, found bool, err error) {
	return m.source(sourceSecrets, namespace, name)
}

func (m *Manager) source(kind, namespace, name string) (map[string][]byte, bool, error) {
	if !validComponent(namespace) || !validComponent(name) {
		return nil, false, fmt.Errorf("read %s %s/%s: %w: not a single path component", kind, namespace, name, ErrUnsafePath)
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
