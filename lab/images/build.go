package images

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// outputTail is how much of a failed build's output its error carries; the
// rest is in the build's log file.
const outputTail = 2 << 10

// BuildError is a go build of one of the images' programs that failed. It
// says why when the build did not fail by itself (its context ended: a
// timeout or the caller shutting down; or a signal from outside killed it)
// and names the file that has the build's whole output.
type BuildError struct {
	// Program is the program built: "pause", "grpchealth" or "hog".
	Program string
	// Log is the file with the build's output.
	Log string
	// Elapsed is how long the build ran.
	Elapsed time.Duration
	// Reason says why the build stopped when the compiler did not stop
	// it: empty for an ordinary compile error.
	Reason string
	// Output is the end of the build's output.
	Output string
	// Err is the go command's error (an *exec.ExitError, or the error
	// starting it).
	Err error
	// Cause is context.Cause of the build's context when it had ended.
	Cause error
}

func (e *BuildError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "go build %s: %v after %s", e.Program, e.Err, e.Elapsed.Round(100*time.Millisecond))
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if e.Output != "" {
		b.WriteString(": " + e.Output)
	}
	if e.Log != "" {
		b.WriteString(" (build output: " + e.Log + ")")
	}
	return b.String()
}

// Unwrap returns the go command's error and the context's cause, so that
// errors.Is(err, context.DeadlineExceeded) tells a timeout.
func (e *BuildError) Unwrap() []error {
	if e.Cause != nil {
		return []error{e.Err, e.Cause}
	}
	return []error{e.Err}
}

// compileGo builds a one-file, standard-library-only program in a
// temporary module with CGO_ENABLED=0 and returns the binary, checked to be
// static. The go command's output is appended to logPath; with logPath
// empty it goes to a temporary file that is removed when the build
// succeeds and named in the error when it fails. A cold build cache makes
// this compile the standard library: about a minute per program on two
// loaded cores instead of a second.
func compileGo(ctx context.Context, goBin, name string, source []byte, logPath string) (_ []byte, retErr error) {
	logFile, err := openBuildLog(logPath, name)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", name, err)
	}
	keep := logPath != ""
	defer func() {
		logFile.Close()
		if retErr == nil && !keep {
			os.Remove(logFile.Name())
		}
	}()

	tmp, err := os.MkdirTemp("", "nodeguard-"+name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "main.go"), source, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte(fmt.Sprintf(goMod, name)), 0o644); err != nil {
		return nil, err
	}
	out := filepath.Join(tmp, name)
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid=", "-o", out, ".")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH,
		"GOTOOLCHAIN=local", "GOFLAGS=", "GOWORK=off", "GOPROXY=off")
	// go build runs the compiler and linker as its children: stop the
	// whole group, or they outlive a cancelled build.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	tail := &tailBuffer{max: outputTail}
	cmd.Stdout = io.MultiWriter(logFile, tail)
	cmd.Stderr = cmd.Stdout
	fmt.Fprintf(logFile, "== %s: %s build %s (CGO_ENABLED=0, in %s)\n", time.Now().Format(time.RFC3339), goBin, name, tmp)
	start := time.Now()
	if err := cmd.Run(); err != nil {
		be := &BuildError{Program: name, Log: logFile.Name(), Elapsed: time.Since(start),
			Output: string(bytes.TrimSpace(tail.Bytes())), Err: err}
		be.Reason, be.Cause = stopReason(ctx, err, start)
		fmt.Fprintf(logFile, "== failed: %v\n", be)
		keep = true
		return nil, be
	}
	fmt.Fprintf(logFile, "== built %s in %s\n", name, time.Since(start).Round(time.Millisecond))
	if err := CheckStatic(out); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// openBuildLog opens path for appending, or a new temporary file when path
// is empty.
func openBuildLog(path, name string) (*os.File, error) {
	if path == "" {
		return os.CreateTemp("", "nodeguard-"+name+"-build-*.log")
	}
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
}

// stopReason says why a build that failed with err was stopped, when the
// compiler did not stop it: its context's deadline (a timeout, and when it
// was set to fall), its context's cancellation (the caller giving up or
// shutting down: not a timeout), or a signal from outside nodeguard.
func stopReason(ctx context.Context, err error, start time.Time) (string, error) {
	switch ctxErr := ctx.Err(); {
	case errors.Is(ctxErr, context.DeadlineExceeded):
		reason := "stopped by its caller's timeout (context deadline exceeded)"
		if d, ok := ctx.Deadline(); ok {
			reason = fmt.Sprintf("stopped by its caller's timeout (context deadline exceeded: the deadline fell %s after the build began)",
				d.Sub(start).Round(100*time.Millisecond))
		}
		return reason, context.Cause(ctx)
	case ctxErr != nil:
		cause := context.Cause(ctx)
		return fmt.Sprintf("stopped because its caller was cancelled (%v), not a timeout: the process that needed the images gave up or was shutting down", cause), cause
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("killed by a signal (%v) from outside nodeguard (not a timeout: the kernel's OOM killer or another process)", ws.Signal()), nil
		}
	}
	return "", nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// Bytes returns what it holds.
func (t *tailBuffer) Bytes() []byte { return t.buf }
