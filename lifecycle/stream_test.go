package lifecycle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/api/apitest"
)

const streamPods = `
apiVersion: v1
kind: Pod
metadata:
  name: shell
  annotations: {kubectl.kubernetes.io/default-container: main}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: other, image: BUSYBOX, command: [sleep, "3600"], env: [{name: WHO, value: other}]}
  - {name: main, image: BUSYBOX, command: [sleep, "3600"], env: [{name: WHO, value: main}]}
---
apiVersion: v1
kind: Pod
metadata: {name: echo}
spec:
  terminationGracePeriodSeconds: 1
  restartPolicy: Never
  containers:
  - name: echo
    image: BUSYBOX
    stdin: true
    stdinOnce: true
    command: [sh, -c, "while read l; do echo got:$l; done; echo bye"]
---
apiVersion: v1
kind: Pod
metadata: {name: httpd}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: BUSYBOX
    command: [sh, -c, "mkdir -p /www && echo hello from the pod > /www/index.html && dd if=/dev/zero of=/www/big bs=1M count=16 2>/dev/null && exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080}]
`

// syncBuffer is a bytes.Buffer the session's goroutines write while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// fixedSize is a terminal that has one size, then ends.
type fixedSize struct{ sent chan struct{} }

func (f *fixedSize) Next() *remotecommand.TerminalSize {
	select {
	case f.sent <- struct{}{}:
		return &remotecommand.TerminalSize{Width: 123, Height: 45}
	default:
		return nil
	}
}

