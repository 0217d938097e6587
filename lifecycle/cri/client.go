package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// maxMsgSize bounds a CRI message either way, as the kubelet's remote
	// runtime does (16 MiB): ListContainers on a dense node and ExecSync
	// output are the large ones.
	maxMsgSize = 16 << 20
	// criAPIVersion is the version this client speaks and asks for.
	criAPIVersion = "v1"
	// endpointHint tells a person what to check when the socket is unusable.
	endpointHint = "is containerd running? set its socket with --runtime-endpoint"
)

// RuntimeInfo is what the runtime said in the Version handshake.
type RuntimeInfo struct {
	Name       string // "containerd"
	Version    string // "1.6.20~ds1"
	APIVersion string // the CRI version it serves: "v1"
}

// Client is a connection to a CRI v1 runtime. Its methods may be called
// concurrently.
type Client struct {
	endpoint string
	conn     *grpc.ClientConn
	rt       runtimeapi.RuntimeServiceClient
	img      runtimeapi.ImageServiceClient
	info     RuntimeInfo
	opts     dialOptions
	pid      int
}

// Option configures Dial.
type Option func(*dialOptions)

type dialOptions struct {
	pull bool
}

// WithImagePull lets EnsureImage and PullImage pull images: only for a
// node with a registry configured. Without it nothing is pulled.
func WithImagePull() Option { return func(o *dialOptions) { o.pull = true } }

// Dial connects to the CRI runtime at endpoint ("unix:///path" or a bare
// socket path) and shakes hands with runtime v1 Version; timeout (if > 0)
// bounds the whole of it, as ctx does. Errors: *EndpointError when the
// socket is missing (wrapping fs.ErrNotExist), not a socket (ErrNotSocket)
// or refuses connections (syscall.ECONNREFUSED); ErrNotCRI when the peer
// is not a CRI v1 server, naming what answered; context.DeadlineExceeded
// when the handshake timed out.
func Dial(ctx context.Context, endpoint string, timeout time.Duration, options ...Option) (_ *Client, retErr error) {
	var o dialOptions
	for _, opt := range options {
		opt(&o)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	path, err := socketPath(endpoint)
	if err != nil {
		return nil, err
	}
	pid, err := probeSocket(ctx, endpoint, path)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgSize), grpc.MaxCallSendMsgSize(maxMsgSize)))
	if err != nil {
		return nil, fmt.Errorf("dial CRI %s: %w", endpoint, err)
	}
	defer func() {
		if retErr != nil {
			conn.Close()
		}
	}()
	c := &Client{
		endpoint: endpoint,
		conn:     conn,
		rt:       runtimeapi.NewRuntimeServiceClient(conn),
		img:      runtimeapi.NewImageServiceClient(conn),
		opts:     o,
		pid:      pid,
	}
	v, err := c.rt.Version(ctx, &runtimeapi.VersionRequest{Version: criAPIVersion})
	if err != nil {
		return nil, c.handshakeError(ctx, err)
	}
	c.info = RuntimeInfo{Name: v.GetRuntimeName(), Version: v.GetRuntimeVersion(), APIVersion: v.GetRuntimeApiVersion()}
	return c, nil
}

// socketPath returns the socket path of endpoint.
func socketPath(endpoint string) (string, error) {
	path := endpoint
	if scheme, rest, ok := strings.Cut(endpoint, "://"); ok {
		if scheme != "unix" {
			return "", &EndpointError{Endpoint: endpoint, Err: fmt.Errorf("%w: scheme %q (want unix://)", ErrUnsupportedEndpoint, scheme)}
		}
		path = rest
	}
	if path == "" {
		return "", &EndpointError{Endpoint: endpoint, Err: fmt.Errorf("%w: no socket path", ErrUnsupportedEndpoint)}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", &EndpointError{Endpoint: endpoint, Path: path, Err: err}
	}
	return abs, nil
}

// probeSocket checks that path is a unix socket that accepts connections,
// so that the common failures get a clear error instead of gRPC's
// reconnect loop running into the deadline.
//
// It returns the pid of the process that serves the socket (SO_PEERCRED),
// or 0 where the kernel does not say: the runtime's own cgroup tells where
// it resolves a relative cgroup parent.
func probeSocket(ctx context.Context, endpoint, path string) (int, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, &EndpointError{Endpoint: endpoint, Path: path, Err: err, Hint: endpointHint}
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return 0, &EndpointError{Endpoint: endpoint, Path: path,
			Err: fmt.Errorf("%s: %w (mode %s)", path, ErrNotSocket, fi.Mode()), Hint: "check --runtime-endpoint"}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("dial CRI %s: connect: %w", endpoint, ctx.Err())
		}
		hint := endpointHint
		if errors.Is(err, syscall.ECONNREFUSED) {
			hint = "the socket exists but nothing listens on it: " + endpointHint
		}
		return 0, &EndpointError{Endpoint: endpoint, Path: path, Err: err, Hint: hint}
	}
	defer conn.Close()
	return peerPID(conn), nil
}

