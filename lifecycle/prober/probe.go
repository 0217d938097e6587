package prober

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// Result is a probe's outcome.
type Result int

// Results, as the kubelet's prober/results; Warning is a Prober's
// success with something to say (pkg/probe's Warning), which the worker
// records as Success.
const (
	Unknown Result = iota
	Success
	Failure
	Warning
)

func (r Result) String() string {
	switch r {
	case Success:
		return "Success"
	case Failure:
		return "Failure"
	case Warning:
		return "Warning"
	}
	return "Unknown"
}

// metricLabel is the kubelet's prober_probe_total result label.
func (r Result) metricLabel() string {
	switch r {
	case Success, Warning:
		return "successful"
	case Failure:
		return "failed"
	}
	return "unknown"
}

// Kind is a probe type.
type Kind int

// Kinds of probe.
const (
	Liveness Kind = iota
	Readiness
	Startup
)

func (k Kind) String() string {
	switch k {
	case Liveness:
		return "Liveness"
	case Readiness:
		return "Readiness"
	}
	return "Startup"
}

// spec returns c's probe of kind k, or nil.
func (k Kind) spec(c *corev1.Container) *corev1.Probe {
	switch k {
	case Liveness:
		return c.LivenessProbe
	case Readiness:
		return c.ReadinessProbe
	}
	return c.StartupProbe
}

// Target is what one probe is sent to.
type Target struct {
	ContainerID string
	PodIP       string
	Container   *corev1.Container
}

// Prober makes one probe. An error means the probe could not be made:
// its result is thrown away.
type Prober interface {
	Probe(ctx context.Context, p *corev1.Probe, t Target) (Result, string, error)
}

// Execer runs a command in a container (the CRI's ExecSync).
type Execer interface {
	ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (cri.ExecResult, error)
}

// DialFunc opens a connection to a pod; see Handlers.Dial.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// ErrUnsupported is returned for a probe handler nodeguard cannot run.
var ErrUnsupported = errors.New("probe handler not supported")

// userAgent is what the kubelet's HTTP prober sends (kube-probe/<major.minor>).
const userAgent = "kube-probe/nodeguard"

// maxBody is how much of an HTTP probe's response is read, as the kubelet
// (10 KiB): the message, not the body, is what matters.
const maxBody = 10 << 10

// maxHeaderBytes bounds an HTTP answer's status line and headers, as
// net/http's Transport by default.
const maxHeaderBytes = 10 << 20

// Handlers runs exec, tcpSocket, httpGet and grpc probes.
type Handlers struct {
	Exec Execer
	// Dial connects TCP, HTTP and gRPC probes. It must dial from the node's
	// network namespace (where the pod IPs are routed); nil refuses them
	// with ErrUnsupported.
	Dial DialFunc
}

// timeout is the probe's timeoutSeconds (1 s when unset, as defaulted).
func timeout(p *corev1.Probe) time.Duration {
	if p.TimeoutSeconds <= 0 {
		return time.Second
	}
	return time.Duration(p.TimeoutSeconds) * time.Second
}

// Probe runs p's handler against t.
func (h Handlers) Probe(ctx context.Context, p *corev1.Probe, t Target) (Result, string, error) {
	to := timeout(p)
	switch {
	case p.Exec != nil:
		return h.exec(ctx, p.Exec, t, to)
	case p.TCPSocket != nil:
		return h.tcp(ctx, p.TCPSocket, t, to)
	case p.HTTPGet != nil:
		return h.http(ctx, p.HTTPGet, t, to)
	case p.GRPC != nil:
		return h.grpc(ctx, p.GRPC, t, to)
	}
	return Unknown, "", errors.New("probe has no handler")
}

func (h Handlers) exec(ctx context.Context, a *corev1.ExecAction, t Target, to time.Duration) (Result, string, error) {
	if h.Exec == nil {
		return Unknown, "", fmt.Errorf("exec: %w", ErrUnsupported)
	}
	// The runtime kills the command at the timeout; the context gives it
	// a little longer to say so.
	cctx, cancel := context.WithTimeout(ctx, to+2*time.Second)
	defer cancel()
	res, err := h.Exec.ExecSync(cctx, t.ContainerID, a.Command, to)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return Failure, fmt.Sprintf("command %q timed out", a.Command), nil
		}
		return Unknown, "", err
	}
	out := string(res.Stdout) + string(res.Stderr)
	if res.ExitCode != 0 {
		return Failure, fmt.Sprintf("command %q exited with %d: %s", a.Command, res.ExitCode, out), nil
	}
	return Success, out, nil
}