func TestStreamingSessionsInRealContainers(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	srv, sock := apitest.Serve(t, m.APIService(api.NewEventLog(16)), api.Options{})
	c := api.NewClient(sock)
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := m.Apply(ctx, r.pods(t, streamPods), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "shell", "running", running)

	t.Run("exec with a terminal runs on a pts and gets its size", func(t *testing.T) {
		var out bytes.Buffer
		q := &fixedSize{sent: make(chan struct{}, 1)}
		// The size is sent before the command reads it: stty asks the
		// terminal the runtime made.
		err := c.ExecStream(ctx, "default", "shell", "", []string{"sh", "-c", "tty; sleep 0.5; stty size"},
			api.StreamIO{Stdout: &out, TTY: true, Resize: q})
		if err != nil {
			t.Fatalf("exec -t: %v (output %q)", err, out.String())
		}
		lines := strings.Fields(strings.ReplaceAll(out.String(), "\r", ""))
		if len(lines) != 3 || !regexp.MustCompile(`^/dev/pts/\d+$`).MatchString(lines[0]) {
			t.Fatalf("tty; stty size printed %q, want a /dev/pts path and a size", out.String())
		}
		if lines[1] != "45" || lines[2] != "123" {
			t.Errorf("stty size %s %s, want the size sent: 45 123", lines[1], lines[2])
		}
	})

	t.Run("exec -i pipes stdin to the command and its end closes the command's stdin", func(t *testing.T) {
		var out, errb bytes.Buffer
		in := strings.NewReader("line one\nline two\n")
		if err := c.ExecStream(ctx, "default", "shell", "", []string{"cat"}, api.StreamIO{Stdin: in, Stdout: &out, Stderr: &errb}); err != nil {
			t.Fatalf("exec -i cat: %v (stderr %q)", err, errb.String())
		}
		if out.String() != "line one\nline two\n" {
			t.Fatalf("cat printed %q", out.String())
		}
	})

	t.Run("exec keeps stdout and stderr apart and returns the exit code", func(t *testing.T) {
		var out, errb bytes.Buffer
		err := c.ExecStream(ctx, "default", "shell", "", []string{"sh", "-c", "echo out; echo err >&2; exit 3"},
			api.StreamIO{Stdout: &out, Stderr: &errb})
		if ee, ok := errors.AsType[*api.ExitError](err); !ok || ee.Code != 3 {
			t.Fatalf("exec of exit 3: %v (%T), want *api.ExitError code 3", err, err)
		}
		if out.String() != "out\n" || errb.String() != "err\n" {
			t.Fatalf("stdout %q, stderr %q", out.String(), errb.String())
		}
	})

	t.Run("exec picks the default container and honours -c", func(t *testing.T) {
		for ctr, want := range map[string]string{"": "main", "other": "other"} {
			var out bytes.Buffer
			if err := c.ExecStream(ctx, "default", "shell", ctr, []string{"sh", "-c", "echo $WHO"}, api.StreamIO{Stdout: &out}); err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out.String()); got != want {
				t.Errorf("exec -c %q ran in %q, want %q", ctr, got, want)
			}
		}
	})

	t.Run("measured: a session's cost next to ExecSync's", func(t *testing.T) {
		// Logged, not asserted: a session costs a CRI Exec, a dial in
		// the runtime's netns and an SPDY handshake on top of the command.
		const n = 20
		start := time.Now()
		for range n {
			if err := c.ExecStream(ctx, "default", "shell", "", []string{"true"}, api.StreamIO{Stdout: io.Discard}); err != nil {
				t.Fatal(err)
			}
		}
		session := time.Since(start) / n
		start = time.Now()
		for range n {
			if _, err := c.Exec(ctx, "default", "shell", "", []string{"true"}, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("exec of true: %v a session (pod exec -i), %v an ExecSync (pod exec), mean of %d", session.Round(time.Millisecond), (time.Since(start) / n).Round(time.Millisecond), n)
	})

	t.Run("a missing pod or container is not found, before any stream", func(t *testing.T) {
		err := c.ExecStream(ctx, "default", "nosuch", "", []string{"true"}, api.StreamIO{Stdout: io.Discard})
		if !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("exec in a missing pod: %v, want ErrNotFound", err)
		}
		err = c.Attach(ctx, "default", "shell", "nosuch", api.StreamIO{Stdout: io.Discard})
		if !errors.Is(err, api.ErrNotFound) || !strings.Contains(err.Error(), "nosuch") {
			t.Fatalf("attach to a missing container: %v, want ErrNotFound naming it", err)
		}
	})

	t.Run("attach sends stdin to the container's main process and prints what it writes", func(t *testing.T) {
		waitPod(t, m, "echo", "running", running)
		var out syncBuffer
		// stdinOnce: the container's stdin closes when this attach ends
		// its stdin, its loop ends, and so does the container.
		err := c.Attach(ctx, "default", "echo", "", api.StreamIO{Stdin: strings.NewReader("ping\npong\n"), Stdout: &out, Stderr: io.Discard})
		if err != nil {
			t.Fatalf("attach: %v (output %q)", err, out.String())
		}
		if out.String() != "got:ping\ngot:pong\nbye\n" {
			t.Fatalf("attached output %q", out.String())
		}
	})

	t.Run("port-forward reaches the pod's port from 127.0.0.1", func(t *testing.T) {
		waitPod(t, m, "httpd", "running", running)
		pctx, stop := context.WithCancel(ctx)
		ports := make(chan []portforward.ForwardedPort, 1)
		done := make(chan error, 1)
		var out syncBuffer
		go func() {
			done <- c.PortForward(pctx, "default", "httpd", []string{"0:8080"}, func(p []portforward.ForwardedPort) { ports <- p }, &out, &out)
		}()
		var local uint16
		select {
		case p := <-ports:
			if len(p) != 1 || p[0].Remote != 8080 || p[0].Local == 0 {
				t.Fatalf("forwarded ports %+v", p)
			}
			local = p[0].Local
		case err := <-done:
			t.Fatalf("port-forward ended before it listened: %v", err)
		}
		for i := range 3 { // each connection is its own stream of one session
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", local))
			if err != nil {
				t.Fatalf("GET %d through the forward: %v (port-forward said %q)", i, err, out.String())
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "hello from the pod\n" {
				t.Fatalf("GET %d through the forward: %s %q", i, resp.Status, body)
			}
		}
		// Measured, not asserted: one 16 MiB response through the
		// forward (client-go, the API socket, the agent's proxy, the
		// runtime's streaming server, the pod's netns).
		start := time.Now()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/big", local))
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != 16<<20 {
			t.Fatalf("16 MiB through the forward: %d bytes, %v", n, err)
		}
		el := time.Since(start)
		t.Logf("port-forward: 16 MiB in %v (%.0f MiB/s)", el.Round(time.Millisecond), 16/el.Seconds())
		if !strings.Contains(out.String(), fmt.Sprintf("Forwarding from 127.0.0.1:%d -> 8080", local)) {
			t.Errorf("port-forward printed %q", out.String())
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("port-forward after its context ended: %v", err)
		}
		// The agent's half of the session ends when it reads the
		// client's close.
		waitSessions(t, srv, 0)
	})

	for _, n := range []string{"shell", "echo", "httpd"} {
		if err := m.Delete(ctx, "default", n); err != nil {
			t.Fatal(err)
		}
		waitGone(t, m, n)
	}
}

// waitSessions waits, bounded, until the server runs n sessions.
func waitSessions(t *testing.T, srv *api.Server, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for srv.Stats().Sessions != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions open, want %d", srv.Stats().Sessions, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
