package cgtest

import (
	"fmt"
	"os"
	"testing"
)

// EnvRequirePrivileged names the environment variable that turns skips for
// missing privileges or features into failures when set to "1".
const EnvRequirePrivileged = "NODEGUARD_REQUIRE_PRIVILEGED"

// RequirePrivileged skips t when the process is not root, or fails it when
// EnvRequirePrivileged is "1".
func RequirePrivileged(t testing.TB) {
	t.Helper()
	if euid := os.Geteuid(); euid != 0 {
		skipOrFail(t, fmt.Sprintf("needs root, running as euid %d", euid))
	}
}

// Need skips t with reason when ok is false, or fails it when
// EnvRequirePrivileged is "1". Use it for a feature that should exist on the
// test machines: on CI its absence is a failure, not a skip.
func Need(t testing.TB, ok bool, reason string) {
	t.Helper()
	if !ok {
		skipOrFail(t, reason)
	}
}

func skipOrFail(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(EnvRequirePrivileged) == "1" {
		t.Fatalf("%s (%s=1 turns this skip into a failure)", reason, EnvRequirePrivileged)
		return
	}
	t.Skipf("%s (set %s=1 to fail instead)", reason, EnvRequirePrivileged)
}
