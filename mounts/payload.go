package mounts

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// defaultFileMode is the mode of payload files when the pod gives none:
// the API server's default for configMap, secret, projected and downwardAPI
// volumes (lifecycle/podspec applies the same default when decoding).
const defaultFileMode = 0o644

// maxSourceBytes bounds one configMap or secret read from SourceDir: the API
// server refuses objects above 1 MiB, and a larger file in SourceDir is a
// mistake that should not be copied into every pod's tmpfs.
const maxSourceBytes = 1 << 20

// Source kinds: the directories beneath Config.SourceDir.
const (
	sourceConfigMaps = "configmaps"
	sourceSecrets    = "secrets"
)

// payloadFile is one file of a volume's payload.
type payloadFile struct {
	data []byte
	mode os.FileMode
}

// payload maps a cleaned relative path (ValidatePayloadPath) to its file.
type payload map[string]payloadFile

// add puts f at p, refusing a path that is invalid or that conflicts with a
// file already in the payload as its directory ("a" and "a/b"). A second
// file at the same path replaces the first, as in the kubelet's projected
// volumes.
func (pl payload) add(p string, f payloadFile) error {
	if err := ValidatePayloadPath(p); err != nil {
		return err
	}
	p = path.Clean(p)
	for q := range pl {
		if strings.HasPrefix(q, p+"/") || strings.HasPrefix(p, q+"/") {
			return fmt.Errorf("%w: %q and %q conflict: one would be the other's directory", ErrUnsafePath, p, q)
		}
	}
	pl[p] = f
	return nil
}

// volumePayload returns the files of a configMap, secret, projected or
// downwardAPI volume of pod.
func (m *Volumes) volumePayload(pod *corev1.Pod, v *corev1.Volume) (payload, error) {
	pl := payload{}
	switch s := v.VolumeSource; {
	case s.ConfigMap != nil:
		return pl, m.addSource(pl, sourceConfigMaps, pod.Namespace, s.ConfigMap.Name, s.ConfigMap.Items,
			fileMode(s.ConfigMap.DefaultMode), isTrue(s.ConfigMap.Optional))
	case s.Secret != nil:
		return pl, m.addSource(pl, sourceSecrets, pod.Namespace, s.Secret.SecretName, s.Secret.Items,
			fileMode(s.Secret.DefaultMode), isTrue(s.Secret.Optional))
	case s.DownwardAPI != nil:
		return pl, addDownward(pl, pod, s.DownwardAPI.Items, fileMode(s.DownwardAPI.DefaultMode), m.allocatable())
	case s.Projected != nil:
		mode := fileMode(s.Projected.DefaultMode)
		for i, src := range s.Projected.Sources {
			var err error
			switch {
			case src.ConfigMap != nil:
				err = m.addSource(pl, sourceConfigMaps, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items, mode, isTrue(src.ConfigMap.Optional))
			case src.Secret != nil:
				err = m.addSource(pl, sourceSecrets, pod.Namespace, src.Secret.Name, src.Secret.Items, mode, isTrue(src.Secret.Optional))
			case src.DownwardAPI != nil:
				err = addDownward(pl, pod, src.DownwardAPI.Items, mode, m.allocatable())
			case src.ServiceAccountToken != nil:
				err = m.addToken(pl, pod, src.ServiceAccountToken, mode)
			default:
				err = fmt.Errorf("%w: projected source kind", ErrUnsupported)
			}
			if err != nil {
				return nil, fmt.Errorf("projected source %d: %w", i, err)
			}
		}
		return pl, nil
	}
	return nil, fmt.Errorf("%w: volume source", ErrUnsupported)
}

// addSource adds the keys of the configMap or secret kind/namespace/name
// from SourceDir: the keys listed in items at their paths and modes, or
// every key at its own name with mode. A missing object or item key is an
// error wrapping ErrSourceNotFound unless optional.
func (m *Volumes) addSource(pl payload, kind, namespace, name string, items []corev1.KeyToPath, mode os.FileMode, optional bool) error {
	what := strings.TrimSuffix(kind, "s") + " " + namespace + "/" + name
	if !validComponent(namespace) || !validComponent(name) {
		return fmt.Errorf("%s: %w: not a single path component", what, ErrUnsafePath)
	}
	if m.objects != nil {
		data, found, err := m.objects.Object(kind, namespace, name)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", what, err)
		case !found && optional:
			return nil
		case !found:
			return fmt.Errorf("%s: %w: not in the API server", what, ErrSourceNotFound)
		}
		return addKeys(pl, what, data, items, mode, optional)
	}
	if m.sourceDir == "" {
		if optional {
			return nil
		}
		return fmt.Errorf("%s: %w: no source directory configured", what, ErrSourceNotFound)
	}
	dir := filepath.Join(m.sourceDir, kind, namespace, name)
	data, err := readSource(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if optional {
			return nil
		}
		return fmt.Errorf("%s: %w: %s", what, ErrSourceNotFound, dir)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return addKeys(pl, what, data, items, mode, optional)
}

