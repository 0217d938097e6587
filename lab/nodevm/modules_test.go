package nodevm

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/lab/vmtest"
)

func TestKeepModuleFile(t *testing.T) {
	tests := map[string]bool{
		"modules.order":                                         true,
		"modules.builtin":                                       true,
		"modules.builtin.modinfo":                               true,
		"kernel/fs/ext4/ext4.ko.xz":                             true,
		"kernel/fs/overlayfs/overlay.ko.xz":                     true,
		"kernel/net/bridge/br_netfilter.ko.xz":                  true,
		"kernel/net/netfilter/xt_conntrack.ko.xz":               true,
		"kernel/drivers/net/veth.ko.xz":                         true,
		"kernel/drivers/net/vxlan/vxlan.ko.xz":                  true,
		"kernel/drivers/virtio/virtio_mmio.ko.xz":               true,
		"kernel/drivers/block/virtio_blk.ko.xz":                 true,
		"kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko.xz": false,
		"kernel/drivers/net/wireless/ath/ath.ko.xz":             false,
		"kernel/drivers/gpu/drm/drm.ko.xz":                      false,
		"kernel/sound/core/snd.ko.xz":                           false,
		"README":                                                false,
	}
	for rel, want := range tests {
		if got := keepModuleFile(rel); got != want {
			t.Errorf("keepModuleFile(%q) = %v, want %v", rel, got, want)
		}
	}
}

func TestModuleName(t *testing.T) {
	for file, want := range map[string]string{
		"kernel/fs/ext4/ext4.ko.xz":              "ext4",
		"kernel/crypto/crc32c-generic.ko":        "crc32c_generic",
		"kernel/drivers/block/virtio_blk.ko.zst": "virtio_blk",
	} {
		if got := ModuleName(file); got != want {
			t.Errorf("ModuleName(%q) = %q, want %q", file, got, want)
		}
	}
}

// modulesDep is the part of the 6.12 guest's modules.dep the initrd needs.
const modulesDep = `kernel/fs/ext4/ext4.ko.xz: kernel/lib/crc16.ko.xz kernel/fs/mbcache.ko.xz kernel/fs/jbd2/jbd2.ko.xz
kernel/fs/jbd2/jbd2.ko.xz:
kernel/fs/mbcache.ko.xz:
kernel/lib/crc16.ko.xz:
kernel/crypto/crc32c_generic.ko.xz:
kernel/drivers/block/virtio_blk.ko.xz:
kernel/drivers/virtio/virtio_mmio.ko.xz:
kernel/net/bridge/br_netfilter.ko.xz: kernel/net/bridge/bridge.ko.xz kernel/net/802/stp.ko.xz kernel/net/llc/llc.ko.xz
kernel/net/bridge/bridge.ko.xz: kernel/net/802/stp.ko.xz kernel/net/llc/llc.ko.xz
kernel/net/802/stp.ko.xz: kernel/net/llc/llc.ko.xz
kernel/net/llc/llc.ko.xz:
`

func TestLoadOrder(t *testing.T) {
	md, err := ParseModulesDep([]byte(modulesDep))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("the initrd's modules load after their dependencies", func(t *testing.T) {
		names, files, err := md.LoadOrder(initrdModulesWanted)
		if err != nil {
			t.Fatal(err)
		}
		if len(names) != len(initrdModulesWanted) || len(files) != len(names) {
			t.Fatalf("names %q files %q", names, files)
		}
		assertBefore(t, names, "jbd2", "ext4")
		assertBefore(t, names, "mbcache", "ext4")
		assertBefore(t, names, "crc16", "ext4")
		if files[slices.Index(names, "ext4")] != "kernel/fs/ext4/ext4.ko.xz" {
			t.Errorf("files %q", files)
		}
	})
	t.Run("a dependency not asked for is added before its user", func(t *testing.T) {
		names, _, err := md.LoadOrder([]string{"br_netfilter"})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(names, []string{"llc", "stp", "bridge", "br_netfilter"}) {
			t.Errorf("order %q", names)
		}
	})
	t.Run("a module modules.dep lacks is an error", func(t *testing.T) {
		if _, _, err := md.LoadOrder([]string{"virtio_pci"}); err == nil {
			t.Error("no error")
		}
	})
	t.Run("a cycle is an error", func(t *testing.T) {
		c, err := ParseModulesDep([]byte("a.ko: b.ko\nb.ko: a.ko\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.LoadOrder([]string{"a"}); err == nil || !strings.Contains(err.Error(), "cycle") {
			t.Errorf("err = %v", err)
		}
	})
	for _, bad := range []string{"", "no colon here\n", "notamodule: x\n"} {
		if _, err := ParseModulesDep([]byte(bad)); err == nil {
			t.Errorf("ParseModulesDep(%q) gave no error", bad)
		}
	}
}

func assertBefore(t *testing.T, order []string, a, b string) {
	t.Helper()
	if i, j := slices.Index(order, a), slices.Index(order, b); i < 0 || j < 0 || i > j {
		t.Errorf("%s does not load before %s: %q", a, b, order)
	}
}

// needBusybox skips unless the static busybox the initrd needs is here
// (busybox-static; the VM lanes install it).
func needBusybox(t *testing.T) {
	t.Helper()
	if err := vmtest.CheckStatic(vmtest.Busybox); err != nil {
		t.Skipf("no static %s: %v", vmtest.Busybox, err)
	}
}

// cpioEntry is one entry of a newc archive, as the kernel would unpack it.
type cpioEntry struct {
	name string
	mode uint32
	ino  uint32
	data []byte
}

// readCPIO parses a newc archive up to its trailer.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	r := bytes.NewReader(b)
	off := 0
	pad := func() {
		for off%4 != 0 {
			_, _ = r.ReadByte()
			off++
		}
	}
	field := func(h []byte, i int) uint32 {
		v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("bad header field: %v", err)
		}
		return uint32(v)
	}
	for {
		h := make([]byte, 110)
		if _, err := io.ReadFull(r, h); err != nil {
			t.Fatalf("read header: %v", err)
		}
		off += 110
		if string(h[:6]) != "070701" {
			t.Fatalf("magic %q", h[:6])
		}
		name := make([]byte, field(h, 11))
		io.ReadFull(r, name)
		off += len(name)
		pad()
		data := make([]byte, field(h, 6))
		io.ReadFull(r, data)
		off += len(data)
		pad()
		e := cpioEntry{name: string(bytes.TrimRight(name, "\x00")), mode: field(h, 1), ino: field(h, 0), data: data}
		if e.name == "TRAILER!!!" {
			return out
		}
		out = append(out, e)
	}
}

