package kubeletproc

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func validOptions() Options {
	return Options{
		Bin:             "/cache/bin/kubelet",
		Dir:             "/tmp/run",
		RuntimeEndpoint: "unix:///tmp/env/containerd.sock",
		StaticPodDir:    "/tmp/run/manifests",
		CgroupRoot:      "/process_api/abc/nodeguard-crienv-1-x/kubelet",
		NodeName:        "vm",
	}
}

func TestTheConfigurationIsWhatThisHostNeeds(t *testing.T) {
	o, err := validOptions().validate()
	if err != nil {
		t.Fatal(err)
	}
	o.ExtraConfig = map[string]any{"evictionHard": map[string]string{"memory.available": "200Mi"}, "kernelMemcgNotification": true}
	b, err := renderConfig(o, ports{server: 41001, healthz: 41002})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v in\n%s", err, b)
	}
	for _, c := range []struct {
		key  string
		want any
	}{
		{"apiVersion", "kubelet.config.k8s.io/v1beta1"},
		{"kind", "KubeletConfiguration"},
		{"staticPodPath", "/tmp/run/manifests"},
		{"containerRuntimeEndpoint", "unix:///tmp/env/containerd.sock"},
		{"cgroupDriver", "cgroupfs"},
		{"cgroupRoot", "/process_api/abc/nodeguard-crienv-1-x/kubelet"},
		{"failCgroupV1", false},
		{"failSwapOn", false},
		{"maxPods", float64(DefaultMaxPods)},
		{"podLogsDir", "/tmp/run/pod-logs"},
		{"makeIPTablesUtilChains", false},
		{"protectKernelDefaults", true},
		{"address", "127.0.0.1"},
		{"port", float64(41001)},
		{"readOnlyPort", float64(0)},
		{"healthzBindAddress", "127.0.0.1"},
		{"healthzPort", float64(41002)},
		{"kernelMemcgNotification", true},
	} {
		if got[c.key] != c.want {
			t.Errorf("%s = %v (%T), want %v", c.key, got[c.key], got[c.key], c.want)
		}
	}
	t.Run("anonymous requests are authenticated and all allowed", func(t *testing.T) {
		var v struct {
			Authentication struct {
				Anonymous struct{ Enabled bool } `json:"anonymous"`
				Webhook   struct{ Enabled bool } `json:"webhook"`
			} `json:"authentication"`
			Authorization struct{ Mode string } `json:"authorization"`
			EvictionHard  map[string]string     `json:"evictionHard"`
		}
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if !v.Authentication.Anonymous.Enabled || v.Authentication.Webhook.Enabled || v.Authorization.Mode != "AlwaysAllow" {
			t.Errorf("authentication %+v, authorization %+v: want anonymous on, webhook off, AlwaysAllow", v.Authentication, v.Authorization)
		}
		if v.EvictionHard["memory.available"] != "200Mi" {
			t.Errorf("evictionHard %v, want ExtraConfig's", v.EvictionHard)
		}
	})
	t.Run("an extra field that Start sets itself is refused", func(t *testing.T) {
		o.ExtraConfig = map[string]any{"healthzPort": 10248}
		if _, err := renderConfig(o, ports{server: 1, healthz: 2}); !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "healthzPort") {
			t.Errorf("err %v, want ErrOptions naming healthzPort", err)
		}
	})
	t.Run("the flags run it standalone with everything beneath Dir", func(t *testing.T) {
		want := "--config=/tmp/run/kubelet-config.yaml --root-dir=/tmp/run/root --cert-dir=/tmp/run/pki --hostname-override=vm"
		if got := strings.Join(args(o), " "); got != want {
			t.Errorf("flags %q, want %q", got, want)
		}
	})
}

func TestOptionsStartCannotUseAreRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Options)
	}{
		{"no binary", func(o *Options) { o.Bin = "" }},
		{"a relative directory", func(o *Options) { o.Dir = "run" }},
		{"an unclean static pod directory", func(o *Options) { o.StaticPodDir = "/tmp/run/../manifests" }},
		{"no cgroup root", func(o *Options) { o.CgroupRoot = "" }},
		{"the hierarchies' root as the cgroup root", func(o *Options) { o.CgroupRoot = "/" }},
		{"a relative cgroup root", func(o *Options) { o.CgroupRoot = "kubelet" }},
		{"a TCP runtime endpoint", func(o *Options) { o.RuntimeEndpoint = "tcp://127.0.0.1:1234" }},
		{"a relative socket", func(o *Options) { o.RuntimeEndpoint = "unix://containerd.sock" }},
		{"negative max pods", func(o *Options) { o.MaxPods = -1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := validOptions()
			c.edit(&o)
			if _, err := o.validate(); !errors.Is(err, ErrOptions) {
				t.Errorf("validate: %v, want ErrOptions", err)
			}
		})
	}
	t.Run("defaults fill max pods and the log", func(t *testing.T) {
		o, err := validOptions().validate()
		if err != nil || o.MaxPods != DefaultMaxPods || o.LogPath != "/tmp/run/kubelet.log" {
			t.Errorf("validate: %+v, %v; want maxPods %d and the log in Dir", o, err, DefaultMaxPods)
		}
	})
}

