package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Response bounds of the client: a PodList of a dense node (hundreds of
// pods of a few KiB) is a few MiB; an error message is a few lines.
const (
	maxResponseBytes = 64 << 20
	maxErrorBytes    = 1 << 20
)

// SocketError is an API socket the client cannot use: missing, not
// permitted, refusing connections, or closing them unanswered (the server
// refused the peer's credentials). It unwraps to the cause (fs.ErrNotExist,
// fs.ErrPermission, syscall.ECONNREFUSED, or the transport's error).
type SocketError struct {
	Path   string
	Reason string // short, for a person: "no such file"
	Hint   string // what to check
	Err    error
}

func (e *SocketError) Error() string {
	s := fmt.Sprintf("nodeguard API socket %s: %s", e.Path, e.Reason)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

func (e *SocketError) Unwrap() error { return e.Err }

// StatusError is an error answer of the server. It unwraps to ErrNotFound
// (404), ErrInvalid (422), ErrTooLarge (413), ErrBusy (503) or
// ErrBadRequest (400), so callers test errors.Is(err, api.ErrNotFound).
type StatusError struct {
	Code    int
	Message string // the server's {"error": ...}
}

func (e *StatusError) Error() string { return e.Message }

func (e *StatusError) Unwrap() error {
	switch e.Code {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusUnprocessableEntity:
		return ErrInvalid
	case http.StatusRequestEntityTooLarge:
		return ErrTooLarge
	case http.StatusServiceUnavailable:
		return ErrBusy
	case http.StatusBadRequest:
		return ErrBadRequest
	}
	return nil
}

// Client talks to the API on a unix socket. Its methods are safe for
// concurrent use; every call is bounded by its context only.
type Client struct {
	path string
	hc   *http.Client
}

// NewClient returns a client of the API at socketPath. It does not
// connect: errors show at the first call, as *SocketError.
func NewClient(socketPath string) *Client {
	c := &Client{path: socketPath}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", socketPath)
			if err != nil {
				return nil, c.socketError(err)
			}
			return &countingConn{Conn: conn}, nil
		},
		MaxIdleConns:       4,
		IdleConnTimeout:    30 * time.Second, // below the server's IdleTimeout
		DisableCompression: true,             // a local socket: gzip only costs CPU
	}
	c.hc = &http.Client{Transport: tr}
	return c
}

