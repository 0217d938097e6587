package netplumb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
)

// confExtensions are the file names containerd (go-cni) and CRI-O load
// from the configuration directory, in lexical order of the whole name.
var confExtensions = []string{".conf", ".conflist", ".json"}

// Install renders c's conflist, checks it with libcni (every plugin binary,
// the IPAM one included, is found in BinDirs and supports CNIVersion), and
// writes it to ConfFile(c) atomically: a temporary file in ConfDir, synced,
// renamed over the old one, and the directory synced. It returns the
// path. An unchanged file is not rewritten, so a runtime watching ConfDir
// does not reload for nothing. Other files in ConfDir are left alone.
//
// Errors name the bad field (*ConfigError) or the missing plugin
// (*PluginNotFoundError). If another configuration sorts before
// nodeguard's, the file is written and the returned error is a
// *ShadowedError: the runtime will use the other network.
func Install(ctx context.Context, c Config) (string, error) {
	c = c.WithDefaults()
	list, err := loadList(c)
	if err != nil {
		return "", err
	}
	if err := validateList(ctx, c, list); err != nil {
		return "", err
	}
	path := ConfFile(c)
	if err := writeAtomic(path, list.Bytes, 0o644); err != nil {
		return "", err
	}
	files, err := libcni.ConfFiles(c.ConfDir, confExtensions)
	if err != nil {
		return path, fmt.Errorf("netplumb: list %s: %w", c.ConfDir, err)
	}
	// The runtimes sort the paths and take the first; so do we.
	first := path
	for _, f := range files {
		if f < first {
			first = f
		}
	}
	if first != path {
		return path, &ShadowedError{Path: path, By: first}
	}
	return path, nil
}

// loadList renders c and parses it back with libcni, as the runtime will.
func loadList(c Config) (*libcni.NetworkConfigList, error) {
	b, err := Render(c)
	if err != nil {
		return nil, err
	}
	list, err := libcni.NetworkConfFromBytes(b)
	if err != nil {
		return nil, fmt.Errorf("netplumb: parse rendered conflist %s: %w", c.Name, err)
	}
	return list, nil
}

// validateList finds every plugin c needs and asks each for its supported
// versions. The plugins are only run with the VERSION command, which does
// no networking.
func validateList(ctx context.Context, c Config, list *libcni.NetworkConfigList) error {
	for _, p := range pluginTypes(c) {
		if _, err := findPlugin(p, c.BinDirs); err != nil {
			return err
		}
	}
	cni := newCNI(c)
	if _, err := cni.ValidateNetworkList(ctx, list); err != nil {
		return fmt.Errorf("netplumb: validate network %s (cniVersion %s) with the plugins in %v: %w", c.Name, c.CNIVersion, c.BinDirs, err)
	}
	return nil
}

// newCNI returns libcni for c: plugins searched in BinDirs, results cached
// in CacheDir. The executor is given explicitly: libcni sets a missing one
// lazily, unsynchronized, which races when calls run concurrently.
func newCNI(c Config) *libcni.CNIConfig {
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	return libcni.NewCNIConfigWithCacheDir(c.BinDirs, c.CacheDir, exec)
}

// findPlugin returns the first executable regular file named name in dirs.
func findPlugin(name string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		fi, err := os.Stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("netplumb: look for CNI plugin %q: %w", name, err)
		}
	}
	return "", &PluginNotFoundError{Plugin: name, Dirs: dirs}
}

// writeAtomic replaces path with data through a temporary file in the same
// directory, unless path already holds exactly data. The temporary name
// starts with a dot and has no configuration extension, so a runtime
// listing the directory never loads a half-written file.
func writeAtomic(path string, data []byte, perm fs.FileMode) (retErr error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("netplumb: create %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("netplumb: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("netplumb: write %s: %w", tmp, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("netplumb: chmod %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("netplumb: sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("netplumb: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("netplumb: rename %s to %s: %w", tmp, path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("netplumb: open %s to sync it: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("netplumb: sync %s: %w", dir, err)
	}
	return nil
}
