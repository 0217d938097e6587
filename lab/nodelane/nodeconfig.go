package nodelane

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Node-specific values of the lane's node: Debian's containerd as a systemd
// service with the systemd cgroup driver, so the pods' cgroups are systemd
// slices beneath the root (kubepods.slice), as on a kubelet node.
const (
	RuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	CgroupDriver    = "systemd"
	CgroupRoot      = "/"
	// ConfigPath is where make install puts the configuration and the
	// unit's ExecStart reads it.
	ConfigPath = "/etc/nodeguard/config.yaml"
	// ManifestDir is the node's static pod directory (podManifestPath).
	ManifestDir = "/etc/nodeguard/manifests"
)

// Setting is one value written over the installed configuration, at a path
// of keys ("eviction", "evictionHard"): keys may contain dots
// ("memory.available"), so a path is a list, not a dotted string.
type Setting struct {
	Path  []string
	Value any
}

// NodeValues are the node-specific values the checks write over the
// installed /etc/nodeguard/config.yaml (the shipped example): everything
// else stays as installed.
type NodeValues struct {
	RuntimeEndpoint string
	CgroupDriver    string
	CgroupRoot      string
	PodManifestPath string
	// SystemReservedMemory, when set, makes systemReserved {memory: it}:
	// node allocatable shrinks to what the eviction check needs.
	SystemReservedMemory string
	// Set are further values, applied in order after the ones above
	// (the reload checks change eviction thresholds this way).
	Set []Setting
}

// Node returns the values of the lane's node with the static pods in
// ManifestDir. imagePull is off: the lane's images are imported into
// containerd beforehand and no registry is reachable from the node.
func Node() NodeValues {
	return NodeValues{RuntimeEndpoint: RuntimeEndpoint, CgroupDriver: CgroupDriver, CgroupRoot: CgroupRoot, PodManifestPath: ManifestDir,
		Set: []Setting{{Path: []string{"imagePull"}, Value: false}}}
}

// settings returns every value v writes, in order.
func (v NodeValues) settings() []Setting {
	var s []Setting
	add := func(key, value string) {
		if value != "" {
			s = append(s, Setting{Path: []string{key}, Value: value})
		}
	}
	add("runtimeEndpoint", v.RuntimeEndpoint)
	add("cgroupDriver", v.CgroupDriver)
	add("cgroupRoot", v.CgroupRoot)
	add("podManifestPath", v.PodManifestPath)
	if v.SystemReservedMemory != "" {
		s = append(s, Setting{Path: []string{"systemReserved"}, Value: map[string]any{"memory": v.SystemReservedMemory}})
	}
	return append(s, v.Set...)
}

// ErrNotAMap reports a setting whose path runs through a value that is not
// a mapping.
var ErrNotAMap = errors.New("not a mapping")

// NodeConfig returns the installed configuration with v's values written
// over it: the installed file is parsed, each setting replaces the value
// at its path (creating mappings on the way), and the result is written
// back as YAML (keys sorted; the installed comments are not kept, the
// values are). An installed file that does not parse, or is not a
// mapping, is an error: the checks start from what make install ships.
func NodeConfig(installed []byte, v NodeValues) ([]byte, error) {
	doc, err := parseYAMLMap(installed)
	if err != nil {
		return nil, fmt.Errorf("read the installed configuration: %w", err)
	}
	var changed []string
	for _, s := range v.settings() {
		if err := set(doc, s.Path, s.Value); err != nil {
			return nil, err
		}
		changed = append(changed, strings.Join(s.Path, "."))
	}
	j, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("write the node configuration: %w", err)
	}
	y, err := yaml.JSONToYAML(j)
	if err != nil {
		return nil, fmt.Errorf("write the node configuration: %w", err)
	}
	head := "# nodeguard node lane: " + ConfigPath + " as make install put it, with the node's own\n" +
		"# values: " + strings.Join(changed, ", ") + ".\n"
	return append([]byte(head), y...), nil
}

// parseYAMLMap parses a YAML mapping, keeping numbers as written.
func parseYAMLMap(b []byte) (map[string]any, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the document is %T, %w", doc, ErrNotAMap)
	}
	return m, nil
}

// set writes value at path in doc.
func set(doc map[string]any, path []string, value any) error {
	if len(path) == 0 || slices.Contains(path, "") {
		return fmt.Errorf("set %q: empty key", path)
	}
	m := doc
	for i, k := range path[:len(path)-1] {
		next, ok := m[k]
		if !ok || next == nil {
			child := map[string]any{}
			m[k] = child
			m = child
			continue
		}
		child, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("set %s: %s is %T, %w", strings.Join(path, "."), strings.Join(path[:i+1], "."), next, ErrNotAMap)
		}
		m = child
	}
	m[path[len(path)-1]] = value
	return nil
}

// Lookup returns the value at path in a YAML document, and whether there is
// one.
func Lookup(doc []byte, path ...string) (any, bool, error) {
	m, err := parseYAMLMap(doc)
	if err != nil {
		return nil, false, err
	}
	var cur any = m
	for _, k := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		if cur, ok = mm[k]; !ok {
			return nil, false, nil
		}
	}
	return cur, true, nil
}
