package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfig feeds arbitrary bytes to the configuration parser and
// validator: they never panic, a file that parses either validates or
// fails naming a field, and one that does not parse says it is the
// configuration. Seeds are the example configuration in pieces of a few
// keys, the broken corpus, and testdata/fuzz/FuzzConfig.
//
// Seeds stay small and few. The fuzzing engine minimizes every input that
// finds new coverage, for up to -fuzzminimizetime (60 s), with a number
// of runs that grows with the square of its length: seeded with the whole
// example file (mostly comments) the worker spent make fuzz's
// budget minimizing. And each seed's baseline run ships this package's
// coverage counters (all of its dependencies are instrumented) between
// the worker and the coordinator.
func FuzzConfig(f *testing.F) {
	example, err := os.ReadFile(exampleConfig)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range yamlSeeds(example, 64) {
		if _, err := Parse(seed, "config.example.yaml"); err != nil {
			f.Fatalf("a piece of the example configuration does not parse: %v\n%s", err, seed)
		}
		f.Add(seed)
	}
	bad, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(bad) == 0 {
		f.Fatalf("no broken configurations in testdata/bad (%v)", err)
	}
	for _, p := range bad {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("eviction:\n  evictionHard: {memory.available: 100Mi}\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse(b, "config.yaml")
		if err != nil {
			if !strings.Contains(err.Error(), "config") {
				t.Fatalf("parse error does not say it is about the configuration: %v", err)
			}
			return
		}
		if cfg.RuntimeEndpoint == "" {
			cfg.RuntimeEndpoint = "unix:///run/containerd/containerd.sock"
		}
		if err := cfg.Validate(); err != nil && err.Error() == "" {
			t.Fatal("a validation error with no text")
		}
	})
}

// yamlSeeds splits a YAML file, without its comment and blank lines, into
// seeds of at most limit bytes where it can: consecutive top-level keys
// share a seed, and a longer key is split between its second-level keys,
// each piece under the key's own line.
func yamlSeeds(b []byte, limit int) [][]byte {
	var lines [][]byte
	for line := range bytes.Lines(b) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			lines = append(lines, line)
		}
	}
	var seeds [][]byte
	merged := false // the last seed holds whole top-level keys only
	for _, sec := range groupYAML(lines, 0) {
		whole := bytes.Join(sec, nil)
		if len(whole) <= limit || len(sec) < 2 {
			if n := len(seeds); merged && len(seeds[n-1])+len(whole) <= limit {
				seeds[n-1] = append(seeds[n-1], whole...)
			} else {
				seeds = append(seeds, whole)
			}
			merged = true
			continue
		}
		indent := len(sec[1]) - len(bytes.TrimLeft(sec[1], " "))
		var cur []byte
		for _, g := range groupYAML(sec[1:], indent) {
			sub := bytes.Join(g, nil)
			if cur != nil && len(cur)+len(sub) > limit {
				seeds, cur = append(seeds, cur), nil
			}
			if cur == nil {
				cur = bytes.Clone(sec[0])
			}
			cur = append(cur, sub...)
		}
		seeds = append(seeds, cur)
		merged = false
	}
	return seeds
}

// groupYAML groups lines at each key indented by exactly indent spaces;
// a list item at that depth belongs to the key before it.
func groupYAML(lines [][]byte, indent int) [][][]byte {
	var groups [][][]byte
	for _, l := range lines {
		rest := bytes.TrimLeft(l, " ")
		if len(l)-len(rest) == indent && !bytes.HasPrefix(rest, []byte("- ")) || len(groups) == 0 {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], l)
	}
	return groups
}
