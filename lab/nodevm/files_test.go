package nodevm

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lab/vmtest"
)

func TestContainerdConfig(t *testing.T) {
	c, err := ContainerdConfig(images.PauseName)
	if err != nil {
		t.Fatal(err)
	}
	// Each setting must sit in its own table: a line in the wrong table is
	// ignored by containerd without a word.
	wantIn := map[string][]string{
		`[plugins."io.containerd.grpc.v1.cri"]`:                                  {`sandbox_image = "` + images.PauseName + `"`},
		`[plugins."io.containerd.grpc.v1.cri".containerd]`:                       {`snapshotter = "overlayfs"`, `default_runtime_name = "runc"`},
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`:         {`runtime_type = "io.containerd.runc.v2"`},
		`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`: {"SystemdCgroup = true"},
		`[plugins."io.containerd.grpc.v1.cri".cni]`:                              {`bin_dir = "/usr/lib/cni"`, `conf_dir = "/etc/cni/net.d"`},
		`[plugins."io.containerd.grpc.v1.cri".registry]`:                         {`config_path = ""`},
	}
	tables := tomlTables(c)
	for table, lines := range wantIn {
		for _, l := range lines {
			if !slices.Contains(tables[table], l) {
				t.Errorf("table %s lacks %q; it has %q", table, l, tables[table])
			}
		}
	}
	if !slices.Contains(tables[""], "version = 2") {
		t.Errorf("not a version 2 config (containerd 1.6): %q", tables[""])
	}
	for _, bad := range []string{"", "pause\n:1"} {
		if _, err := ContainerdConfig(bad); err == nil {
			t.Errorf("ContainerdConfig(%q) gave no error", bad)
		}
	}
}

// tomlTables maps each [table] header (and "" for the top) to its
// key = value lines, trimmed.
func tomlTables(s string) map[string][]string {
	m := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
		case strings.HasPrefix(l, "["):
			cur = l
		default:
			m[cur] = append(m[cur], l)
		}
	}
	return m
}

func TestBakedFiles(t *testing.T) {
	files, err := BakedFiles(images.PauseName)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]File{}
	for i, f := range files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path {
			t.Errorf("%q is not a clean absolute path", f.Path)
		}
		if i > 0 && files[i-1].Path >= f.Path {
			t.Errorf("not sorted, or twice: %q after %q", f.Path, files[i-1].Path)
		}
		byPath[f.Path] = f
	}
	for _, unit := range []string{"systemd-logind.service", "serial-getty@ttyS0.service", "systemd-journal-flush.service"} {
		if f := byPath["/etc/systemd/system/"+unit]; f.Link != "/dev/null" {
			t.Errorf("%s is not masked: %+v", unit, f)
		}
	}
	for _, m := range Masked {
		if m.Why == "" {
			t.Errorf("mask of %s says not why", m.Unit)
		}
	}
	script := byPath[LaneScript]
	if script.Mode.Perm() != 0o755 || !strings.HasPrefix(script.Data, "#!/bin/sh\n") {
		t.Errorf("lane script %s: mode %v, starts %q", LaneScript, script.Mode, script.Data[:min(20, len(script.Data))])
	}
	for _, want := range []string{"LABEL=" + PayloadLabel, "ctr -n k8s.io images import", `cp -a "$payload/stage/." /`, TestChannel,
		`"$payload/run"`, "systemctl reboot --force --force", "stty -F",
		"mount -o rw LABEL=" + OutLabel + ` "$out"`, "export " + EnvOutDir + `="$out"`, `umount "$out"`} {
		if !strings.Contains(script.Data, want) {
			t.Errorf("lane script lacks %q", want)
		}
	}
	// The output disk is unmounted before the marker: the host reads it
	// as soon as qemu has exited.
	if u, m := strings.Index(script.Data, `umount "$out"`), strings.Index(script.Data, `"$marker" "$1"`); u < 0 || m < 0 || u > m {
		t.Errorf("the lane script does not unmount the output disk before it prints the exit marker")
	}
	unit := byPath["/etc/systemd/system/"+LaneUnit].Data
	for _, want := range []string{"Type=exec", "ExecStart=" + LaneScript, "After=multi-user.target"} {
		if !strings.Contains(unit, want) {
			t.Errorf("lane unit lacks %q:\n%s", want, unit)
		}
	}
	target := byPath["/etc/systemd/system/"+LaneTarget].Data
	for _, want := range []string{"Requires=multi-user.target", "Wants=" + LaneUnit} {
		if !strings.Contains(target, want) {
			t.Errorf("lane target lacks %q:\n%s", want, target)
		}
	}
	if id := strings.TrimSpace(byPath["/etc/machine-id"].Data); len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Errorf("machine-id %q is not 32 hex digits", id)
	}
	if !strings.Contains(byPath["/etc/containerd/config.toml"].Data, "SystemdCgroup = true") {
		t.Error("containerd's config is not the rendered one")
	}
}

func TestRootfsKey(t *testing.T) {
	base := func() *Rootfs {
		return &Rootfs{
			Kernel:       &vmtest.Kernel{Series: "6.12", Package: "linux-image-6.12.117+deb12-amd64", Version: "6.12.117-1~deb12u1", Release: "6.12.117+deb12-amd64"},
			Sources:      []byte("Types: deb\nURIs: http://mirror.invalid/debian\n"),
			SandboxImage: images.PauseName,
			Mmdebstrap:   "mmdebstrap 1.3.5",
			BusyboxSum:   "00ff",
		}
	}
	k0, err := base().Key()
	if err != nil {
		t.Fatal(err)
	}
	if k1, _ := base().Key(); k1 != k0 {
		t.Errorf("the same inputs give two keys: %s, %s", k0, k1)
	}
	changes := map[string]func(r *Rootfs){
		"the kernel's version": func(r *Rootfs) { r.Kernel.Version = "6.12.118-1~deb12u1" },
		"the kernel's release": func(r *Rootfs) { r.Kernel.Release = "6.12.118+deb12-amd64" },
		"the sources":          func(r *Rootfs) { r.Sources = append(r.Sources, '#') },
		"the sandbox image":    func(r *Rootfs) { r.SandboxImage = "registry.local/nodeguard/pause:4" },
		"mmdebstrap's version": func(r *Rootfs) { r.Mmdebstrap = "mmdebstrap 1.4.0" },
		"the initrd's busybox": func(r *Rootfs) { r.BusyboxSum = "00fe" },
	}
	seen := map[string]string{k0: "base"}
	for what, change := range changes {
		t.Run("a change of "+what+" changes the key", func(t *testing.T) {
			r := base()
			change(r)
			k, err := r.Key()
			if err != nil {
				t.Fatal(err)
			}
			if other, dup := seen[k]; dup {
				t.Errorf("key %s for %s is also %s's", k, what, other)
			}
			seen[k] = what
		})
	}
	t.Run("a package list change changes the key", func(t *testing.T) {
		saved := Packages
		defer func() { Packages = saved }()
		Packages = append(slices.Clone(saved), "strace")
		if k, _ := base().Key(); k == k0 {
			t.Error("same key")
		}
	})
	t.Run("no kernel is an error", func(t *testing.T) {
		r := base()
		r.Kernel = nil
		if _, err := r.Key(); err == nil {
			t.Error("no error")
		}
	})
}

func TestMmdebstrapArgsNameNoArchive(t *testing.T) {
	args := mmdebstrapArgs("/tmp/root", DefaultSources)
	if args[len(args)-3] != Suite || args[len(args)-2] != "/tmp/root" || args[len(args)-1] != DefaultSources {
		t.Errorf("SUITE TARGET MIRROR are not last: %q", args)
	}
	for _, a := range args {
		if strings.Contains(a, "://") || strings.Contains(a, "debian.org") {
			t.Errorf("argument %q names an archive host: the sources file does", a)
		}
	}
	if !slices.Contains(args, "--mode=root") || !slices.Contains(args, "--variant=essential") ||
		!slices.Contains(args, "--include="+strings.Join(Packages, ",")) {
		t.Errorf("args %q", args)
	}
}
