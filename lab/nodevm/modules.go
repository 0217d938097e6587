package nodevm

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/nodeguard/nodeguard/lab/vmtest"
)

// moduleTrees are the parts of the kernel's module tree (relative to
// lib/modules/<release>/) that the root filesystem gets: file systems
// (overlay, ext4), networking (bridge, veth's netfilter, nf_tables,
// iptables' xt modules), crypto and library helpers, and the virtio, block
// and char drivers of a microvm. Hardware drivers (gpu, media, sound, scsi,
// usb, ethernet, wireless: 70 of the 100 MB) are left out.
var moduleTrees = []string{
	"kernel/arch/", "kernel/block/", "kernel/crypto/", "kernel/fs/", "kernel/kernel/",
	"kernel/lib/", "kernel/mm/", "kernel/net/", "kernel/security/", "kernel/virt/",
	"kernel/drivers/block/", "kernel/drivers/char/", "kernel/drivers/virtio/",
	"kernel/drivers/net/vxlan/",
}

// keepModuleFile reports whether rel, a path relative to
// lib/modules/<release>/ in the kernel package, goes into the root
// filesystem: depmod's inputs (modules.order, modules.builtin*), the
// trees above, and the virtual network drivers directly in
// kernel/drivers/net (veth, dummy, macvlan, ipvlan, ...).
func keepModuleFile(rel string) bool {
	if !strings.Contains(rel, "/") {
		return strings.HasPrefix(rel, "modules.")
	}
	for _, t := range moduleTrees {
		if strings.HasPrefix(rel, t) {
			return true
		}
	}
	return path.Dir(rel) == "kernel/drivers/net"
}

// extractModules writes the kept module files of release from the kernel
// package deb into modDir (the root filesystem's lib/modules/<release>) and
// returns how many it wrote.
func extractModules(ctx context.Context, deb, release, modDir string) (int, error) {
	prefix := "lib/modules/" + release + "/"
	n := 0
	err := vmtest.WalkDebData(ctx, deb, func(h *tar.Header, r io.Reader) error {
		rel, ok := strings.CutPrefix(h.Name, prefix)
		if !ok || rel == "" || h.Typeflag != tar.TypeReg || !keepModuleFile(rel) {
			return nil
		}
		if path.Clean(rel) != rel || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("extract modules of %s: bad entry %q", deb, h.Name)
		}
		dst := filepath.Join(modDir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("extract modules: %w", err)
		}
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("extract modules: %w", err)
		}
		_, err = io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", rel, err)
		}
		n++
		return nil
	})
	if err != nil {
		return n, err
	}
	if n == 0 {
		return 0, fmt.Errorf("extract modules: %s has no files under %s", deb, prefix)
	}
	return n, nil
}

// ModuleName is the kernel's name of a module file:
// "kernel/fs/ext4/ext4.ko.xz" is ext4, "crc32c-generic.ko" crc32c_generic.
func ModuleName(file string) string {
	base := path.Base(file)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// ModulesDep is depmod's modules.dep: each module's file and the files of
// the modules it needs.
type ModulesDep struct {
	files map[string]string   // name -> file
	deps  map[string][]string // name -> names of its dependencies
}

// ParseModulesDep parses modules.dep ("kernel/fs/ext4/ext4.ko.xz:
// kernel/lib/crc16.ko.xz kernel/fs/mbcache.ko.xz ...").
func ParseModulesDep(b []byte) (*ModulesDep, error) {
	m := &ModulesDep{files: map[string]string{}, deps: map[string][]string{}}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		file, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.Contains(file, ".ko") {
			return nil, fmt.Errorf("parse modules.dep line %d: %q is not \"<module>: <deps>\"", n, line)
		}
		name := ModuleName(file)
		m.files[name] = file
		for _, d := range strings.Fields(rest) {
			m.deps[name] = append(m.deps[name], ModuleName(d))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse modules.dep: %w", err)
	}
	if len(m.files) == 0 {
		return nil, errors.New("parse modules.dep: no modules")
	}
	return m, nil
}

// LoadOrder returns wanted with every dependency they have, each module
// after the ones it needs (for insmod, which resolves nothing), and each
// with its file. Modules of wanted that modules.dep lacks are an error: the
// kernel has them built in or not at all, and the initrd would fail.
func (m *ModulesDep) LoadOrder(wanted []string) (names, files []string, err error) {
	done := map[string]bool{}
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		if done[name] {
			return nil
		}
		for _, c := range chain {
			if c == name {
				return fmt.Errorf("order modules: dependency cycle %s -> %s", strings.Join(chain, " -> "), name)
			}
		}
		file, ok := m.files[name]
		if !ok {
			return fmt.Errorf("order modules: %s is not in modules.dep (built in, or missing from this kernel)", name)
		}
		for _, d := range m.deps[name] {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		done[name] = true
		names = append(names, name)
		files = append(files, file)
		return nil
	}
	for _, w := range wanted {
		if err := visit(w, nil); err != nil {
			return nil, nil, err
		}
	}
	return names, files, nil
}

// readModule returns a module file's contents uncompressed, for insmod
// (busybox's does not decompress): .ko as is, .ko.xz through xz, .ko.zst
// through zstd.
func readModule(ctx context.Context, file string) ([]byte, error) {
	var tool []string
	switch {
	case strings.HasSuffix(file, ".ko"):
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read module: %w", err)
		}
		return b, nil
	case strings.HasSuffix(file, ".ko.xz"):
		tool = []string{"xz", "-dc", file}
	case strings.HasSuffix(file, ".ko.zst"):
		tool = []string{"zstd", "-dcq", file}
	default:
		return nil, fmt.Errorf("read module %s: unknown compression", file)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, tool[0], tool[1:]...)
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", strings.Join(tool, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return b, nil
}