// Close releases idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// Apply sends one manifest source (YAML or JSON, one or more documents) and
// returns the applied pods. source names it in errors and enters the pods'
// derived UIDs (podspec.Default): use the file's absolute path. A manifest
// that does not parse or validate is a *StatusError wrapping ErrInvalid
// with the field errors; nothing of it was applied.
func (c *Client) Apply(ctx context.Context, manifest []byte, source string) (*corev1.PodList, error) {
	u := "/v1/pods?" + url.Values{"source": {source}}.Encode()
	var l corev1.PodList
	if err := c.do(ctx, http.MethodPost, u, "application/yaml", bytes.NewReader(manifest), &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// List returns every pod as a v1 PodList, ordered by namespace and name.
func (c *Client) List(ctx context.Context) (*corev1.PodList, error) {
	var l corev1.PodList
	if err := c.do(ctx, http.MethodGet, "/v1/pods", "", nil, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Get returns one pod with its status.
func (c *Client) Get(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var p corev1.Pod
	if err := c.do(ctx, http.MethodGet, podPath(namespace, name, ""), "", nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Delete removes a pod; a missing pod is an error wrapping ErrNotFound.
func (c *Client) Delete(ctx context.Context, namespace, name string) error {
	return c.do(ctx, http.MethodDelete, podPath(namespace, name, ""), "", nil, nil)
}

// Logs copies a container's log to w, as opts select (see LogOptions). An
// error the server met after sending part of the log is returned after
// that part was written. With opts.Follow it returns when the container
// stopped or ctx ends.
func (c *Client) Logs(ctx context.Context, namespace, name string, opts LogOptions, w io.Writer) error {
	resp, err := c.send(ctx, http.MethodGet, podPath(namespace, name, "log")+"?"+opts.query().Encode(), "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("read log of %s/%s: %w", namespace, name, err)
	}
	if msg := resp.Trailer.Get(errorTrailer); msg != "" {
		return fmt.Errorf("log of %s/%s ended early: %s", namespace, name, msg)
	}
	return nil
}

// Exec runs cmd (an argv) in a container and waits for it. timeout 0 means
// the server's MaxExecTimeout; it is rounded up to whole seconds. A command
// that runs and fails is not an error: see ExitCode.
func (c *Client) Exec(ctx context.Context, namespace, name, container string, cmd []string, timeout time.Duration) (ExecResult, error) {
	secs := int64(timeout / time.Second)
	if timeout%time.Second != 0 {
		secs++
	}
	body, err := json.Marshal(ExecRequest{Command: cmd, TimeoutSeconds: secs})
	if err != nil {
		return ExecResult{}, fmt.Errorf("encode exec request: %w", err)
	}
	u := podPath(namespace, name, "exec")
	if container != "" {
		u += "?" + url.Values{"container": {container}}.Encode()
	}
	var res ExecResult
	if err := c.do(ctx, http.MethodPost, u, "application/json", bytes.NewReader(body), &res); err != nil {
		return ExecResult{}, err
	}
	return res, nil
}

func podPath(namespace, name, sub string) string {
	p := "/v1/pods/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
	if sub != "" {
		p += "/" + sub
	}
	return p
}

// do sends a request and decodes a 2xx JSON answer into out (nil to
// discard it).
func (c *Client) do(ctx context.Context, method, path, contentType string, body io.Reader, out any) error {
	resp, err := c.send(ctx, method, path, contentType, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBytes)).Decode(out); err != nil {
		return fmt.Errorf("decode answer to %s %s: %w", method, path, err)
	}
	return nil
}

// send performs a request and returns a 2xx response; any other status
// becomes a *StatusError.
func (c *Client) send(ctx context.Context, method, path, contentType string, body io.Reader) (*http.Response, error) {
	// The host is never resolved: the transport dials the socket.
	req, err := http.NewRequestWithContext(ctx, method, "http://nodeguard"+path, body)
	if err != nil {
		return nil, fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	var used atomic.Pointer[countingConn]
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			if cc, ok := i.Conn.(*countingConn); ok {
				used.Store(cc)
			}
		},
	}))
	resp, err := c.hc.Do(req)
	if err != nil {
		if se, ok := errors.AsType[*SocketError](err); ok {
			return nil, se
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		}
		// The server closes a refused peer's connection before reading it.
		// The client sees that as EOF, EPIPE, ECONNRESET or "server closed
		// idle connection", depending on who runs first: what they share
		// is a connection that never carried a byte back.
		if cc := used.Load(); cc != nil && cc.read.Load() == 0 {
			return nil, &SocketError{Path: c.path, Reason: "the server closed the connection", Err: err,
				Hint: "the API admits only root and the agent's own user; or the agent stopped"}
		}
		return nil, fmt.Errorf("%s %s on %s: %w", method, path, c.path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	var eb errorBody
	if err := json.Unmarshal(raw, &eb); err != nil || eb.Error == "" {
		eb.Error = fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(raw))
	}
	return nil, &StatusError{Code: resp.StatusCode, Message: eb.Error}
}

// countingConn counts the bytes the server sent on a connection.
type countingConn struct {
	net.Conn
	read atomic.Int64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// socketError explains a failed dial of the API socket.
func (c *Client) socketError(err error) error {
	se := &SocketError{Path: c.path, Err: err}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		se.Reason, se.Hint = "no such file", "is `nodeguard run` running? --api-socket"
	case errors.Is(err, fs.ErrPermission):
		se.Reason, se.Hint = "permission denied", "the API is for root only: run as root"
	case errors.Is(err, syscall.ECONNREFUSED):
		se.Reason, se.Hint = "connection refused", "a stale socket: is `nodeguard run` running? --api-socket"
	case errors.Is(err, syscall.ENOTSOCK):
		se.Reason, se.Hint = "not a socket", "--api-socket"
	default:
		se.Reason = err.Error()
	}
	return se
}