func (h Handlers) tcp(ctx context.Context, a *corev1.TCPSocketAction, t Target, to time.Duration) (Result, string, error) {
	if h.Dial == nil {
		return Unknown, "", fmt.Errorf("tcpSocket: %w", ErrUnsupported)
	}
	port, err := resolvePort(a.Port, t.Container)
	if err != nil {
		return Unknown, "", err
	}
	host := a.Host
	if host == "" {
		host = t.PodIP
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	cctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	conn, err := h.Dial(cctx, "tcp", addr)
	if err != nil {
		// The dial's error is the message, as the kubelet's ("dial tcp
		// 10.1.2.3:80: connect: connection refused").
		return Failure, err.Error(), nil
	}
	conn.Close()
	return Success, "", nil
}

func (h Handlers) http(ctx context.Context, a *corev1.HTTPGetAction, t Target, to time.Duration) (Result, string, error) {
	code, body, err := h.HTTPGet(ctx, a, t, to)
	var nr *NoResponseError
	switch {
	case errors.As(err, &nr):
		return Failure, nr.Error(), nil
	case err != nil:
		return Unknown, "", err
	case code >= 300 && code < 400:
		// A redirect to another host, not followed: a success with a
		// warning, as the kubelet's HTTP prober.
		return Warning, fmt.Sprintf("Probe terminated redirects, Response body: %s", body), nil
	case code >= 200 && code < 300:
		return Success, body, nil
	}
	return Failure, fmt.Sprintf("HTTP probe failed with statuscode: %d", code), nil
}

// NoResponseError is an HTTP GET that got no response: the dial, TLS or
// the request failed, or the timeout passed. Other errors of HTTPGet say
// the request could not be made at all (a port that names nothing).
type NoResponseError struct {
	URL string
	Err error
}

func (e *NoResponseError) Error() string { return fmt.Sprintf("get %s: %v", e.URL, e.Err) }
func (e *NoResponseError) Unwrap() error { return e.Err }

// HTTPGet sends a's request to t as the kubelet's HTTP prober builds it
// (host the pod IP unless a.Host, port by number or by t.Container's port
// name, scheme, path and headers, User-Agent kube-probe), dialled with
// h.Dial and given up after to. It returns the status code and the first
// 10 KiB of the body. Lifecycle hooks send theirs through it too, so that
// both are dialled from the same place; they judge the answer themselves.
func (h Handlers) HTTPGet(ctx context.Context, a *corev1.HTTPGetAction, t Target, to time.Duration) (code int, body string, err error) {
	if h.Dial == nil {
		return 0, "", fmt.Errorf("httpGet: %w", ErrUnsupported)
	}
	port, err := resolvePort(a.Port, t.Container)
	if err != nil {
		return 0, "", err
	}
	host := a.Host
	if host == "" {
		host = t.PodIP
	}
	scheme := strings.ToLower(string(a.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	path := a.Path
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	u, err := url.Parse(scheme + "://" + net.JoinHostPort(host, strconv.Itoa(port)) + path)
	if err != nil {
		return 0, "", fmt.Errorf("httpGet: build url: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()
	header := http.Header{"User-Agent": {userAgent}, "Accept": {"*/*"}}
	var hostHeader string
	for _, hd := range a.HTTPHeaders {
		if strings.EqualFold(hd.Name, "Host") {
			hostHeader = hd.Value
			continue
		}
		header.Add(hd.Name, hd.Value)
	}
	// As the kubelet's prober (an http.Client): redirects followed only
	// to the same host, 10 at most, a Host header kept through a
	// relative one; a redirect elsewhere is the answer.
	target := u
	for via := 0; ; via++ {
		code, location, body, err := h.get(cctx, target, hostHeader, header)
		if err != nil {
			return 0, "", &NoResponseError{URL: target.String(), Err: err}
		}
		if location == "" {
			return code, body, nil
		}
		next, err := target.Parse(location)
		if err != nil {
			return 0, "", &NoResponseError{URL: target.String(), Err: fmt.Errorf("failed to parse Location header %q: %w", location, err)}
		}
		if next.Hostname() != u.Hostname() {
			return code, body, nil
		}
		if via+1 >= 10 {
			return 0, "", &NoResponseError{URL: target.String(), Err: errors.New("stopped after 10 redirects")}
		}
		if lu, _ := url.Parse(location); lu == nil || lu.IsAbs() {
			hostHeader = ""
		}
		target = next
	}
}

// get is one HTTP/1.1 GET of u on a connection of its own, closed after
// the answer, as the kubelet's prober makes it through net/http with
// keep-alives off, but on the probe's goroutine: net/http's Transport
// dials on a goroutine of its own and reads and writes each connection
// on two more, and at 250 pods the hand-offs between them cost more than
// the request. It returns the status, the Location of a redirect (301,
// 302, 303, 307, 308; "" otherwise) and the body's first maxBody bytes.
func (h Handlers) get(ctx context.Context, u *url.URL, hostHeader string, header http.Header) (code int, location, body string, err error) {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	raw, err := h.Dial(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return 0, "", "", err
	}
	// Closing the connection ends the answer, whatever is left of its
	// body: never read to its end (it may stream forever).
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := raw.SetDeadline(dl); err != nil {
			return 0, "", "", err
		}
	}
	// Cancelling ctx ends a read or write in progress.
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn := raw
	switch u.Scheme {
	case "http":
	case "https":
		// No certificate check: the pod's certificate names a service,
		// not its IP.
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, ServerName: u.Hostname()}) //nolint:gosec // as the kubelet's prober
		if err := tc.HandshakeContext(ctx); err != nil {
			// An HTTP server answering a TLS hello, as net/http's
			// Transport tells it.
			var rh tls.RecordHeaderError
			if errors.As(err, &rh) && rh.Conn != nil && string(rh.RecordHeader[:]) == "HTTP/" {
				err = http.ErrSchemeMismatch
			}
			return 0, "", "", err
		}
		conn = tc
	default:
		return 0, "", "", fmt.Errorf("unsupported protocol scheme %q", u.Scheme)
	}
	req := &http.Request{Method: http.MethodGet, URL: u, Host: hostHeader, Header: header,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Close: true}
	bw := bufio.NewWriter(conn)
	if err := req.Write(bw); err != nil {
		return 0, "", "", ctxErr(ctx, err)
	}
	if err := bw.Flush(); err != nil {
		return 0, "", "", ctxErr(ctx, err)
	}
	// The status line and headers are bounded as net/http's Transport
	// bounds them (10 MB); informational answers (1xx but 101) are
	// skipped, as it skips them.
	lr := &io.LimitedReader{R: conn, N: maxHeaderBytes + maxBody}
	br := bufio.NewReader(lr)
	var resp *http.Response
	for {
		if resp, err = http.ReadResponse(br, req); err != nil {
			if lr.N <= 0 {
				err = fmt.Errorf("server response headers exceeded %d bytes", maxHeaderBytes)
			}
			return 0, "", "", ctxErr(ctx, err)
		}
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, "", "", fmt.Errorf("read the body: %w", ctxErr(ctx, err))
	}
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		location = resp.Header.Get("Location")
	}
	return resp.StatusCode, location, string(b), nil
}

// ctxErr is err, or ctx's end when that is what cut the exchange short
// (its deadline is the connection's).
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// resolvePort turns a probe's port (a number or a container port's name)
// into a number.
func resolvePort(p intstr.IntOrString, c *corev1.Container) (int, error) {
	if p.Type == intstr.Int {
		if p.IntVal <= 0 || p.IntVal > 65535 {
			return 0, fmt.Errorf("probe port %d: out of range", p.IntVal)
		}
		return int(p.IntVal), nil
	}
	if c != nil {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return int(cp.ContainerPort), nil
			}
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("probe port %q: no such container port", p.StrVal)
}