func TestWriteInitrd(t *testing.T) {
	needBusybox(t)
	var buf bytes.Buffer
	mods := []InitrdModule{{Name: "jbd2", Data: []byte("\x7fELF jbd2")}, {Name: "ext4", Data: []byte("\x7fELF ext4")}}
	if err := WriteInitrd(&buf, vmtest.Busybox, mods); err != nil {
		t.Fatal(err)
	}
	entries := readCPIO(t, buf.Bytes())
	by := map[string]cpioEntry{}
	for _, e := range entries {
		by[e.name] = e
	}
	if e := by["init"]; e.mode&0o111 == 0 || string(e.data) != initrdInit {
		t.Errorf("init: mode %o", e.mode)
	}
	if got := string(by["modules"].data); got != "jbd2\next4\n" {
		t.Errorf("modules lists %q, want the load order", got)
	}
	if string(by["lib/modules/ext4.ko"].data) != "\x7fELF ext4" {
		t.Errorf("ext4.ko = %q", by["lib/modules/ext4.ko"].data)
	}
	bb := by["bin/busybox"]
	for _, a := range initrdApplets {
		e, ok := by["bin/"+a]
		if !ok || e.ino != bb.ino {
			t.Errorf("bin/%s is not a hard link of bin/busybox (%v, ino %d vs %d)", a, ok, e.ino, bb.ino)
		}
	}
	for _, a := range []string{"insmod", "switch_root", "mount"} {
		if !slices.Contains(initrdApplets, a) {
			t.Errorf("the initrd lacks %s", a)
		}
	}
	t.Run("no modules is an error", func(t *testing.T) {
		if err := WriteInitrd(io.Discard, vmtest.Busybox, nil); err == nil {
			t.Error("no error")
		}
	})
	t.Run("a module name with a slash is an error", func(t *testing.T) {
		if err := WriteInitrd(io.Discard, vmtest.Busybox, []InitrdModule{{Name: "../x"}}); err == nil {
			t.Error("no error")
		}
	})
	t.Run("a dynamic busybox is refused", func(t *testing.T) {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		if vmtest.CheckStatic(self) == nil {
			t.Skip("this test binary is static")
		}
		if err := WriteInitrd(io.Discard, self, mods); !errors.Is(err, vmtest.ErrNotStatic) {
			t.Errorf("err = %v, want ErrNotStatic", err)
		}
	})
}

func TestReadModule(t *testing.T) {
	dir := t.TempDir()
	plain := dir + "/a.ko"
	if err := os.WriteFile(plain, []byte("module"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := readModule(t.Context(), plain); err != nil || string(b) != "module" {
		t.Errorf("plain: %q, %v", b, err)
	}
	if _, err := exec.LookPath("xz"); err != nil {
		t.Skip("no xz here")
	}
	xz, err := exec.Command("sh", "-c", "printf module | xz -c").Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/b.ko.xz", xz, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := readModule(t.Context(), dir+"/b.ko.xz"); err != nil || string(b) != "module" {
		t.Errorf("xz: %q, %v", b, err)
	}
	if _, err := readModule(t.Context(), dir+"/c.ko.gz"); err == nil {
		t.Error("unknown compression: no error")
	}
}
