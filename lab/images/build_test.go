package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeGo writes a shell script that stands in for the go command and
// returns its path. The script first writes its pid to started.
func fakeGo(t *testing.T, body string) (goBin, started string) {
	t.Helper()
	dir := t.TempDir()
	started = filepath.Join(dir, "started")
	goBin = filepath.Join(dir, "go")
	script := "#!/bin/sh\necho $$ > " + started + "\n" + body + "\n"
	if err := os.WriteFile(goBin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return goBin, started
}

// waitFile waits (bounded: 30 s) until path exists and returns its
// contents.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	for i := 0; i < 3000; i++ {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
	return ""
}

// TestBuildErrorSaysWhy checks that a failed build's error tells a
// compile error from a timeout, from its caller's cancellation (the agent
// shutting down) and from a kill from outside, and names the file with
// the build's output (issue 32: a first `make demo` reported only "go
// build grpchealth: signal: killed").
func TestBuildErrorSaysWhy(t *testing.T) {
	shutdown := errors.New("the agent is shutting down")
	tests := []struct {
		name string
		// body is the fake go command's script after it wrote its pid.
		body string
		// ctx, when set, gives the build's context and a function run
		// beside the build with the path the fake go writes its pid to.
		ctx        func(t *testing.T) (context.Context, func(started string))
		wantReason string // substring; "" wants none
		wantIs     error
		wantOutput string
	}{
		{
			name:       "a compile error carries its output and no reason",
			body:       "echo 'main.go:3:1: syntax error: boom' >&2; exit 1",
			wantOutput: "syntax error: boom",
		},
		{
			name: "a timeout says it was one, and when its deadline fell",
			body: "echo compiling; exec sleep 60",
			ctx: func(t *testing.T) (context.Context, func(string)) {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				t.Cleanup(cancel)
				return ctx, nil
			},
			wantReason: "stopped by its caller's timeout (context deadline exceeded: the deadline fell",
			wantIs:     context.DeadlineExceeded,
			wantOutput: "compiling",
		},
		{
			name: "a cancelled caller is named with its cause, not called a timeout",
			body: "sleep 60 & wait",
			ctx: func(t *testing.T) (context.Context, func(string)) {
				ctx, cancel := context.WithCancelCause(t.Context())
				t.Cleanup(func() { cancel(nil) })
				return ctx, func(started string) {
					waitFile(t, started)
					cancel(shutdown)
				}
			},
			wantReason: "stopped because its caller was cancelled (the agent is shutting down), not a timeout",
			wantIs:     shutdown,
		},
		{
			name:       "a kill from outside says so",
			body:       "kill -KILL $$",
			wantReason: "killed by a signal (killed) from outside nodeguard (not a timeout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			goBin, started := fakeGo(t, tt.body)
			ctx, during := t.Context(), func(string) {}
			if tt.ctx != nil {
				var f func(string)
				ctx, f = tt.ctx(t)
				if f != nil {
					during = f
				}
			}
			logPath := filepath.Join(t.TempDir(), BuildLog)
			go during(started)
			_, err := compileGo(ctx, goBin, "grpchealth", grpchealthSource, logPath)
			var be *BuildError
			if !errors.As(err, &be) {
				t.Fatalf("compileGo = %v, want a *BuildError", err)
			}
			if be.Program != "grpchealth" || be.Log != logPath {
				t.Errorf("BuildError program %q log %q, want grpchealth and %s", be.Program, be.Log, logPath)
			}
			if tt.wantReason == "" && be.Reason != "" {
				t.Errorf("reason %q, want none", be.Reason)
			}
			if !strings.Contains(be.Reason, tt.wantReason) {
				t.Errorf("reason %q, want it to contain %q", be.Reason, tt.wantReason)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.wantIs)
			}
			if !strings.Contains(be.Output, tt.wantOutput) {
				t.Errorf("output %q, want it to contain %q", be.Output, tt.wantOutput)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "go build grpchealth: ") || !strings.Contains(msg, "(build output: "+logPath+")") {
				t.Errorf("error %q does not name the program and the log", msg)
			}
			b, rerr := os.ReadFile(logPath)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if !strings.Contains(string(b), tt.wantOutput) || !strings.Contains(string(b), "== failed: "+msg) {
				t.Errorf("log %s lacks the output %q or the error:\n%s", logPath, tt.wantOutput, b)
			}
		})
	}
	t.Run("a cancelled build leaves none of its processes behind", func(t *testing.T) {
		dir := t.TempDir()
		child := filepath.Join(dir, "child")
		goBin, _ := fakeGo(t, "sleep 60 & echo $! > "+child+"; wait")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() { waitFile(t, child); cancel() }()
		if _, err := compileGo(ctx, goBin, "pause", pauseSource, filepath.Join(dir, BuildLog)); !errors.Is(err, context.Canceled) {
			t.Fatalf("compileGo = %v, want context.Canceled", err)
		}
		pid, err := strconv.Atoi(waitFile(t, child))
		if err != nil {
			t.Fatal(err)
		}
		// SIGKILL went to the group; the orphan is reaped by init,
		// so it may linger as a zombie for a moment (bounded: 10 s).
		for i := 0; ; i++ {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			if err != nil || strings.Contains(string(st), ") Z ") {
				break
			}
			if i == 1000 {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("the build's child %d still runs after the build was cancelled: %s", pid, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	t.Run("a temporary build log is kept only when the build fails", func(t *testing.T) {
		goBin, _ := fakeGo(t, "exit 2")
		_, err := compileGo(t.Context(), goBin, "hog", nil, "")
		var be *BuildError
		if !errors.As(err, &be) {
			t.Fatalf("compileGo = %v, want a *BuildError", err)
		}
		defer os.Remove(be.Log)
		if _, err := os.Stat(be.Log); err != nil {
			t.Errorf("the failed build's log: %v", err)
		}
	})
}
