package nodevm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nodeguard/nodeguard/lab/vmtest"
)

// initrdApplets are the busybox applets /init uses, hard-linked in bin/.
var initrdApplets = []string{"sh", "cat", "mount", "umount", "insmod", "switch_root", "sleep", "reboot", "mkdir"}

// initrdInit is the initrd's /init (busybox sh, PID 1): it loads the root
// disk's drivers listed in /modules (dependencies first), waits for the
// root= device, mounts it read-write and hands PID 1 to systemd. A failure
// prints a "nodelane-initrd:" line on the console and ends the guest
// (panic=-1 and -no-reboot turn the reboot into qemu's exit).
const initrdInit = `#!/bin/sh
# nodeguard node lane: PID 1 of the initrd (see lab/nodelane).
export PATH=/bin
say() { echo "nodelane-initrd: $*" >/dev/console; }
fail() { say "$*"; reboot -f; sleep 5; }
mount -t proc -o nosuid,nodev,noexec proc /proc || fail "mount proc"
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys || fail "mount sysfs"
mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev || fail "mount devtmpfs"
root=/dev/vda
for arg in $(cat /proc/cmdline); do
	case "$arg" in root=*) root=${arg#root=} ;; esac
done
for m in $(cat /modules); do
	insmod "/lib/modules/$m.ko" || fail "insmod $m"
done
i=0
while [ ! -b "$root" ]; do
	[ "$i" -ge 200 ] && fail "no $root 20 s after loading the drivers"
	sleep 0.1
	i=$((i + 1))
done
mkdir -p /newroot
mount -t ext4 -o rw,relatime "$root" /newroot || fail "mount $root"
[ -x /newroot/lib/systemd/systemd ] || fail "$root has no /lib/systemd/systemd"
umount /proc /sys
mount --move /dev /newroot/dev || fail "move /dev"
exec switch_root /newroot /lib/systemd/systemd
`

// initrdLayoutVersion changes whenever WriteInitrd lays files out
// differently, to invalidate cached initrds.
const initrdLayoutVersion = 1

// InitrdModule is one kernel module of the initrd, uncompressed.
type InitrdModule struct {
	Name string
	Data []byte
}

// WriteInitrd writes the initrd as a newc archive: busybox (the static
// binary at busybox) hard-linked under the applets /init uses, /init, the
// modules in lib/modules/<name>.ko and their load order in /modules.
func WriteInitrd(w io.Writer, busybox string, modules []InitrdModule) error {
	if err := vmtest.CheckStatic(busybox); err != nil {
		return err
	}
	if len(modules) == 0 {
		return fmt.Errorf("write initrd: no modules")
	}
	f, err := os.Open(busybox)
	if err != nil {
		return fmt.Errorf("write initrd: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("write initrd: %w", err)
	}
	c := vmtest.NewCPIOWriter(w)
	for _, d := range []string{"bin", "dev", "proc", "sys", "newroot", "lib/modules"} {
		if err := c.Dir(d, 0o755); err != nil {
			return err
		}
	}
	names := []string{"bin/busybox"}
	for _, a := range initrdApplets {
		names = append(names, "bin/"+a)
	}
	if err := c.Links(names, 0o755, st.Size(), f); err != nil {
		return err
	}
	order := make([]string, len(modules))
	for i, m := range modules {
		if m.Name == "" || strings.ContainsAny(m.Name, "/ \n") {
			return fmt.Errorf("write initrd: bad module name %q", m.Name)
		}
		order[i] = m.Name
		if err := c.File("lib/modules/"+m.Name+".ko", 0o644, int64(len(m.Data)), bytes.NewReader(m.Data)); err != nil {
			return err
		}
	}
	list := strings.Join(order, "\n") + "\n"
	if err := c.File("modules", 0o644, int64(len(list)), strings.NewReader(list)); err != nil {
		return err
	}
	if err := c.File("init", 0o755, int64(len(initrdInit)), strings.NewReader(initrdInit)); err != nil {
		return err
	}
	return c.Close()
}
