// Exec, attach and port-forward sessions: the routes that upgrade the
// connection and proxy it to the runtime's streaming server.

package api

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/apimachinery/pkg/util/proxy"
)

// StreamKind is what a streaming session does.
type StreamKind string

const (
	StreamExec        StreamKind = "exec"
	StreamAttach      StreamKind = "attach"
	StreamPortForward StreamKind = "portforward"
)

// StreamRequest is one exec, attach or port-forward session, from the
// query parameters of its route (named as the Kubernetes API's
// PodExecOptions, PodAttachOptions and PodPortForwardOptions).
type StreamRequest struct {
	Kind StreamKind
	// Container: "" for the pod's default container (exec and attach).
	Container string
	// Command is the argv of an exec (?command=, repeated).
	Command []string
	// Stdin, Stdout, Stderr and TTY say which streams the session has
	// (exec and attach). With TTY, Stderr is false: a terminal carries
	// both outputs on one stream, as the kubelet's streaming server does.
	Stdin, Stdout, Stderr, TTY bool
	// Ports are the pod's ports a port-forward may reach (?ports=, comma
	// separated or repeated); the client names each port again per
	// stream.
	Ports []int32
}

// DialFunc makes a connection, as net.Dialer.DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// StreamTarget is where the runtime serves one session: the URL of its
// streaming server and how to reach it.
type StreamTarget struct {
	URL *url.URL
	// Dial connects to URL's host; nil means from this process's network
	// namespace. The runtime's streaming server listens in the node's
	// network namespace, which need not be the agent's.
	Dial DialFunc
}

// Bounds of a session's setup; the session itself lasts as long as its
// command, its attach or its forward.
const (
	// streamSetupTimeout bounds asking the runtime for the URL and
	// dialling it: the runtime answers from memory, on this node.
	streamSetupTimeout = 30 * time.Second
	// streamDialTimeout bounds the dial of the streaming server, which
	// listens on the node's loopback.
	streamDialTimeout = 10 * time.Second
)

// parseStreamRequest reads a session's query. Bad values are ErrBadRequest
// naming the parameter.
func parseStreamRequest(kind StreamKind, q url.Values) (StreamRequest, error) {
	req := StreamRequest{Kind: kind, Container: q.Get("container")}
	flag := func(name string, def bool) (bool, error) {
		v := q.Get(name)
		if v == "" {
			return def, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, fmt.Errorf("%w: %s: Invalid value: %q: want true or false", ErrBadRequest, name, v)
		}
		return b, nil
	}
	var err error
	switch kind {
	case StreamExec, StreamAttach:
		// The defaults of PodExecOptions and PodAttachOptions: output,
		// no input, no terminal.
		for _, f := range []struct {
			name string
			def  bool
			dst  *bool
		}{{"stdin", false, &req.Stdin}, {"stdout", true, &req.Stdout}, {"stderr", true, &req.Stderr}, {"tty", false, &req.TTY}} {
			if *f.dst, err = flag(f.name, f.def); err != nil {
				return StreamRequest{}, err
			}
		}
		if req.TTY {
			req.Stderr = false
		}
		if !req.Stdin && !req.Stdout && !req.Stderr {
			return StreamRequest{}, fmt.Errorf("%w: stdin, stdout, stderr: Required value: at least one of them must be true", ErrBadRequest)
		}
	case StreamPortForward:
		for _, v := range q["ports"] {
			for _, s := range strings.Split(v, ",") {
				p, err := strconv.ParseUint(strings.TrimSpace(s), 10, 16)
				if err != nil || p == 0 {
					return StreamRequest{}, fmt.Errorf("%w: ports: Invalid value: %q: want a port number between 1 and 65535", ErrBadRequest, s)
				}
				req.Ports = append(req.Ports, int32(p))
			}
		}
	}
	if kind == StreamExec {
		req.Command = q["command"]
		if len(req.Command) == 0 {
			return StreamRequest{}, fmt.Errorf("%w: command: Required value", ErrBadRequest)
		}
	}
	return req, nil
}

