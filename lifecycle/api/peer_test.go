package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/api/apitest"
)

// helperEnv makes the test binary a client instead of running tests: it
// lists pods on the socket named by the variable and prints "ok" or the
// error. TestPeerCredentials runs it as another user.
const helperEnv = "NODEGUARD_API_TEST_CLIENT"

// helperSessionEnv makes the helper open an exec session instead.
const helperSessionEnv = "NODEGUARD_API_TEST_SESSION"

func TestMain(m *testing.M) {
	if path := os.Getenv(helperEnv); path != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := api.NewClient(path)
		var err error
		if os.Getenv(helperSessionEnv) != "" {
			err = c.ExecStream(ctx, "default", "web", "", []string{"id"}, api.StreamIO{Stdout: io.Discard})
		} else {
			_, err = c.List(ctx)
		}
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Println("ok")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// nobody is the overflow uid: never root, never the server's user.
const nobody = 65534

// TestPeerCredentials connects as uid 65534 from a child process (the test
// binary, re-executed with helperEnv) to a server run by root.
func TestPeerCredentials(t *testing.T) {
	cgtest.RequirePrivileged(t)
	// The child must be able to execute its binary and reach the socket:
	// copy the test binary into a directory that nobody may traverse.
	dir := apitest.SocketDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "api.test")
	copyExecutable(t, bin)
	f := newFake()
	var sessions atomic.Int64
	f.StreamFunc = func(context.Context, string, string, api.StreamRequest) (api.StreamTarget, error) {
		sessions.Add(1)
		return api.StreamTarget{}, errors.New("no streaming server in this test")
	}
	srv, path := apitest.Serve(t, f, api.Options{})
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	asNobody := func(t *testing.T, env ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin)
		cmd.Env = append(append(os.Environ(), helperEnv+"="+path), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		if err != nil && cmd.ProcessState == nil {
			t.Fatalf("run the client as uid %d: %v", nobody, err)
		}
		return strings.TrimSpace(string(out))
	}

	t.Run("with mode 0600 the kernel refuses another user before the server sees it", func(t *testing.T) {
		out := asNobody(t)
		want := "nodeguard API socket " + path + ": permission denied (the API is for root only: run as root)"
		if out != want {
			t.Fatalf("the client said %q\nwant %q", out, want)
		}
		if n := srv.Stats().RefusedPeers; n != 0 {
			t.Fatalf("refused peers %d: the connection should not have been made", n)
		}
	})

	t.Run("with the mode opened up the credential check still refuses another user", func(t *testing.T) {
		if err := os.Chmod(path, 0o666); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(path, 0o600)
		out := asNobody(t)
		if !strings.Contains(out, "nodeguard API socket "+path+": the server closed the connection") {
			t.Fatalf("the client as uid %d said %q", nobody, out)
		}
		if n := srv.Stats().RefusedPeers; n != 1 {
			t.Fatalf("refused peers %d, want 1", n)
		}
		// A session is a request on the same socket: refused alike,
		// before the pod service is asked for a streaming URL.
		out = asNobody(t, helperSessionEnv+"=1")
		if out == "" || strings.Contains(out, "no streaming server") {
			t.Fatalf("the session as uid %d got %q, want a refused connection", nobody, out)
		}
		t.Logf("the session as uid %d: %s", nobody, out)
		if n := srv.Stats().RefusedPeers; n != 2 {
			t.Fatalf("refused peers %d after a session, want 2", n)
		}
		if n := sessions.Load(); n != 0 {
			t.Fatalf("the service was asked for %d sessions by another user", n)
		}
	})

	t.Run("root is admitted", func(t *testing.T) {
		c := api.NewClient(path)
		defer c.Close()
		if _, err := c.List(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

// copyExecutable copies the running test binary to dst, mode 0755.
func copyExecutable(t *testing.T, dst string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
}
