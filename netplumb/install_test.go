package netplumb

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// needPlugins skips (or fails under NODEGUARD_REQUIRE_PRIVILEGED=1) when
// the CNI plugins the default chain needs are not installed.
func needPlugins(t testing.TB) {
	t.Helper()
	for _, p := range pluginTypes(DefaultConfig()) {
		_, err := findPlugin(p, DefaultBinDirs)
		cgtest.Need(t, err == nil, "needs the CNI plugins (apt-get install containernetworking-plugins): "+errString(err))
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// pluginDir returns a directory with symlinks to the installed plugins
// named, and no others.
func pluginDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		src, err := findPlugin(n, DefaultBinDirs)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(src, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestInstall(t *testing.T) {
	needPlugins(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	t.Run("writes the rendered conflist into the conf dir", func(t *testing.T) {
		c := DefaultConfig()
		c.ConfDir = filepath.Join(t.TempDir(), "net.d")
		path, err := Install(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if path != filepath.Join(c.ConfDir, "10-nodeguard.conflist") {
			t.Errorf("path = %s", path)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := Render(c)
		if string(got) != string(want) {
			t.Errorf("wrote\n%s\nwant\n%s", got, want)
		}
		ents, _ := os.ReadDir(c.ConfDir)
		if len(ents) != 1 {
			t.Errorf("conf dir holds %d files, want only the conflist", len(ents))
		}
		fi, _ := os.Stat(path)
		before := fi.ModTime()
		time.Sleep(10 * time.Millisecond)
		if _, err := Install(ctx, c); err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(path); !fi.ModTime().Equal(before) {
			t.Errorf("an unchanged conflist was rewritten")
		}
	})

	t.Run("a missing plugin is named with the directories searched", func(t *testing.T) {
		c := DefaultConfig()
		c.ConfDir = t.TempDir()
		c.BinDirs = []string{pluginDir(t, "bridge", "host-local", "portmap"), t.TempDir()}
		_, err := Install(ctx, c)
		var pe *PluginNotFoundError
		if !errors.As(err, &pe) || pe.Plugin != "bandwidth" {
			t.Fatalf("Install() = %v, want bandwidth not found", err)
		}
		if want := `netplumb: CNI plugin "bandwidth" not found in [` + c.BinDirs[0] + " " + c.BinDirs[1] + "]"; err.Error() != want {
			t.Errorf("error = %q, want %q", err, want)
		}
		if _, err := os.Stat(ConfFile(c)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a conflist was written despite the missing plugin: %v", err)
		}
	})

	t.Run("an empty plugin directory misses the bridge first", func(t *testing.T) {
		c := DefaultConfig()
		c.ConfDir = t.TempDir()
		c.BinDirs = []string{t.TempDir()}
		_, err := Install(ctx, c)
		var pe *PluginNotFoundError
		if !errors.As(err, &pe) || pe.Plugin != "bridge" {
			t.Fatalf("Install() = %v, want bridge not found", err)
		}
	})

	t.Run("a chain without bandwidth does not need its plugin", func(t *testing.T) {
		c := DefaultConfig()
		c.ConfDir = t.TempDir()
		c.Bandwidth = false
		c.BinDirs = []string{pluginDir(t, "bridge", "host-local", "portmap")}
		if _, err := Install(ctx, c); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a bad field is named and nothing is written", func(t *testing.T) {
		c := DefaultConfig()
		c.ConfDir = t.TempDir()
		c.Bridge = "a-very-long-bridge-name"
		_, err := Install(ctx, c)
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != "bridge" || !strings.HasPrefix(err.Error(), "netplumb: bridge a-very-long-bridge-name:") {
			t.Fatalf("Install() = %v", err)
		}
		if ents, _ := os.ReadDir(c.ConfDir); len(ents) != 0 {
			t.Errorf("conf dir holds %d files", len(ents))
		}
	})

	t.Run("a plugin without the configured version is refused", func(t *testing.T) {
		c := DefaultConfig()
		c.ConfDir = t.TempDir()
		c.CNIVersion = "1.1.0" // newer than the Debian 12 plugins (1.1.1) support
		_, err := Install(ctx, c)
		if err == nil {
			t.Skip("the installed plugins support CNI 1.1.0")
		}
		if !strings.Contains(err.Error(), `does not support config version "1.1.0"`) {
			t.Fatalf("Install() = %v", err)
		}
	})

	t.Run("a file that sorts first is reported as shadowing ours", func(t *testing.T) {
		c := DefaultConfig()
		c.ConfDir = t.TempDir()
		other := filepath.Join(c.ConfDir, "05-other.conflist")
		if err := os.WriteFile(other, []byte(`{"cniVersion":"1.0.0","name":"other","plugins":[]}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.ConfDir, "00-notes.txt"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		path, err := Install(ctx, c)
		var se *ShadowedError
		if !errors.As(err, &se) || se.By != other || se.Path != path {
			t.Fatalf("Install() = %q, %v, want shadowed by %s", path, err, other)
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("the conflist was not written: %v", err)
		}
		if _, err := os.Stat(other); err != nil {
			t.Errorf("the other file was touched: %v", err)
		}
	})
}
