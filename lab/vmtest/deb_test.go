package vmtest

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// buildDeb makes a small package whose data archive holds files (name ->
// content) with dpkg-deb --build.
func buildDeb(t *testing.T, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("no dpkg-deb here")
	}
	root := filepath.Join(t.TempDir(), "pkg")
	control := "Package: nodeguard-walk-test\nVersion: 1\nArchitecture: all\nMaintainer: nodeguard <nodeguard@invalid>\nDescription: test\n"
	if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(t.TempDir(), "walk.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zxz", "--build", root, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v: %s", err, out)
	}
	return deb
}

func TestWalkDebData(t *testing.T) {
	deb := buildDeb(t, map[string]string{
		"boot/vmlinuz-1.0-test":               "kernel",
		"lib/modules/1.0-test/kernel/a.ko.xz": "module a",
	})
	t.Run("every entry is seen, named without its leading ./", func(t *testing.T) {
		got := map[string]string{}
		err := WalkDebData(context.Background(), deb, func(h *tar.Header, r io.Reader) error {
			if h.Typeflag != tar.TypeReg {
				return nil
			}
			b, err := io.ReadAll(r)
			got[h.Name] = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if got["boot/vmlinuz-1.0-test"] != "kernel" || got["lib/modules/1.0-test/kernel/a.ko.xz"] != "module a" {
			t.Errorf("walked %q", got)
		}
	})
	t.Run("ErrStopWalk ends the walk without an error", func(t *testing.T) {
		var names []string
		err := WalkDebData(context.Background(), deb, func(h *tar.Header, _ io.Reader) error {
			names = append(names, h.Name)
			return ErrStopWalk
		})
		if err != nil || len(names) != 1 {
			t.Errorf("err = %v after %q, want nil after one entry", err, names)
		}
	})
	t.Run("another error from the callback is returned", func(t *testing.T) {
		boom := errors.New("boom")
		if err := WalkDebData(context.Background(), deb, func(*tar.Header, io.Reader) error { return boom }); !errors.Is(err, boom) {
			t.Errorf("err = %v, want boom", err)
		}
	})
	t.Run("vmlinuzFromDeb finds the kernel image", func(t *testing.T) {
		b, err := vmlinuzFromDeb(context.Background(), deb, "1.0-test")
		if err != nil || string(b) != "kernel" {
			t.Errorf("got %q, %v", b, err)
		}
		if _, err := vmlinuzFromDeb(context.Background(), deb, "2.0-other"); err == nil {
			t.Error("a release the package lacks gave no error")
		}
	})
	t.Run("a file that is not a package is an error", func(t *testing.T) {
		bad := filepath.Join(t.TempDir(), "bad.deb")
		if err := os.WriteFile(bad, []byte("not a deb"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := WalkDebData(context.Background(), bad, func(*tar.Header, io.Reader) error { return nil }); err == nil {
			t.Error("no error")
		}
	})
}

func TestKernelParamsAreQemuArgsCommandLine(t *testing.T) {
	args := qemuArgs(Config{Memory: "512M", CPUs: 2}, "/k", "/i", "/c", 2596134)
	i := slices.Index(args, "-append")
	want := "console=ttyS0 cgroup_no_v1=all tsc_early_khz=2596134 tsc=reliable quiet panic=-1 rdinit=/init"
	if i < 0 || args[i+1] != want {
		t.Errorf("kernel command line %q, want %q (the VM lane's, unchanged)", args[i+1], want)
	}
	if args[slices.Index(args, "-M")+1] != MicrovmMachine {
		t.Errorf("machine is not MicrovmMachine: %q", args)
	}
}

func TestInstallToolsWithNothingMissingRunsNoApt(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Both present: no apt-get is run (it would fail for a made-up package).
	tools := []HostTool{{Path: self, Package: "nodeguard-no-such-package"}, {Path: "sh", Package: "nodeguard-no-such-package"}}
	if err := InstallTools(context.Background(), nil, tools); err != nil {
		t.Errorf("InstallTools: %v", err)
	}
}
