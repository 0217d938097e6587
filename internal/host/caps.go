package host

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Capabilities nodeguard cares about (capabilities(7)).
const (
	// CapSysAdmin (21) allows most BPF and cgroup operations on kernels
	// before CAP_BPF and CAP_PERFMON existed.
	CapSysAdmin = unix.CAP_SYS_ADMIN
	// CapSysResource (24) allows lowering oom_score_adj below the task's
	// minimum and PSI trigger windows shorter than 2 s.
	CapSysResource = unix.CAP_SYS_RESOURCE
	// CapPerfmon (38, Linux 5.8) allows attaching tracing BPF programs.
	CapPerfmon = unix.CAP_PERFMON
	// CapBPF (39, Linux 5.8) allows loading BPF programs and maps.
	CapBPF = unix.CAP_BPF
)

// lastCapFile holds the highest capability number the kernel knows.
const lastCapFile = "/proc/sys/kernel/cap_last_cap"

// HasCapability reports whether capability c is in this thread's effective
// set. A capability the kernel does not know (e.g. CapBPF before 5.8) gives
// false and an error matching ErrUnsupported.
//
// The set is relative to the thread's user namespace: root in a container's
// user namespace has every bit set, yet most checks that matter to nodeguard
// (BPF, oom_score_adj) are made against the initial namespace. One that is
// not is the PSI trigger window: the kernel tests the bit in the opener's
// credentials without looking at the namespace.
func HasCapability(c int) (bool, error) {
	if c < 0 || c > 63 {
		return false, fmt.Errorf("check capability %d: out of range 0..63", c)
	}
	if last, err := lastCap(); err == nil && c > last {
		return false, fmt.Errorf("check capability %d: %w: the kernel knows capabilities up to %d", c, ErrUnsupported, last)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3 carries 64 bits in two words
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false, fmt.Errorf("check capability %d: capget: %w", c, err)
	}
	return data[c/32].Effective&(1<<(uint(c)%32)) != 0, nil
}

// lastCap reads the highest capability the kernel knows. Its error is only
// used to skip the range check: capget itself stays authoritative.
func lastCap() (int, error) {
	b, err := os.ReadFile(lastCapFile)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}
