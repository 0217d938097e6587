package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/api/apitest"
)

// echoBackend stands in for the runtime's streaming server: on a unix
// socket (which only the target's Dial reaches: the URL's host does not
// resolve), it answers an upgrade with 101 and echoes what follows, and
// remembers the requests it got.
type echoBackend struct {
	path string
	mu   sync.Mutex
	reqs []*http.Request
}

func newEchoBackend(t *testing.T) *echoBackend {
	t.Helper()
	b := &echoBackend{path: filepath.Join(apitest.SocketDir(t), "streaming.sock")}
	ln, err := net.Listen("unix", b.path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.reqs = append(b.reqs, r)
		b.mu.Unlock()
		if r.URL.Path == "/refuse" {
			http.Error(w, "token expired", http.StatusNotFound)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return b
}

func (b *echoBackend) target(path string) api.StreamTarget {
	return api.StreamTarget{
		URL: &url.URL{Scheme: "http", Host: "streaming.invalid:10010", Path: path},
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", b.path)
		},
	}
}

// upgrade opens a connection to the API socket and sends an upgrade
// request; it returns the connection after the response's headers.
func upgrade(t *testing.T, sock, method, target string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	conn, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: nodeguard\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n", method, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, resp
}

func echoes(t *testing.T, conn net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	if _, err := io.WriteString(conn, msg); err != nil {
		t.Fatalf("write %q to the session: %v", msg, err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != msg {
		t.Fatalf("read back %q (%v), want %q", buf, err, msg)
	}
}

func TestStreamSessionsAreProxiedToTheRuntime(t *testing.T) {
	b := newEchoBackend(t)
	f := newFake()
	var mu sync.Mutex
	var got []api.StreamRequest
	f.StreamFunc = func(_ context.Context, ns, name string, req api.StreamRequest) (api.StreamTarget, error) {
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
		switch {
		case req.Container == "sidecar":
			return b.target("/refuse"), nil
		case name == "db":
			t := b.target("/exec/token2")
			t.Dial = func(context.Context, string, string) (net.Conn, error) { return nil, errors.New("connection refused") }
			return t, nil
		}
		return b.target("/exec/token1"), nil
	}
	// Server timeouts far shorter than the session: a hijacked
	// connection must not keep them.
	opts := api.Options{ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond, IdleTimeout: 100 * time.Millisecond}
	path := filepath.Join(apitest.SocketDir(t), "api.sock")
	srv := api.NewServer(f, slog.New(slog.DiscardHandler), opts)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := srv.Listen(ctx, path); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	c := api.NewClient(path)
	defer c.Close()
	if _, err := c.Apply(ctx, []byte(webYAML), "/etc/pods/web.yaml"); err != nil {
		t.Fatal(err)
	}

	t.Run("an exec upgrade reaches the runtime's URL through the target's dial, and outlives the server's timeouts", func(t *testing.T) {
		conn, br, resp := upgrade(t, path, "POST", "/v1/pods/default/web/exec?command=sh&command=-c&command=date&stdin=true&tty=true")
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade answered %s", resp.Status)
		}
		echoes(t, conn, br, "hello")
		time.Sleep(300 * time.Millisecond) // past every deadline of opts
		echoes(t, conn, br, "still there")
		if n := srv.Stats().Sessions; n != 1 {
			t.Errorf("Stats().Sessions = %d during one session", n)
		}
		mu.Lock()
		req := got[len(got)-1]
		mu.Unlock()
		want := api.StreamRequest{Kind: api.StreamExec, Container: "nginx", Command: []string{"sh", "-c", "date"}, Stdin: true, Stdout: true, TTY: true}
		if fmt.Sprint(req) != fmt.Sprint(want) {
			t.Errorf("the service got %+v, want %+v (the default container; no stderr with a terminal)", req, want)
		}
		b.mu.Lock()
		br0 := b.reqs[len(b.reqs)-1]
		b.mu.Unlock()
		if br0.Method != "POST" || br0.URL.Path != "/exec/token1" || br0.Header.Get("X-Stream-Protocol-Version") != "v4.channel.k8s.io" {
			t.Errorf("the runtime got %s %s with protocol %q", br0.Method, br0.URL, br0.Header.Get("X-Stream-Protocol-Version"))
		}
		conn.Close()
		waitSessions(t, srv, 0)
	})

	t.Run("a runtime that refuses the upgrade is answered with its refusal", func(t *testing.T) {
		_, br, resp := upgrade(t, path, "GET", "/v1/pods/default/web/attach?container=sidecar")
		body, _ := io.ReadAll(io.LimitReader(br, 1<<10))
		if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "token expired") {
			t.Fatalf("got %s %q", resp.Status, body)
		}
	})

	t.Run("the client gets the server's errors with their kind", func(t *testing.T) {
		err := c.ExecStream(ctx, "default", "nope", "", []string{"ls"}, api.StreamIO{Stdout: io.Discard})
		if se, ok := errors.AsType[*api.StatusError](err); !ok || se.Code != 404 || !errors.Is(err, api.ErrNotFound) {
			t.Fatalf("exec in a missing pod: %v (%T)", err, err)
		}
		err = c.Attach(ctx, "default", "web", "nope", api.StreamIO{Stdout: io.Discard})
		if !errors.Is(err, api.ErrNotFound) || !strings.Contains(err.Error(), "nope") {
			t.Fatalf("attach to a missing container: %v", err)
		}
	})

	cases := []struct {
		name, method, target string
		code                 int
		text                 string
	}{
		{"a session without an upgrade is 400", "GET", "/v1/pods/default/web/exec?command=ls", 400, "the connection must be upgraded"},
		{"exec without a command is 400", "UPGRADE POST", "/v1/pods/default/web/exec?stdin=true", 400, "command: Required value"},
		{"a flag that is not a boolean is 400", "UPGRADE POST", "/v1/pods/default/web/exec?command=ls&tty=yes please", 400, `tty: Invalid value: "yes please"`},
		{"a session without any stream is 400", "UPGRADE POST", "/v1/pods/default/web/attach?stdout=false&stderr=false", 400, "at least one of them"},
		{"a port that is no port is 400", "UPGRADE POST", "/v1/pods/default/web/portforward?ports=8080,70000", 400, `ports: Invalid value: "70000"`},
		{"a session in a missing pod is 404", "UPGRADE GET", "/v1/pods/default/nope/portforward?ports=80", 404, "default/nope"},
		{"an unreachable streaming server is 502", "UPGRADE POST", "/v1/pods/data/db/exec?command=ls", 502, "exec of pod data/db: the runtime's streaming server: error dialing backend: connection refused"},
		{"a wrong method on a session route is 405", "PUT", "/v1/pods/default/web/attach", 405, "allowed: GET, POST"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var code int
			var body []byte
			if m, ok := strings.CutPrefix(tc.method, "UPGRADE "); ok {
				_, br, resp := upgrade(t, path, m, strings.ReplaceAll(tc.target, " ", "%20"))
				code = resp.StatusCode
				body, _ = io.ReadAll(io.LimitReader(br, resp.ContentLength))
			} else {
				code, _, body = raw(t, path, tc.method, tc.target, nil)
			}
			var eb struct{ Error string }
			json.Unmarshal(body, &eb)
			if code != tc.code || !strings.Contains(eb.Error, tc.text) {
				t.Fatalf("got %d %q, want %d saying %q", code, body, tc.code, tc.text)
			}
		})
	}

	t.Run("a stopping server cuts the running sessions", func(t *testing.T) {
		conn, br, resp := upgrade(t, path, "POST", "/v1/pods/default/web/exec?command=cat&stdin=true")
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade answered %s", resp.Status)
		}
		echoes(t, conn, br, "x")
		stop()
		select {
		case err := <-served:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Serve did not return within 30 s of its context's end with a session open")
		}
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := br.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Fatalf("the session's connection after the server stopped: read %d, %v; want EOF", n, err)
		}
		if n := srv.Stats().Sessions; n != 0 {
			t.Errorf("%d sessions left after Serve returned", n)
		}
	})
}

// waitSessions waits, bounded, until the server runs n sessions: the
// agent's half of a session ends when it reads the client's close.
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
