package host

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// BTFPath is where the kernel exposes its own BTF type information, which
// CO-RE BPF programs need.
const BTFPath = "/sys/kernel/btf/vmlinux"

// KernelRelease returns the running kernel's release, e.g. "6.18.44".
func KernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// BTF reports whether the kernel exposes its BTF, and where: BTFPath when
// present (a non-empty regular file), "" when not.
func BTF() (present bool, path string) {
	return btfAt(BTFPath)
}

func btfAt(p string) (bool, string) {
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return false, ""
	}
	return true, p
}

// IsRoot reports whether the effective user id is 0. Root is not the same as
// capable: check HasCapability for what an operation really needs.
func IsRoot() bool { return os.Geteuid() == 0 }