func TestTheWrapperMountsWhatTheKubeletChecksThenExecsIt(t *testing.T) {
	o := validOptions()
	o.Dir = "/tmp/it's here"
	s := wrapperScript(o, "/tmp/env/containerd.sock")
	for _, want := range []string{
		"set -eu\n",
		"mount -t tmpfs -o mode=0755,size=64m kubeletproc '/var/log'\n",
		"mount -t tmpfs -o mode=0700,size=1m kubeletproc '/run/containerd'\n",
		"mount --bind '/tmp/env/containerd.sock' '/run/containerd/containerd.sock'\n",
		`mount --bind '/tmp/it'\''s here/var-lib-kubelet' '/var/lib/kubelet'` + "\n",
		`mount --bind '/tmp/it'\''s here/sysctl/vm.overcommit_memory' '/proc/sys/vm/overcommit_memory'` + "\n",
		`mount --bind '/tmp/it'\''s here/sysctl/kernel.keys.root_maxbytes' '/proc/sys/kernel/keys/root_maxbytes'` + "\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("wrapper lacks %q:\n%s", want, s)
		}
	}
	if !strings.HasSuffix(s, "exec '/cache/bin/kubelet' \"$@\"\n") {
		t.Errorf("wrapper does not end by exec'ing the kubelet with its arguments:\n%s", s)
	}
	if n := strings.Count(s, "/proc/sys/"); n != len(kernelDefaults) {
		t.Errorf("%d sysctl mounts, want %d", n, len(kernelDefaults))
	}
	t.Run("a quoted word is the same string to the shell", func(t *testing.T) {
		for _, w := range []string{"plain", "it's", `a "b" $c \d`, "''"} {
			out, err := exec.Command("/bin/sh", "-c", "printf '%s' "+quote(w)).Output()
			if err != nil || string(out) != w {
				t.Errorf("sh gave %q (%v) for %q", out, err, w)
			}
		}
	})
	t.Run("the sysctl files hold the values protectKernelDefaults wants", func(t *testing.T) {
		dir := t.TempDir()
		if err := writeSysctls(dir); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]string{"vm/overcommit_memory": "1\n", "kernel/panic": "10\n", "kernel/panic_on_oops": "1\n", "vm/panic_on_oom": "0\n"} {
			b, err := os.ReadFile(sysctlFile(dir, path))
			if err != nil || string(b) != want {
				t.Errorf("%s: %q (%v), want %q", path, b, err, want)
			}
		}
	})
}

func TestFindBinaryLooksWhereTheClusterLaneCachesIt(t *testing.T) {
	dir := t.TempDir()
	exe := func(p string) string {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	named := exe(filepath.Join(dir, "named", "kubelet"))
	cpBin := exe(filepath.Join(dir, "cpbin", "kubelet"))
	cached := exe(filepath.Join(dir, "cache", cpKey, "bin", "kubelet"))
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"the variable wins", map[string]string{EnvBinary: named, envCPBin: filepath.Dir(cpBin)}, named},
		{"then the control plane's directory", map[string]string{envCPBin: filepath.Dir(cpBin), envCPCache: filepath.Join(dir, "cache")}, cpBin},
		{"then the cache", map[string]string{envCPCache: filepath.Join(dir, "cache")}, cached},
		{"a missing binary is ErrNoBinary", map[string]string{EnvBinary: filepath.Join(dir, "none")}, ""},
		{"a file that is not executable is ErrNoBinary", map[string]string{EnvBinary: plain}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := findBinary(func(k string) string { return c.env[k] })
			if c.want == "" {
				if !errors.Is(err, ErrNoBinary) {
					t.Errorf("findBinary: %q, %v; want ErrNoBinary", got, err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Errorf("findBinary: %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestTheSandboxCgroupComesFromTheVerboseInfo(t *testing.T) {
	got, err := sandboxCgroup([]byte(`{"pid":42,"runtimeSpec":{"linux":{"cgroupsPath":"/a/kubelet/kubepods/besteffort/podx/abc","namespaces":[]}}}`))
	if err != nil || got != "/a/kubelet/kubepods/besteffort/podx/abc" {
		t.Errorf("sandboxCgroup: %q, %v", got, err)
	}
	if _, err := sandboxCgroup([]byte(`{"pid":42,"runtimeSpec":{"linux":{}}}`)); !errors.Is(err, errNoCgroup) {
		t.Errorf("no cgroupsPath: %v, want errNoCgroup", err)
	}
	if _, err := sandboxCgroup([]byte(`not json`)); err == nil || errors.Is(err, errNoCgroup) {
		t.Errorf("not JSON: %v, want a decoding error", err)
	}
}
