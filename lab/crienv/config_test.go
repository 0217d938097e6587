package crienv

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

func testConfigParams(dir string) configParams {
	return configParams{
		Root: dir + "/root", State: dir + "/state", Temp: dir + "/tmp",
		Socket: dir + "/containerd.sock", OptDir: dir + "/opt",
		RuncBinary: "/usr/sbin/runc", RuncRoot: dir + "/runc",
		SandboxImage: "registry.local/nodeguard/pause:3.9",
		CNIBinDir:    "/usr/lib/cni", CNIConfDir: dir + "/cni/net.d",
		HostsDir: dir + "/certs.d",
	}
}

func TestRenderConfig(t *testing.T) {
	cfg, err := renderConfig(testConfigParams("/tmp/env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"version = 2\n",
		"  restrict_oom_score_adj = true\n",
		"  systemd_cgroup = false\n",
		"  SystemdCgroup = false\n",
		`  runtime_type = "io.containerd.runc.v2"` + "\n",
		`  snapshotter = "overlayfs"` + "\n",
		`  sandbox_image = "registry.local/nodeguard/pause:3.9"` + "\n",
		`  address = "/tmp/env/containerd.sock"` + "\n",
		`  conf_dir = "/tmp/env/cni/net.d"` + "\n",
		`  Root = "/tmp/env/runc"` + "\n",
		`  path = "/tmp/env/opt"` + "\n",
		"  netns_mounts_under_state_dir = true\n",
		"  disable_apparmor = true\n",
		`  config_path = "/tmp/env/certs.d"` + "\n",
		`required_plugins = ["io.containerd.grpc.v1.cri"]` + "\n",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q", want)
		}
	}
	for _, line := range strings.Split(cfg, "\n") {
		if strings.HasPrefix(line, "disabled_plugins") && strings.Contains(line, "cri") {
			t.Errorf("the CRI plugin is disabled: %s", line)
		}
	}
}

func TestRenderConfigRejects(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*configParams)
	}{
		{"an empty directory", func(p *configParams) { p.State = "" }},
		{"a path with a newline, which would end the TOML string", func(p *configParams) { p.Root = "/tmp/a\nversion = 3" }},
		{"a path with a control character", func(p *configParams) { p.Socket = "/tmp/\x01.sock" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := testConfigParams("/tmp/env")
			tt.modify(&p)
			if _, err := renderConfig(p); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("renderConfig: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

// TestContainerdReadsTheConfig checks every setting through containerd's
// own parser: `containerd config dump` prints the merged config, with the
// default for any key it did not recognise, so a misspelt key shows up as a
// mismatch.
func TestContainerdReadsTheConfig(t *testing.T) {
	containerd, err := lookTool("containerd")
	if err != nil {
		cgtest.Need(t, false, "containerd is not installed (crienv.EnsurePackages installs it)")
	}
	dir := t.TempDir()
	cfg, err := renderConfig(testConfigParams(dir))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, containerd, "--config", file, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v: %s", err, out)
	}
	dump := string(out)
	section := ""
	for _, line := range strings.Split(cfg, "\n") {
		l := strings.TrimSpace(line)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			section = l
			if !strings.Contains(dump, l+"\n") {
				t.Errorf("dump lacks section %s", l)
			}
		case strings.HasPrefix(l, "disabled_plugins") || strings.HasPrefix(l, "required_plugins"):
			// Arrays: containerd prints them in its own layout.
			key, _, _ := strings.Cut(l, " =")
			if !strings.Contains(dump, key+" = [") {
				t.Errorf("dump lacks %s", key)
			}
		default:
			if !strings.Contains(dump, l+"\n") {
				t.Errorf("in %s containerd did not take %q", section, l)
			}
		}
	}
}
