package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzConfig feeds arbitrary bytes to the configuration parser and
// validator: they never panic, a file that loads either validates or
// fails naming a field, and one that does not load says which file.
// Seeds are the example configuration and the broken corpus, plus
// testdata/fuzz/FuzzConfig.
func FuzzConfig(f *testing.F) {
	for _, glob := range []string{"../../deploy/config.example.yaml", "testdata/config/bad/*.yaml"} {
		files, _ := filepath.Glob(glob)
		for _, p := range files {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte("eviction:\n  evictionHard: {memory.available: 100Mi}\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadRunConfig(path)
		if err != nil {
			if !strings.Contains(err.Error(), "config") {
				t.Fatalf("load error does not say it is about the configuration: %v", err)
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
