// Package testbin builds the nodeguard command once per test binary, for
// the tests that drive the agent as its users do: through the command.
//
// A test package calls Main from its TestMain, so that the directory the
// binary is built into is removed when the tests end, and Nodeguard from
// each test that needs the binary.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Command is the import path of the nodeguard command.
const Command = "github.com/nodeguard/nodeguard/cmd/nodeguard"

var (
	dir   string
	once  sync.Once
	built string
	err   error
)

// Main runs m with a temporary directory for the binary and the tests'
// own files (Dir), removes it, and exits with m's status.
func Main(m *testing.M) {
	d, err := os.MkdirTemp("", "nodeguard-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

// Dir is the directory Main made; empty without Main.
func Dir() string { return dir }

// Nodeguard builds the command once (go build) and returns its path. It
// fails t when the build fails or Main was not called.
func Nodeguard(t testing.TB) string {
	t.Helper()
	once.Do(func() {
		if dir == "" {
			err = fmt.Errorf("testbin.Nodeguard: call testbin.Main from TestMain first")
			return
		}
		built = filepath.Join(dir, "nodeguard")
		if out, berr := exec.Command("go", "build", "-o", built, Command).CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build %s: %v\n%s", Command, berr, out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return built
}
