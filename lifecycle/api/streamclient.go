// The client side of exec, attach and port-forward sessions: client-go's
// SPDY executor and port forwarder, over the API socket.

package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/httpstream"
	httpstreamspdy "k8s.io/apimachinery/pkg/util/httpstream/spdy"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/client-go/util/exec"
)

// streamPingPeriod is how often the client pings a session's SPDY
// connection, as kubectl's (5 s): it keeps an idle session's connection
// known to be alive.
const streamPingPeriod = 5 * time.Second

// StreamIO are the streams of an exec or attach session. A nil Stdin,
// Stdout or Stderr is a stream the session does not have.
type StreamIO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// TTY asks for a terminal: the command's stdout and stderr both come
	// on Stdout, and Stderr is not used.
	TTY bool
	// Resize, with TTY, gives the terminal's size at once and after each
	// change, and nil when it ends.
	Resize remotecommand.TerminalSizeQueue
}

// ExitError is a remote command (or attached container) that ended with
// a non-zero exit code.
type ExitError struct{ Code int }

func (e *ExitError) Error() string {
	return fmt.Sprintf("command terminated with exit code %d", e.Code)
}

// ExecStream runs cmd in a container with the streams of sio, as `kubectl
// exec`, and returns when it ends: nil for exit code 0, *ExitError for
// another code. An empty container means the pod's default one.
func (c *Client) ExecStream(ctx context.Context, namespace, name, container string, cmd []string, sio StreamIO) error {
	q := sio.query(container)
	q["command"] = cmd
	return c.session(ctx, podPath(namespace, name, string(StreamExec)), q, sio)
}

// Attach connects sio to the main process of a running container, as
// `kubectl attach`: stdin reaches it only if the container has stdin:
// true, and a terminal only with tty: true. It returns when the container
// ends (*ExitError for a non-zero code) or ctx ends.
func (c *Client) Attach(ctx context.Context, namespace, name, container string, sio StreamIO) error {
	return c.session(ctx, podPath(namespace, name, string(StreamAttach)), sio.query(container), sio)
}

func (sio StreamIO) query(container string) url.Values {
	q := url.Values{
		"stdin":  {strconv.FormatBool(sio.Stdin != nil)},
		"stdout": {strconv.FormatBool(sio.Stdout != nil)},
		"stderr": {strconv.FormatBool(sio.Stderr != nil && !sio.TTY)},
		"tty":    {strconv.FormatBool(sio.TTY)},
	}
	if container != "" {
		q.Set("container", container)
	}
	return q
}

func (c *Client) session(ctx context.Context, path string, q url.Values, sio StreamIO) error {
	tr, up, err := c.upgrader()
	if err != nil {
		return err
	}
	u := &url.URL{Scheme: "http", Host: "nodeguard", Path: path, RawQuery: q.Encode()}
	ex, err := remotecommand.NewSPDYExecutorForTransports(tr, up, http.MethodPost, u)
	if err != nil {
		return fmt.Errorf("session %s: %w", path, err)
	}
	opts := remotecommand.StreamOptions{Stdin: sio.Stdin, Stdout: sio.Stdout, Tty: sio.TTY, TerminalSizeQueue: sio.Resize}
	if !sio.TTY {
		opts.Stderr = sio.Stderr
	}
	err = ex.StreamWithContext(ctx, opts)
	if ee, ok := errors.AsType[utilexec.CodeExitError](err); ok {
		return &ExitError{Code: ee.Code}
	}
	if err != nil {
		if se, ok := errors.AsType[*StatusError](err); ok {
			return se
		}
		if se, ok := errors.AsType[*SocketError](err); ok {
			return se
		}
		return fmt.Errorf("session %s: %w", path, err)
	}
	return nil
}

// PortForward listens on 127.0.0.1 (only: the pod's ports are not opened
// to the network) for each of ports, "[LOCAL:]REMOTE" as kubectl's (LOCAL
// 0 or empty picks a free port), and forwards each connection to the
// pod's REMOTE port. It writes "Forwarding from ..." lines to out, calls
// ready with the ports once it listens, and returns when ctx ends (nil) or
// the session to the agent is lost.
func (c *Client) PortForward(ctx context.Context, namespace, name string, ports []string, ready func([]portforward.ForwardedPort), out, errOut io.Writer) error {
	var remotes []string
	for _, p := range ports {
		_, remote, _ := strings.Cut(p, ":")
		if remote == "" {
			remote = p
		}
		remotes = append(remotes, remote)
	}
	tr, up, err := c.upgrader()
	if err != nil {
		return err
	}
	u := &url.URL{Scheme: "http", Host: "nodeguard", Path: podPath(namespace, name, string(StreamPortForward)),
		RawQuery: url.Values{"ports": {strings.Join(remotes, ",")}}.Encode()}
	dialer := spdy.NewDialer(up, &http.Client{Transport: tr}, http.MethodPost, u)
	readyCh := make(chan struct{})
	pf, err := portforward.NewOnAddressesWithContext(ctx, dialer, []string{"127.0.0.1"}, ports, readyCh, out, errOut)
	if err != nil {
		return fmt.Errorf("port-forward to pod %s/%s: %w", namespace, name, err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-readyCh:
		if ready != nil {
			fp, err := pf.GetPorts()
			if err != nil {
				return fmt.Errorf("port-forward to pod %s/%s: %w", namespace, name, err)
			}
			ready(fp)
		}
	case err := <-done:
		return c.forwardError(namespace, name, err)
	}
	return c.forwardError(namespace, name, <-done)
}

func (c *Client) forwardError(namespace, name string, err error) error {
	if err == nil {
		return nil
	}
	if se, ok := errors.AsType[*StatusError](err); ok {
		return se
	}
	if se, ok := errors.AsType[*SocketError](err); ok {
		return se
	}
	return fmt.Errorf("port-forward to pod %s/%s: %w", namespace, name, err)
}

// upgrader returns the SPDY round tripper of a session, dialling the API
// socket (never a proxy from the environment), and the upgrader that turns
// the server's error answers into *StatusError.
func (c *Client) upgrader() (http.RoundTripper, spdy.Upgrader, error) {
	rt, err := httpstreamspdy.NewRoundTripperWithConfig(httpstreamspdy.RoundTripperConfig{
		PingPeriod: streamPingPeriod,
		UpgradeTransport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			conn, err := d.DialContext(ctx, "unix", c.path)
			if err != nil {
				return nil, c.socketError(err)
			}
			return conn, nil
		}},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("SPDY round tripper for %s: %w", c.path, err)
	}
	return rt, statusUpgrader{rt}, nil
}

// statusUpgrader reads an error answer of the server as *StatusError,
// with its code and message, before SPDY's upgrader would fold it into
// "unable to upgrade connection".
type statusUpgrader struct{ up spdy.Upgrader }

func (s statusUpgrader) NewConnection(resp *http.Response) (httpstream.Connection, error) {
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		var eb errorBody
		if err := json.Unmarshal(raw, &eb); err != nil || eb.Error == "" {
			eb.Error = fmt.Sprintf("upgrade %s: %s: %s", resp.Request.URL.Path, resp.Status, strings.TrimSpace(string(raw)))
		}
		return nil, &StatusError{Code: resp.StatusCode, Message: eb.Error}
	}
	return s.up.NewConnection(resp)
}
