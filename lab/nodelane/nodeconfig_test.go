//go:build !nodelane

package nodelane

import (
	"errors"
	"maps"
	"os"
	"reflect"
	"strings"
	"testing"
)

// shipped is the example configuration make install puts in place.
func shipped(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../deploy/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNodeConfigChangesOnlyTheNodeValues(t *testing.T) {
	installed := shipped(t)
	v := Node()
	v.SystemReservedMemory = "1333Mi"
	out, err := NodeConfig(installed, v)
	if err != nil {
		t.Fatal(err)
	}
	before, err := parseYAMLMap(installed)
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseYAMLMap(out)
	if err != nil {
		t.Fatalf("the written configuration does not parse: %v\n%s", err, out)
	}
	want := map[string]any{
		"runtimeEndpoint": RuntimeEndpoint,
		"cgroupDriver":    CgroupDriver,
		"cgroupRoot":      CgroupRoot,
		"podManifestPath": ManifestDir,
		"systemReserved":  map[string]any{"memory": "1333Mi"},
		"imagePull":       false,
	}
	for k, w := range want {
		if !reflect.DeepEqual(after[k], w) {
			t.Errorf("%s = %#v, want %#v", k, after[k], w)
		}
	}
	rest := maps.Clone(after)
	restBefore := maps.Clone(before)
	for k := range want {
		delete(rest, k)
		delete(restBefore, k)
	}
	if !reflect.DeepEqual(rest, restBefore) {
		t.Errorf("values other than the node's changed:\nbefore %v\nafter  %v", restBefore, rest)
	}
	if !strings.HasPrefix(string(out), "# nodeguard node lane: ") || !strings.Contains(string(out), "cgroupDriver") {
		t.Errorf("the file does not say what it changed:\n%s", out[:min(len(out), 300)])
	}
}

func TestNodeConfigSettings(t *testing.T) {
	installed := shipped(t)
	t.Run("a nested value replaces the installed one and keeps its siblings", func(t *testing.T) {
		v := NodeValues{Set: []Setting{{Path: []string{"eviction", "evictionHard"}, Value: map[string]any{"memory.available": "150Mi"}}}}
		out, err := NodeConfig(installed, v)
		if err != nil {
			t.Fatal(err)
		}
		got, ok, err := Lookup(out, "eviction", "evictionHard", "memory.available")
		if err != nil || !ok || got != "150Mi" {
			t.Errorf("memory.available = %v, %v, %v", got, ok, err)
		}
		if tick, ok, _ := Lookup(out, "eviction", "tick"); !ok || tick != "1s" {
			t.Errorf("eviction.tick = %v, %v: a sibling was lost", tick, ok)
		}
	})
	t.Run("a path through missing keys makes the mappings", func(t *testing.T) {
		out, err := NodeConfig([]byte("a: 1\n"), NodeValues{Set: []Setting{{Path: []string{"x", "y"}, Value: "z"}}})
		if err != nil {
			t.Fatal(err)
		}
		if got, ok, _ := Lookup(out, "x", "y"); !ok || got != "z" {
			t.Errorf("x.y = %v, %v", got, ok)
		}
		if got, _, _ := Lookup(out, "a"); got == nil || got.(interface{ String() string }).String() != "1" {
			t.Errorf("a = %#v, want the number 1 as written", got)
		}
	})
	t.Run("later settings win", func(t *testing.T) {
		out, err := NodeConfig(installed, NodeValues{CgroupRoot: "/a", Set: []Setting{{Path: []string{"cgroupRoot"}, Value: "/b"}}})
		if err != nil {
			t.Fatal(err)
		}
		if got, _, _ := Lookup(out, "cgroupRoot"); got != "/b" {
			t.Errorf("cgroupRoot = %v", got)
		}
	})
	t.Run("empty values leave the installed ones", func(t *testing.T) {
		out, err := NodeConfig(installed, NodeValues{})
		if err != nil {
			t.Fatal(err)
		}
		want, ok, err := Lookup(installed, "cgroupRoot")
		if err != nil || !ok {
			t.Fatalf("the installed file has no cgroupRoot: %v", err)
		}
		if got, _, _ := Lookup(out, "cgroupRoot"); got != want {
			t.Errorf("cgroupRoot = %v, want the installed %v", got, want)
		}
	})
}

func TestNodeConfigRefuses(t *testing.T) {
	tests := []struct {
		name      string
		installed string
		v         NodeValues
		is        error
	}{
		{"a path through a scalar", "eviction: off\n", NodeValues{Set: []Setting{{Path: []string{"eviction", "tick"}, Value: "2s"}}}, ErrNotAMap},
		{"a document that is a list", "- a\n- b\n", Node(), ErrNotAMap},
		{"an empty document", "", Node(), ErrNotAMap},
		{"YAML that does not parse", "a: [1, 2\n", Node(), nil},
		{"an empty key", "a: 1\n", NodeValues{Set: []Setting{{Path: []string{"a", ""}, Value: 1}}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NodeConfig([]byte(tt.installed), tt.v)
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Errorf("err = %v, want one matching %v", err, tt.is)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	doc := []byte("a:\n  b: {c.d: 1}\nl: [1]\n")
	if _, ok, err := Lookup(doc, "a", "b", "c.d"); !ok || err != nil {
		t.Errorf("a.b.[c.d]: %v %v", ok, err)
	}
	for _, p := range [][]string{{"x"}, {"a", "x"}, {"l", "0"}} {
		if _, ok, err := Lookup(doc, p...); ok || err != nil {
			t.Errorf("%q: found %v, err %v; want neither", p, ok, err)
		}
	}
}
