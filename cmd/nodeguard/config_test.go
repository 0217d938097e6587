package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/config"
)

// TestConfigCommand runs `nodeguard config` as a user does: the package
// config decides, the command prints and sets the exit status.
func TestConfigCommand(t *testing.T) {
	const example = "../../deploy/config.example.yaml"
	bin := buildBinary(t)
	t.Run("check prints ok for a valid file and exits 0", func(t *testing.T) {
		out, err := exec.Command(bin, "config", "check", example).CombinedOutput()
		if err != nil || string(out) != "ok\n" {
			t.Fatalf("exit %v, output %q", err, out)
		}
	})
	t.Run("check names the field and value of a broken file and exits 1", func(t *testing.T) {
		path := "../../config/testdata/bad/wrong-type.yaml"
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
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		want, err := yaml.Marshal(config.Default().Effective())
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("round trip:\n%s\nwant\n%s", got, want)
		}
		for _, key := range []string{"evictionHard:", "memory.available: 100Mi", "tick: 1s", "level: info", "maxPods: 110"} {
			if !strings.Contains(string(out), key) {
				t.Errorf("defaults lack %q", key)
			}
		}
	})
}
