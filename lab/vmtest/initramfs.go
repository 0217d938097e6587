package vmtest

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// Guest paths of the per-run files that RunArchive adds and initScript
// reads.
const (
	guestRunDir    = "/vmtest"
	guestRunScript = "/vmtest/run"    // sets the environment, cds, execs the test
	guestMarker    = "/vmtest/marker" // the exit marker's prefix, one line
)

// ExitMarkerPrefix starts the line the guest prints after the test binary
// exits: "<prefix>-<nonce>=<exit status>". The nonce is new for every run, so
// a test cannot end the run early by printing a look-alike.
const ExitMarkerPrefix = "NODEGUARD-VM-EXIT"

// busyboxApplets returns the paths busybox installs its applets at
// (bin/sh, bin/sleep, usr/bin/timeout, ...), from `busybox --list-full`.
func busyboxApplets(busybox string) ([]string, error) {
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %w", err)
	}
	var paths []string
	for _, l := range strings.Fields(string(out)) {
		if p, err := cleanArchivePath(l); err == nil && p != "bin/busybox" {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 || !slices.Contains(paths, "bin/sh") {
		return nil, fmt.Errorf("list busybox applets: %s has no sh applet", busybox)
	}
	sort.Strings(paths)
	return paths, nil
}

// initScript is /init, PID 1 of the guest. It makes the guest look like a
// pure cgroup v2 host (systemd's mount options, every controller enabled for
// the root's children), runs /vmtest/run with its output on the test
// channel, prints the exit marker there and powers off. Its own messages go
// to the kernel console; every per-run value is read from /vmtest.
const initScript = `#!/bin/sh
# nodeguard VM lane: PID 1 of a throwaway test VM (see lab/vmtest).
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TMPDIR=/tmp
say() { echo "vmtest-init: $*" >/dev/console; }
fail() { say "$*"; reboot -f; }

mount -t proc -o nosuid,nodev,noexec proc /proc || fail "mount proc"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || fail "mount sysfs"
mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev || fail "mount devtmpfs"
mkdir -p /dev/pts /dev/shm /dev/mqueue
mount -t devpts -o nosuid,noexec,gid=5,mode=620,ptmxmode=000 devpts /dev/pts
mount -t tmpfs -o nosuid,nodev tmpfs /dev/shm
mount -t mqueue -o nosuid,nodev,noexec mqueue /dev/mqueue
# /tmp stays on the initramfs (already in RAM): a package directory under
# /tmp, packed there, must not be hidden by a mount.
mount -t tmpfs -o nosuid,nodev,mode=0755 tmpfs /run
mount -t cgroup2 -o nosuid,nodev,noexec,nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup ||
	mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup || fail "mount cgroup2"
mount -t bpf -o nosuid,nodev,noexec,mode=700 bpf /sys/fs/bpf || fail "mount bpffs"
# Neither tracefs nor debugfs: like a freshly booted machine, where nothing
# has mounted them yet, the code under test must mount tracefs itself
# (host.EnsureTracefs) before its first classic attach.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
ip link set lo up 2>/dev/null
hostname nodeguard-vm

# Controllers for the root's children: the test binary stays in the root
# cgroup (exempt from the no-internal-processes rule) and makes its
# sandboxes beneath it.
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
	echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control || say "enable controller $c failed"
done

out=/dev/console
if [ -c /dev/ttyS1 ]; then out=/dev/ttyS1; fi
stty -F "$out" raw -echo 2>/dev/null
marker=$(cat ` + guestMarker + `)
/bin/sh ` + guestRunScript + ` >"$out" 2>&1 </dev/null
rc=$?
printf '\n%s=%d\n' "$marker" "$rc" >"$out"
reboot -f
`

// guestMounts are the directories /init mounts file systems on.
var guestMounts = []string{"/proc", "/sys", "/dev", "/run"}

// etcFiles make user lookups (os/user without cgo reads these) work.
var etcFiles = []struct{ name, body string }{
	{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"},
	{"etc/group", "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n"},
	{"etc/hostname", "nodeguard-vm\n"},
	{"etc/hosts", "127.0.0.1 localhost nodeguard-vm\n::1 localhost\n"},
}

// BaseArchive writes the part of the initramfs that is the same for every
// run: directories, /etc, busybox hard-linked under every applet's name (a
// test that starts "sleep" sees a process whose /proc/PID/exe ends in
// "sleep", as on a real host; with symlinks it would be /bin/busybox), and
// /init.
func BaseArchive(w io.Writer, busybox string) error {
	if err := CheckStatic(busybox); err != nil {
		return err
	}
	f, err := os.Open(busybox)
	if err != nil {
		return fmt.Errorf("open busybox: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat busybox: %w", err)
	}
	c := NewCPIOWriter(w)
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "etc", "proc", "sys", "dev", "run", "root", "vmtest"} {
		if err := c.Dir(d, 0o755); err != nil {
			return err
		}
	}
	if err := c.Dir("tmp", 0o1777); err != nil {
		return err
	}
	for _, e := range etcFiles {
		if err := c.File(e.name, 0o644, int64(len(e.body)), strings.NewReader(e.body)); err != nil {
			return err
		}
	}
	applets, err := busyboxApplets(busybox)
	if err != nil {
		return err
	}
	if err := c.Links(append([]string{"bin/busybox"}, applets...), 0o755, st.Size(), f); err != nil {
		return err
	}
	if err := c.File("init", 0o755, int64(len(initScript)), strings.NewReader(initScript)); err != nil {
		return err
	}
	return c.Close()
}

// baseLayoutVersion changes whenever BaseArchive lays files out
// differently, to invalidate cached bases.
const baseLayoutVersion = 3

// BaseArchiveKey identifies a cached base archive: it changes with the init
// script, the archive layout and the busybox binary.
func BaseArchiveKey(busybox string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "layout:%d\ninit:%s\netc:%v\n", baseLayoutVersion, initScript, etcFiles)
	f, err := os.Open(busybox)
	if err != nil {
		return "", fmt.Errorf("open busybox: %w", err)
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read busybox: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// RunSpec is what one guest run executes.
type RunSpec struct {
	// Binary is the host path of the test binary; it must be statically
	// linked.
	Binary string
	// Args are the arguments after the binary.
	Args []string
	// Env holds the guest's extra environment, NAME=value.
	Env []string
	// Dir is the guest working directory; created if missing.
	Dir string
	// Testdata, when not empty, is a host directory packed as Dir/testdata.
	Testdata string
	// Marker is the exit marker's prefix (ExitMarkerPrefix-<nonce>).
	Marker string
}

// guestBinary is where the test binary lands in the guest.
func (s *RunSpec) guestBinary() string {
	return guestRunDir + "/" + filepath.Base(s.Binary)
}

// RunArchive writes the per-run part of the initramfs: the test binary, the
// package's testdata, the run script and the marker.
func RunArchive(w io.Writer, s *RunSpec) error {
	if err := CheckStatic(s.Binary); err != nil {
		return err
	}
	if !filepath.IsAbs(s.Dir) {
		return fmt.Errorf("write run archive: working directory %q is not absolute", s.Dir)
	}
	for _, m := range guestMounts {
		if s.Dir == m || strings.HasPrefix(s.Dir, m+"/") {
			return fmt.Errorf("write run archive: working directory %s is under %s, which the guest mounts over", s.Dir, m)
		}
	}
	c := NewCPIOWriter(w)
	if err := c.Dir(s.Dir, 0o755); err != nil {
		return err
	}
	if err := addFile(c, s.guestBinary(), s.Binary); err != nil {
		return err
	}
	if s.Testdata != "" {
		if err := addTree(c, filepath.Join(s.Dir, "testdata"), s.Testdata); err != nil {
			return err
		}
	}
	script := runScript(s)
	if err := c.File(guestRunScript, 0o755, int64(len(script)), strings.NewReader(script)); err != nil {
		return err
	}
	m := s.Marker + "\n"
	if err := c.File(guestMarker, 0o644, int64(len(m)), strings.NewReader(m)); err != nil {
		return err
	}
	return c.Close()
}

// runScript returns the shell script that runs the test in the guest.
func runScript(s *RunSpec) string {
	var b strings.Builder
	b.WriteString("# generated by vmtest for one run\n")
	env := append([]string(nil), s.Env...)
	sort.Strings(env)
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", name, ShellQuote(value))
	}
	fmt.Fprintf(&b, "cd %s || exit 125\n", ShellQuote(s.Dir))
	b.WriteString("exec " + ShellQuote(s.guestBinary()))
	for _, a := range s.Args {
		b.WriteString(" " + ShellQuote(a))
	}
	b.WriteString("\n")
	return b.String()
}

// ShellQuote quotes s for a POSIX shell.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func addFile(c *CPIOWriter, guest, host string) error {
	f, err := os.Open(host)
	if err != nil {
		return fmt.Errorf("add %s to initramfs: %w", host, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("add %s to initramfs: %w", host, err)
	}
	return c.File(guest, uint32(st.Mode().Perm()), st.Size(), f)
}

// addTree packs the host directory root as guest, keeping regular files,
// directories and symbolic links.
func addTree(c *CPIOWriter, guest, root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("pack %s: %w", root, err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return fmt.Errorf("pack %s: %w", root, err)
		}
		g := filepath.Join(guest, rel)
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("pack %s: %w", root, err)
		}
		switch {
		case d.IsDir():
			return c.Dir(g, uint32(info.Mode().Perm()))
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return fmt.Errorf("pack %s: %w", root, err)
			}
			return c.Symlink(g, target)
		case d.Type().IsRegular():
			return addFile(c, g, p)
		}
		return nil // sockets, fifos and devices have no place in testdata
	})
}

// ErrNotStatic reports a binary that needs a dynamic loader, which the guest
// does not have.
var ErrNotStatic = errors.New("binary is dynamically linked")

// CheckStatic returns an error matching ErrNotStatic when the ELF file at
// name has a program interpreter.
func CheckStatic(name string) error {
	f, err := elf.Open(name)
	if err != nil {
		return fmt.Errorf("read ELF %s: %w", name, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s: %w (the guest has no dynamic loader: build test binaries with CGO_ENABLED=0, as make test-vm does)", name, ErrNotStatic)
		}
	}
	return nil
}
