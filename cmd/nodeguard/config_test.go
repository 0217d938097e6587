package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

const exampleConfig = "../../deploy/config.example.yaml"

// TestBrokenConfigsAreRefusedByName checks each file of the corpus
// testdata/config/bad against its golden error (NAME.err beside NAME.yaml,
// without the "config FILE: " prefix): the message names the field and
// the value, and changes only on purpose (go test -run BrokenConfigs
// -update rewrites them).
func TestBrokenConfigsAreRefusedByName(t *testing.T) {
	files, err := filepath.Glob("testdata/config/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".yaml")
		t.Run(strings.ReplaceAll(name, "-", " ")+" is refused", func(t *testing.T) {
			cerr := checkConfigFile(path)
			if cerr == nil {
				t.Fatal("accepted")
			}
			got := strings.TrimPrefix(cerr.Error(), "config "+path+": ")
			golden := strings.TrimSuffix(path, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -run BrokenConfigs -update writes it)", err)
			}
			if got != strings.TrimSpace(string(want)) {
				t.Errorf("error\n  %s\nwant (%s)\n  %s", got, golden, strings.TrimSpace(string(want)))
			}
			if !strings.HasPrefix(cerr.Error(), "config "+path+": ") {
				t.Errorf("the error does not name the file: %v", cerr)
			}
		})
	}
}

// TestTheExampleConfigIsTheDefaults loads deploy/config.example.yaml: it
// validates, and, apart from runtimeEndpoint (which has no default), it
// is the default configuration, field for field: the file documents
// every default truthfully.
func TestTheExampleConfigIsTheDefaults(t *testing.T) {
	cfg, err := loadRunConfig(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the example does not validate: %v", err)
	}
	def := defaultRunConfig()
	def.RuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	got, want := mustYAML(t, cfg.effective()), mustYAML(t, def.effective())
	// Empty maps and lists in the file are null in the defaults: both
	// mean none.
	norm := func(s string) string {
		return strings.NewReplacer(": {}\n", ": null\n", ": []\n", ": null\n").Replace(s)
	}
	if norm(got) != norm(want) {
		t.Errorf("the example differs from the defaults:\n%s", lineDiff(norm(got), norm(want)))
	}
	// Every key of the defaults is in the example, with a comment.
	text, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := configKeys(def)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !bytes.Contains(text, []byte(leaf+":")) {
			t.Errorf("the example does not show %s", k)
		}
	}
}

func mustYAML(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// lineDiff lists the lines only one side has.
func lineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	var b strings.Builder
	for _, l := range g {
		if !slices.Contains(w, l) {
			b.WriteString("example:  " + l + "\n")
		}
	}
	for _, l := range w {
		if !slices.Contains(g, l) {
			b.WriteString("defaults: " + l + "\n")
		}
	}
	return b.String()
}

func TestConfigCommand(t *testing.T) {
	bin := buildBinary(t)
	t.Run("check prints ok for a valid file and exits 0", func(t *testing.T) {
		out, err := exec.Command(bin, "config", "check", exampleConfig).CombinedOutput()
		if err != nil || string(out) != "ok\n" {
			t.Fatalf("exit %v, output %q", err, out)
		}
	})
	t.Run("check names the field and value of a broken file and exits 1", func(t *testing.T) {
		path := "testdata/config/bad/wrong-type.yaml"
		out, err := exec.Command(bin, "config", "check", path).CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		if !ok || ee.ExitCode() != 1 {
			t.Fatalf("exit %v, want 1; output %q", err, out)
		}
		want := "nodeguard: config " + path + `: network.maxPods: invalid value "many": want an integer` + "\n"
		if string(out) != want {
			t.Errorf("output %q, want %q", out, want)
		}
	})
	t.Run("check of a missing file names it", func(t *testing.T) {
		out, err := exec.Command(bin, "config", "check", "testdata/no-such-config.yaml").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "no-such-config.yaml") {
			t.Errorf("exit %v, output %q", err, out)
		}
	})
	t.Run("defaults prints YAML that loads back as the defaults", func(t *testing.T) {
		out, err := exec.Command(bin, "config", "defaults").Output()
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "defaults.yaml")
		if err := os.WriteFile(path, out, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadRunConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := mustYAML(t, cfg), mustYAML(t, defaultRunConfig().effective()); got != want {
			t.Errorf("round trip:\n%s", lineDiff(got, want))
		}
		for _, key := range []string{"evictionHard:", "memory.available: 100Mi", "tick: 1s", "level: info", "maxPods: 110"} {
			if !strings.Contains(string(out), key) {
				t.Errorf("defaults lack %q", key)
			}
		}
	})
}

func TestConfigChangesSplitWhatAReloadApplies(t *testing.T) {
	base := defaultRunConfig()
	base.RuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	cases := []struct {
		name           string
		edit           func(c *runConfig)
		apply, restart []string
	}{
		{"nothing changed applies nothing", func(*runConfig) {}, nil, nil},
		{"a log level is applied", func(c *runConfig) { c.Logging.Level = "debug" }, []string{"logging"}, nil},
		{"hard thresholds are applied", func(c *runConfig) {
			c.Eviction.EvictionHard = map[string]string{"memory.available": "200Mi"}
		}, []string{"eviction.evictionHard"}, nil},
		{"writing out the default thresholds is no change", func(c *runConfig) {
			c.Eviction.EvictionHard = map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%", "imagefs.available": "15%"}
		}, nil, nil},
		{"the tick and dry run need a restart", func(c *runConfig) {
			c.Eviction.Tick.Duration *= 2
			c.Eviction.DryRun = true
		}, nil, []string{"eviction.dryRun", "eviction.tick"}},
		{"other sections need a restart", func(c *runConfig) {
			c.Network.MaxPods = 50
			c.RootDir = "/srv/nodeguard"
			c.Eviction.CoolDown.Duration = 5
		}, []string{"eviction.coolDown"}, []string{"network", "rootDir"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			next := base
			next.Eviction.ThresholdConfig.EnforceNodeAllocatable = slices.Clone(base.Eviction.EnforceNodeAllocatable)
			c.edit(&next)
			apply, restart, err := configChanges(base, next)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(apply, c.apply) || !slices.Equal(restart, c.restart) {
				t.Errorf("apply %q restart %q, want %q and %q", apply, restart, c.apply, c.restart)
			}
			// After the reload, only what needs a restart still differs.
			_, still, _ := configChanges(withReloaded(base, next), next)
			if _, again, _ := configChanges(base, next); !slices.Equal(still, again) {
				t.Errorf("after applying, %q differ; want only %q", still, again)
			}
			if applied, _, _ := configChanges(withReloaded(base, next), next); len(applied) != 0 {
				t.Errorf("withReloaded left %q unapplied", applied)
			}
		})
	}
}

func TestTheDefaultConfigFileIsReadOnlyWhenItExists(t *testing.T) {
	if p, err := configPath("/x/given.yaml", true); err != nil || p != "/x/given.yaml" {
		t.Errorf("--config given: %q %v", p, err)
	}
	if _, err := configPath("", true); err == nil {
		t.Error("an empty --config was accepted")
	}
	p, err := configPath(DefaultConfigPath, false)
	_, statErr := os.Stat(DefaultConfigPath)
	switch {
	case statErr == nil && p != DefaultConfigPath, statErr != nil && p != "":
		t.Errorf("without --config: %q %v (the default file exists: %v)", p, err, statErr == nil)
	}
}