// peerPID is the pid of the process at the other end of a unix socket
// connection, from SO_PEERCRED; 0 when it cannot be read.
func peerPID(conn net.Conn) int {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// handshakeError classifies a failed Version call.
func (c *Client) handshakeError(ctx context.Context, err error) error {
	st, _ := status.FromError(err)
	switch {
	case ctx.Err() != nil || st.Code() == codes.DeadlineExceeded:
		return fmt.Errorf("dial CRI %s: Version handshake: %w (the socket accepts connections but no CRI answer came: %s)",
			c.endpoint, context.DeadlineExceeded, st.Message())
	case st.Code() == codes.Unimplemented:
		return fmt.Errorf("dial CRI %s: %w: a gRPC server answered %q%s", c.endpoint, ErrNotCRI, st.Message(), c.servicesOf(ctx))
	case st.Code() == codes.Unavailable:
		// probeSocket connected, so the transport itself failed: the
		// peer does not speak gRPC (HTTP/2).
		return fmt.Errorf("dial CRI %s: %w: the peer does not speak gRPC: %s", c.endpoint, ErrNotCRI, st.Message())
	}
	return fmt.Errorf("dial CRI %s: Version handshake: %w", c.endpoint, err)
}

// servicesOf names the services of the gRPC server that answered, when it
// offers server reflection, for ErrNotCRI's message.
func (c *Client) servicesOf(ctx context.Context) string {
	stream, err := reflectionpb.NewServerReflectionClient(c.conn).ServerReflectionInfo(ctx)
	if err != nil {
		return ""
	}
	defer stream.CloseSend()
	req := &reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}
	if err := stream.Send(req); err != nil {
		return ""
	}
	resp, err := stream.Recv()
	if err != nil {
		return ""
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return "; it serves " + strings.Join(names, ", ")
}

// Runtime returns what the runtime said in the handshake.
func (c *Client) Runtime() RuntimeInfo { return c.info }

// Endpoint returns the endpoint as given to Dial.
func (c *Client) Endpoint() string { return c.endpoint }

// RuntimePID is the pid of the process serving the endpoint when it was
// dialed (SO_PEERCRED), 0 when unknown. Its cgroup is where runc resolves
// a relative cgroup parent: the runtime's shims start in it.
func (c *Client) RuntimePID() int { return c.pid }

// CgroupDriver asks the runtime which cgroup driver it places containers
// with (CRI RuntimeConfig: containerd 2.x, CRI-O), as the kubelet's
// KubeletCgroupDriverFromCRI does: "systemd" or "cgroupfs". ok is false
// when the runtime does not say (containerd 1.6 answers Unimplemented).
func (c *Client) CgroupDriver(ctx context.Context) (driver string, ok bool, err error) {
	resp, err := c.rt.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{})
	if status.Code(err) == codes.Unimplemented {
		return "", false, nil
	}
	if err != nil {
		return "", false, opError(ctx, "runtime config", c.endpoint, err)
	}
	l := resp.GetLinux()
	if l == nil {
		return "", false, nil
	}
	switch l.GetCgroupDriver() {
	case runtimeapi.CgroupDriver_SYSTEMD:
		return "systemd", true, nil
	case runtimeapi.CgroupDriver_CGROUPFS:
		return "cgroupfs", true, nil
	}
	return "", false, nil
}

// Close closes the connection. Calls in flight fail with codes.Canceled.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("close CRI %s: %w", c.endpoint, err)
	}
	return nil
}

// opError wraps err from a CRI call with the operation and the object. gRPC
// NotFound also wraps ErrNotFound, FailedPrecondition ErrFailedPrecondition;
// a deadline also wraps the context's error, so
// errors.Is(err, context.DeadlineExceeded) holds.
func opError(ctx context.Context, op, what string, err error) error {
	st, ok := status.FromError(err)
	switch {
	case ok && st.Code() == codes.NotFound:
		return fmt.Errorf("%s %s: %w: %w", op, what, ErrNotFound, err)
	case ok && st.Code() == codes.FailedPrecondition:
		return fmt.Errorf("%s %s: %w: %w", op, what, ErrFailedPrecondition, err)
	case ok && st.Code() == codes.DeadlineExceeded:
		// gRPC's own deadline timer can fire a moment before ctx.Err()
		// is set: the code alone says the caller's deadline passed.
		return fmt.Errorf("%s %s: %w: %w", op, what, context.DeadlineExceeded, err)
	case ok && st.Code() == codes.Canceled && ctx.Err() != nil:
		return fmt.Errorf("%s %s: %w: %w", op, what, ctx.Err(), err)
	}
	return fmt.Errorf("%s %s: %w", op, what, err)
}
