package cgtest

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/cgroups"
)

// EnvVMKernel is set (to the kernel series, e.g. "6.12") when the test
// binary runs inside the VM lane's guest (see lab/vmtest).
const EnvVMKernel = "NODEGUARD_VM_KERNEL"

// Lane names the lane this test binary runs in, for logs and skip reasons:
// "vm-v2" inside the VM lane (pure cgroup v2 on a Debian kernel), otherwise
// "host-" plus the host's cgroup mode: "host-hybrid" on the development and
// CI machines, "host-v2" or "host-v1" elsewhere. The suffix is "unknown"
// when the cgroup layout cannot be discovered.
func Lane() string {
	return lane(os.Getenv, cgroups.Discover)
}

func lane(getenv func(string) string, discover func() (*cgroups.Layout, error)) string {
	prefix := "host-"
	if getenv(EnvVMKernel) != "" {
		prefix = "vm-"
	}
	l, err := discover()
	if err != nil {
		return prefix + "unknown"
	}
	return prefix + l.Mode.String()
}

// RequireMode skips t unless the host's cgroup mode is one of modes, with a
// reason such as "needs cgroup mode v2; this lane is hybrid".
//
// Unlike RequirePrivileged and Need, the skip stands when
// NODEGUARD_REQUIRE_PRIVILEGED=1: a test that is only meaningful on pure v2
// legitimately skips in the hybrid host lane and runs in the VM lane, so CI
// (which sets the variable) is not failed by it. Only a host whose cgroups
// cannot be discovered at all is treated as a missing feature (skip, or
// fail under NODEGUARD_REQUIRE_PRIVILEGED=1); any other discovery error
// fails t.
func RequireMode(t testing.TB, modes ...cgroups.Mode) {
	t.Helper()
	requireMode(t, cgroups.Discover, modes...)
}

func requireMode(t testing.TB, discover func() (*cgroups.Layout, error), modes ...cgroups.Mode) {
	t.Helper()
	if len(modes) == 0 {
		t.Fatalf("cgtest: RequireMode needs at least one mode")
		return
	}
	names := make([]string, len(modes))
	for i, m := range modes {
		names[i] = m.String()
	}
	want := strings.Join(names, " or ")
	l, err := discover()
	if errors.Is(err, cgroups.ErrUnsupported) {
		skipOrFail(t, fmt.Sprintf("needs cgroup mode %s; this host has no usable cgroups: %v", want, err))
		return
	}
	if err != nil {
		t.Fatalf("cgtest: discover cgroup mode: %v", err)
		return
	}
	if slices.Contains(modes, l.Mode) {
		return
	}
	t.Skipf("needs cgroup mode %s; this lane is %s", want, l.Mode)
}