// addKeys adds the keys of one object's data: those listed in items at
// their paths and modes, or every key at its own name with mode.
func addKeys(pl payload, what string, data map[string][]byte, items []corev1.KeyToPath, mode os.FileMode, optional bool) error {
	if len(items) == 0 {
		for key, b := range data {
			if err := pl.add(key, payloadFile{data: b, mode: mode}); err != nil {
				return fmt.Errorf("%s key %q: %w", what, key, err)
			}
		}
		return nil
	}
	for _, it := range items {
		b, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf("%s: %w: key %q", what, ErrSourceNotFound, it.Key)
		}
		itemMode := mode
		if it.Mode != nil {
			itemMode = fileMode(it.Mode)
		}
		if err := pl.add(it.Path, payloadFile{data: b, mode: itemMode}); err != nil {
			return fmt.Errorf("%s item %q: %w", what, it.Path, err)
		}
	}
	return nil
}

// readSource reads the keys of one configMap or secret directory: every
// entry whose name is a valid key and that is (or links to) a regular file.
// Names starting with ".." are skipped: they are an atomic writer's own, so
// a SourceDir that is itself a projected volume reads as its keys.
func readSource(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	data := make(map[string][]byte, len(entries))
	total := 0
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "..") || len(validation.IsConfigMapKey(name)) > 0 {
			continue
		}
		p := filepath.Join(dir, name)
		b, err := readRegular(p, maxSourceBytes-total)
		if errors.Is(err, errNotRegular) {
			continue
		}
		if err != nil {
			return nil, err
		}
		total += len(b)
		data[name] = b
	}
	return data, nil
}

var errNotRegular = errors.New("not a regular file")

// readRegular reads the regular file p (following symlinks: SourceDir is
// the node's own), refusing more than limit bytes.
func readRegular(p string, limit int) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errNotRegular
	}
	b, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("read %s: source larger than %d bytes", p, maxSourceBytes)
	}
	return b, nil
}

// addDownward adds downward API files: metadata.name, metadata.namespace,
// metadata.uid, metadata.labels, metadata.annotations and single
// metadata.labels['key'] / metadata.annotations['key'] values, formatted as
// the kubelet formats them, and a container's limits and requests
// (resourceFieldRef; an unset limit is the node's allocatable).
func addDownward(pl payload, pod *corev1.Pod, items []corev1.DownwardAPIVolumeFile, mode os.FileMode, allocatable corev1.ResourceList) error {
	for _, it := range items {
		var val string
		var err error
		switch {
		case it.ResourceFieldRef != nil:
			val, err = podspec.ResourceFieldValue(pod, nil, it.ResourceFieldRef, allocatable)
		case it.FieldRef != nil:
			val, err = downwardValue(pod, it.FieldRef.FieldPath)
		default:
			return fmt.Errorf("downwardAPI item %q: %w: neither fieldRef nor resourceFieldRef", it.Path, ErrUnsupported)
		}
		if err != nil {
			return fmt.Errorf("downwardAPI item %q: %w", it.Path, err)
		}
		itemMode := mode
		if it.Mode != nil {
			itemMode = fileMode(it.Mode)
		}
		if err := pl.add(it.Path, payloadFile{data: []byte(val), mode: itemMode}); err != nil {
			return fmt.Errorf("downwardAPI item %q: %w", it.Path, err)
		}
	}
	return nil
}

func downwardValue(pod *corev1.Pod, fieldPath string) (string, error) {
	switch fieldPath {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	if k, ok := subscript(fieldPath, "metadata.labels"); ok {
		return pod.Labels[k], nil
	}
	if k, ok := subscript(fieldPath, "metadata.annotations"); ok {
		return pod.Annotations[k], nil
	}
	return "", fmt.Errorf("%w: fieldRef %q", ErrUnsupported, fieldPath)
}

// subscript parses "<prefix>['key']".
func subscript(fieldPath, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(fieldPath, prefix+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// formatMap is the kubelet's fieldpath.FormatMap: sorted key="value" lines
// with Go-quoted values, no trailing newline.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
	}
	return b.String()
}

func fileMode(m *int32) os.FileMode {
	if m == nil {
		return defaultFileMode
	}
	return os.FileMode(*m) & os.ModePerm
}

func isTrue(b *bool) bool { return b != nil && *b }

// addToken adds a projected serviceAccountToken source: a token of the
// pod's service account from Objects, at the source's path. Without
// Objects (standalone) there is no control plane to issue one.
func (m *Volumes) addToken(pl payload, pod *corev1.Pod, s *corev1.ServiceAccountTokenProjection, mode os.FileMode) error {
	if m.objects == nil {
		return fmt.Errorf("serviceAccountToken: %w: no control plane issues tokens", ErrUnsupported)
	}
	exp := int64(3600)
	if s.ExpirationSeconds != nil {
		exp = *s.ExpirationSeconds
	}
	tok, err := m.objects.Token(pod, s.Audience, exp)
	if err != nil {
		return fmt.Errorf("serviceAccountToken: %w", err)
	}
	if err := pl.add(s.Path, payloadFile{data: tok, mode: mode}); err != nil {
		return fmt.Errorf("serviceAccountToken path %q: %w", s.Path, err)
	}
	return nil
}
