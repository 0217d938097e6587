package cgstat

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// hogEnv makes the re-executed test binary a memory hog instead of running
// tests: it maps and touches that many MiB of anonymous memory, prints
// "ready", and holds the memory until its stdin closes (at most hogHold).
const hogEnv = "NODEGUARD_CGSTAT_HOG_MIB"

const (
	// hogHold bounds how long a hog lives if the test never closes its
	// stdin.
	hogHold = 60 * time.Second
	// hogReady bounds how long a test waits for a hog to touch its
	// memory; 32 MiB takes milliseconds.
	hogReady = 10 * time.Second
	// hogExit bounds how long a test waits for a hog to exit.
	hogExit = 10 * time.Second
)

func TestMain(m *testing.M) {
	if v := os.Getenv(hogEnv); v != "" {
		os.Exit(runHog(v))
	}
	os.Exit(m.Run())
}

func runHog(spec string) int {
	mib, err := strconv.Atoi(spec)
	if err != nil || mib <= 0 {
		fmt.Fprintf(os.Stderr, "hog: bad %s=%q\n", hogEnv, spec)
		return 2
	}
	mem, err := unix.Mmap(-1, 0, mib<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Fprintf(os.Stderr, "hog: mmap: %v\n", err)
		return 1
	}
	page := os.Getpagesize()
	for i := 0; i < len(mem); i += page {
		mem[i] = 1
	}
	fmt.Println("ready")
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(hogHold):
	}
	runtime.KeepAlive(mem)
	return 0
}

// hog is a running memory hog.
type hog struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan error
	done  chan error
}

// startHog starts a hog of mib MiB in sb. It does not wait for it to be
// ready.
func startHog(t *testing.T, sb *cgtest.Sandbox, mib int) *hog {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hogEnv+"="+strconv.Itoa(mib))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Start(t, cmd); err != nil {
		t.Fatal(err)
	}
	h := &hog{cmd: cmd, stdin: stdin, ready: make(chan error, 1), done: make(chan error, 1)}
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		switch {
		case err != nil:
			h.ready <- fmt.Errorf("hog exited before it was ready: %w", err)
		case line != "ready\n":
			h.ready <- fmt.Errorf("hog said %q", line)
		default:
			h.ready <- nil
		}
		_, _ = io.Copy(io.Discard, stdout)
		h.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		h.stdin.Close()
		select {
		case <-h.done:
		case <-time.After(hogExit):
			// The sandbox's cleanup kills it.
			t.Errorf("hog %d did not exit within %v", cmd.Process.Pid, hogExit)
		}
	})
	return h
}

// waitReady waits until the hog has touched all its memory.
func (h *hog) waitReady(t *testing.T) {
	t.Helper()
	select {
	case err := <-h.ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hogReady):
		t.Fatalf("hog not ready within %v", hogReady)
	}
}

// wait waits for the hog to exit and returns how it ended.
func (h *hog) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-h.done:
		h.done <- err // for the cleanup
		return err
	case <-time.After(hogExit):
		t.Fatalf("hog did not exit within %v", hogExit)
		return nil
	}
}
