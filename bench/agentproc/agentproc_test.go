package agentproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// fakeBinary writes a shell script standing in for nodeguard.
func fakeBinary(t *testing.T, script string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nodeguard")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAnAgentThatExitsBeforeItsAPIAnswersSaysWhy(t *testing.T) {
	bin := fakeBinary(t, `echo "no runtime at $9" >&2; exit 3`+"\n")
	dir := t.TempDir()
	a, err := New(bin, dir, "", []string{"--runtime-endpoint", "unix:///nowhere.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	err = a.Start(t.Context(), map[string]any{"eviction": map[string]any{"disabled": true}})
	if err == nil || !strings.Contains(err.Error(), "exited before its API answered") || !strings.Contains(err.Error(), "no runtime at unix:///nowhere.sock") {
		t.Fatalf("err %v, want the early exit with the agent's last words", err)
	}
	if pid := a.PID(); pid != 0 {
		t.Errorf("pid %d after a failed start, want 0 (nothing runs)", pid)
	}
	t.Run("it was started as run with its configuration, state and socket under its directory", func(t *testing.T) {
		b, err := os.ReadFile(a.LogPath())
		if err != nil {
			t.Fatal(err)
		}
		want := "run --config " + filepath.Join(dir, "config.yaml") + " --root-dir " + filepath.Join(dir, "state") + " --api-socket " + a.Socket() + " --runtime-endpoint unix:///nowhere.sock"
		if !strings.Contains(string(b), "=== ") || !strings.Contains(string(b), want) {
			t.Errorf("log %q, want a start line with %q", b, want)
		}
		conf, err := os.ReadFile(filepath.Join(dir, "config.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Eviction struct {
				Disabled bool `json:"disabled"`
			} `json:"eviction"`
			ImagePull *bool `json:"imagePull"`
		}
		if err := yaml.Unmarshal(conf, &got); err != nil || !got.Eviction.Disabled {
			t.Errorf("configuration file %q (%v), want eviction.disabled", conf, err)
		}
		// The benchmarks' images are local: a configuration that does
		// not say otherwise pulls nothing.
		if got.ImagePull == nil || *got.ImagePull {
			t.Errorf("configuration file %q, want imagePull: false", conf)
		}
	})
}

func TestAGuardHandsOverItsLinesAndStopsOnSIGTERM(t *testing.T) {
	bin := fakeBinary(t, `trap 'echo "{\"msg\":\"stopping\"}"; exit 0' TERM
echo '{"msg":"nodeguard guard running"}'
echo '{"msg":"evict pod"}'
while :; do sleep 0.05; done
`)
	dir := t.TempDir()
	g := &Guard{Bin: bin, Dir: dir, LogPath: filepath.Join(dir, "guard.log"), Conf: map[string]any{"nodeName": "n1"}}
	lines, stop, err := g.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for l := range lines {
		got = append(got, l)
		if len(got) == 2 {
			break
		}
	}
	if err := stop(); err != nil {
		t.Errorf("stop: %v", err)
	}
	for l := range lines { // closed once the guard's output ends
		got = append(got, l)
	}
	if len(got) < 2 || got[0] != `{"msg":"nodeguard guard running"}` || got[1] != `{"msg":"evict pod"}` {
		t.Errorf("lines %q, want its output in order", got)
	}
	b, err := os.ReadFile(g.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if log := string(b); !strings.Contains(log, "guard --config "+filepath.Join(dir, "guard.yaml")) || !strings.Contains(log, `{"msg":"evict pod"}`) || !strings.Contains(log, `{"msg":"stopping"}`) {
		t.Errorf("log %q, want the start line and every line it wrote, its last after SIGTERM", log)
	}
	conf, err := os.ReadFile(filepath.Join(dir, "guard.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]string
	if err := yaml.Unmarshal(conf, &c); err != nil || c["nodeName"] != "n1" || !strings.HasPrefix(c["metricsAddr"], "127.0.0.1:") {
		t.Errorf("configuration %q (%v), want its own keys and a loopback metricsAddr", conf, err)
	}
}

func TestAGuardThatExitsBeforeItRunsSaysWhereItsLogIs(t *testing.T) {
	bin := fakeBinary(t, `echo "kubeconfig: no such file"; exit 1`+"\n")
	dir := t.TempDir()
	g := &Guard{Bin: bin, Dir: dir, LogPath: filepath.Join(dir, "guard.log"), Conf: map[string]any{}}
	_, _, err := g.Start(t.Context())
	if err == nil || !strings.Contains(err.Error(), "exited before it ran") || !strings.Contains(err.Error(), g.LogPath) {
		t.Fatalf("err %v, want the early exit and the log's path", err)
	}
	if b, _ := os.ReadFile(g.LogPath); !strings.Contains(string(b), "kubeconfig: no such file") {
		t.Errorf("log %q, want the guard's output", b)
	}
}
