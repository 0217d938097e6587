package main

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
// configuration. Seeds are the example configuration's sections, a few
// to a seed, the broken corpus, and testdata/fuzz/FuzzConfig.
//
// Seeds stay small and few. The fuzzing engine minimizes every input that
// finds new coverage, for up to -fuzzminimizetime (60 s), with a number
// of runs that grows with the square of its length: seeded with the whole
// example file (mostly comments) the worker spent make fuzz's
// budget minimizing. And each seed's baseline run ships this package's
// coverage counters (all of its dependencies are instrumented) between
// the worker and the coordinator.
func FuzzConfig(f *testing.F) {
	example, err := os.ReadFile("../../deploy/config.example.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range yamlSeeds(example, 256) {
		f.Add(seed)
	}
	bad, err := filepath.Glob("testdata/config/bad/*.yaml")
	if err != nil || len(bad) == 0 {
		f.Fatalf("no broken configurations in testdata/config/bad (%v)", err)
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
		cfg, err := parseRunConfig(b, "config.yaml")
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

// yamlSeeds splits a YAML file into its top-level keys, each with the
// lines beneath it, without comment and blank lines, and groups
// consecutive keys into seeds of at most limit bytes (a longer key is a seed
// of its own).
func yamlSeeds(b []byte, limit int) [][]byte {
	var sections [][]byte
	var cur []byte
	for line := range bytes.Lines(b) {
		trimmed := bytes.TrimSpace(line)
		if len(trimmed) == 0 || trimmed[0] == '#' {
			continue
		}
		if line[0] != ' ' && line[0] != '-' && len(cur) > 0 {
			sections = append(sections, cur)
			cur = nil
		}
		cur = append(cur, line...)
	}
	if len(cur) > 0 {
		sections = append(sections, cur)
	}
	var seeds [][]byte
	for _, s := range sections {
		if n := len(seeds); n > 0 && len(seeds[n-1])+len(s) <= limit {
			seeds[n-1] = append(seeds[n-1], s...)
			continue
		}
		seeds = append(seeds, s)
	}
	return seeds
}