// stream serves a session of kind: it asks the service for the runtime's
// streaming URL and proxies the upgraded connection to it, as the
// kubelet's streaming proxy does (apimachinery's UpgradeAwareHandler). The
// runtime negotiates the protocol (SPDY/3.1 with the
// channel.k8s.io/portforward.k8s.io subprotocols); the agent only copies
// bytes. A request that is not an upgrade is a 400.
func (s *Server) stream(kind StreamKind) http.HandlerFunc {
	return s.streamWith(kind, func(r *http.Request) (StreamRequest, error) {
		return parseStreamRequest(kind, r.URL.Query())
	})
}

// streamWith is stream with the session's query read by parse: the
// kubelet's routes name their parameters otherwise (kubelet.go).
func (s *Server) streamWith(kind StreamKind, parse func(*http.Request) (StreamRequest, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ns, name := r.PathValue("namespace"), r.PathValue("name")
		if !httpstream.IsUpgradeRequest(r) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: %s of pod %s/%s: the connection must be upgraded (Connection: Upgrade, Upgrade: SPDY/3.1), as client-go's remotecommand and portforward do",
				ErrBadRequest, kind, ns, name))
			return
		}
		req, err := parse(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), streamSetupTimeout)
		target, err := s.svc.Stream(ctx, ns, name, req)
		cancel()
		if err != nil {
			s.fail(w, err)
			return
		}
		s.log.Info("streaming session through the API", s.audit(r, "kind", string(kind), "namespace", ns, "pod", name,
			"container", req.Container, "command", req.Command, "tty", req.TTY, "stdin", req.Stdin, "ports", req.Ports)...)
		dial := target.Dial
		if dial == nil {
			var d net.Dialer
			dial = d.DialContext
		}
		h := &proxy.UpgradeAwareHandler{
			Location:        target.URL,
			UpgradeRequired: true,
			Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				ctx, cancel := context.WithTimeout(ctx, streamDialTimeout)
				defer cancel()
				return dial(ctx, network, addr)
			}},
			Responder: proxyResponder{s: s, what: fmt.Sprintf("%s of pod %s/%s", kind, ns, name)},
		}
		if r.ContentLength == 0 {
			// The body limit wrapped the empty body: the request that is
			// forwarded must not look like one with a body of unknown
			// length.
			r.Body = http.NoBody
		}
		h.ServeHTTP(&hijackWriter{ResponseWriter: w, sessions: &s.sessions}, r)
	}
}

// proxyResponder answers an error of the proxy (the streaming server
// unreachable, or refusing the upgrade) before the connection was
// hijacked.
type proxyResponder struct {
	s    *Server
	what string
}

func (p proxyResponder) Error(w http.ResponseWriter, _ *http.Request, err error) {
	p.s.log.Warn("API streaming session failed", "session", p.what, "err", err)
	writeError(w, http.StatusBadGateway, fmt.Sprintf("%s: the runtime's streaming server: %v", p.what, err))
}

// hijackWriter lets the proxy take the connection over. The server's read
// and write deadlines stay on a hijacked connection: Hijack clears them (a
// session lasts as long as its command), and registers the connection so
// that a stopping server cuts it.
type hijackWriter struct {
	http.ResponseWriter
	sessions *sessions
}

func (h *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("clear the deadlines of a hijacked connection: %w", err)
	}
	return h.sessions.add(conn), rw, nil
}

// sessions are the hijacked connections of running sessions. http.Server
// forgets a connection once it is hijacked, so Shutdown would neither wait
// for them nor end them: closeAll does, when the server stops.
type sessions struct {
	mu     sync.Mutex
	conns  map[*sessionConn]struct{}
	closed bool
}

// add tracks conn until it is closed; after closeAll it is closed at once.
func (s *sessions) add(conn net.Conn) net.Conn {
	sc := &sessionConn{Conn: conn, s: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		conn.Close()
		return sc
	}
	if s.conns == nil {
		s.conns = map[*sessionConn]struct{}{}
	}
	s.conns[sc] = struct{}{}
	return sc
}

// closeAll closes every session's connection, and every later one.
func (s *sessions) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Conn.Close()
	}
	clear(s.conns)
}

// count is the number of running sessions.
func (s *sessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

type sessionConn struct {
	net.Conn
	s    *sessions
	once sync.Once
}

func (c *sessionConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}
