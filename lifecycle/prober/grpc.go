package prober

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
)

// grpc runs a gRPC probe as the kubelet's pkg/probe/grpc does: one
// grpc.health.v1.Health/Check of the probe's service ("" when unset: the
// server's overall health) at podIP:port over a plaintext connection made
// for this probe alone, all within timeoutSeconds. SERVING is success;
// any other status, and every error (no connection, no health service,
// the timeout), is a failure with the kubelet's message, never an error:
// the kubelet, like grpc_health_probe, throws no gRPC probe result away.
func (h Handlers) grpc(ctx context.Context, a *corev1.GRPCAction, t Target, to time.Duration) (Result, string, error) {
	if h.Dial == nil {
		return Unknown, "", fmt.Errorf("grpc: %w", ErrUnsupported)
	}
	if a.Port <= 0 || a.Port > 65535 {
		return Unknown, "", fmt.Errorf("probe port %d: out of range", a.Port)
	}
	service := ""
	if a.Service != nil {
		service = *a.Service
	}
	addr := net.JoinHostPort(t.PodIP, strconv.Itoa(int(a.Port)))
	cctx, cancel := context.WithTimeout(ctx, to)
	defer cancel()

	// The connection is dialled by h.Dial (the node's network namespace)
	// and is not shared between probes: as the HTTP prober's, each probe
	// opens and closes its own. The call is made on one HTTP/2 client
	// connection of its own rather than through a grpc.ClientConn, whose
	// resolver, balancer and transport goroutines, made and torn down for
	// every probe, cost more CPU than the probe's connect and exchange
	// (BenchmarkGRPCProbeClient); what the probe says is the same.
	conn, err := dialUntil(cctx, h.Dial, addr)
	if err != nil {
		if cctx.Err() != nil {
			return Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, to, err), nil
		}
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	spoke := &firstRead{Conn: conn}
	defer spoke.Close()
	code, msg, resp, err := healthCheck(cctx, spoke, addr, service)
	// The connection's deadline is the context's, and may fire a little
	// before the context says it is done.
	timedOut := err != nil && (cctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded))
	switch {
	case timedOut && !spoke.read.Load():
		// Connected, but the server never said a word (not even its HTTP/2
		// settings): gRPC's connection never became ready.
		return Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, to, context.DeadlineExceeded), nil
	case timedOut:
		code = codes.DeadlineExceeded
	case err != nil:
		return Failure, fmt.Sprintf("error: health rpc probe failed: %+v", status.Error(codes.Unavailable, err.Error())), nil
	}
	switch code {
	case codes.OK:
	case codes.Unimplemented:
		return Failure, fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", msg), nil
	case codes.DeadlineExceeded:
		return Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", to), nil
	default:
		return Failure, fmt.Sprintf("error: health rpc probe failed: %+v", status.Error(code, msg)), nil
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", st.String()), nil
	}
	return Success, "service healthy", nil
}

// reconnectDelay is how long a refused or failed dial waits before the
// next, gRPC's default first back-off (1 s, 20% jitter): as the kubelet's
// blocking dial, a server still starting gets the probe's whole timeout.
const reconnectDelay = time.Second

// dialUntil dials addr until a dial succeeds or ctx ends, returning the
// last dial error then.
func dialUntil(ctx context.Context, dial DialFunc, addr string) (net.Conn, error) {
	for {
		c, err := dial(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		wait := time.NewTimer(reconnectDelay - reconnectDelay/5 + rand.N(2*reconnectDelay/5))
		select {
		case <-ctx.Done():
			wait.Stop()
			return nil, err
		case <-wait.C:
		}
	}
}

// firstRead is a connection that notes whether anything was read on it.
type firstRead struct {
	net.Conn
	read atomic.Bool
}

func (c *firstRead) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.read.Store(true)
	}
	return n, err
}

// maxHealthResponse bounds what a health check's response may be: its
// message is a status enum, a few bytes.
const maxHealthResponse = 64 << 10

// healthStream is the one stream a probe's connection carries.
const healthStream = 1

// deadlineSlack: a server's cancellation this close to the deadline is
// the deadline's (the server counts it from when it read grpc-timeout,
// whole milliseconds, rounded down here).
const deadlineSlack = 20 * time.Millisecond

// healthCheck makes one grpc.health.v1.Health/Check call for service on
// conn as an HTTP/2 client with prior knowledge (gRPC's plaintext), on
// the caller's goroutine alone: the client preface and its settings, the
// request's HEADERS and DATA, then frames read until the stream ends,
// acknowledging the server's settings and pings; flow control never
// binds (a request and a response of a few bytes, within the first
// window). It returns the call's gRPC status code and message and, when
// OK, the response. err is a failure before a status: ctx's end (the
// connection's deadline), a transport error, the stream reset or the
// connection gone away.
func healthCheck(ctx context.Context, conn net.Conn, authority, service string) (codes.Code, string, *healthpb.HealthCheckResponse, error) {
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return 0, "", nil, err
		}
	}
	// Cancelling ctx ends a read or write at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	ctxErr := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}

	msg, err := proto.Marshal(&healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, "", nil, err
	}
	body := make([]byte, 5+len(msg)) // gRPC's length-prefixed message
	binary.BigEndian.PutUint32(body[1:5], uint32(len(msg)))
	copy(body[5:], msg)

	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	fields := [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Check"}, {":authority", authority},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"user-agent", userAgent},
	}
	if dl, ok := ctx.Deadline(); ok {
		// The server's side of the deadline, in milliseconds as gRPC
		// sends it (at most 8 digits).
		ms := min(max(time.Until(dl).Milliseconds(), 1), 99999999)
		fields = append(fields, [2]string{"grpc-timeout", strconv.FormatInt(ms, 10) + "m"})
	}
	for _, f := range fields {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return 0, "", nil, err
		}
	}
	bw := bufio.NewWriterSize(conn, 512)
	fr := http2.NewFramer(bw, bufio.NewReaderSize(conn, 4096))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 16 << 10
	if _, err := bw.WriteString(http2.ClientPreface); err != nil {
		return 0, "", nil, ctxErr(err)
	}
	if err := fr.WriteSettings(); err != nil {
		return 0, "", nil, ctxErr(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: healthStream, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		return 0, "", nil, ctxErr(err)
	}
	if err := fr.WriteData(healthStream, true, body); err != nil {
		return 0, "", nil, ctxErr(err)
	}
	if err := bw.Flush(); err != nil {
		return 0, "", nil, ctxErr(err)
	}

	// An acknowledgement that cannot be sent fails the next read.
	ack := func(err error) {
		if err == nil {
			_ = bw.Flush()
		}
	}
	var data []byte
	headers := false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, "", nil, ctxErr(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				ack(fr.WriteSettingsAck())
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				ack(fr.WritePing(true, f.Data))
			}
		case *http2.GoAwayFrame:
			if f.LastStreamID < healthStream {
				return 0, "", nil, fmt.Errorf("the server went away (%v) before the call", f.ErrCode)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID != healthStream {
				continue
			}
			// The server cancels the call at the deadline it was sent
			// (grpc-timeout), which may come a little before ours.
			if dl, ok := ctx.Deadline(); ok && f.ErrCode == http2.ErrCodeCancel && time.Until(dl) < deadlineSlack {
				return codes.DeadlineExceeded, "", nil, nil
			}
			return 0, "", nil, fmt.Errorf("stream terminated by RST_STREAM with error code: %v", f.ErrCode)
		case *http2.MetaHeadersFrame:
			if f.StreamID != healthStream {
				continue
			}
			if !headers {
				headers = true
				if st := f.PseudoValue("status"); st != "200" {
					return codes.Unknown, fmt.Sprintf("unexpected HTTP status code received from server: %s", st), nil, nil
				}
			}
			// A trailers-only response (an error, at once) has its
			// status in the headers; otherwise the message comes first
			// and the status in the trailers that end the stream.
			if code, text, ok := grpcStatus(f.Fields); ok {
				if code != codes.OK {
					return code, text, nil, nil
				}
				return decodeHealthResponse(data)
			}
			if f.StreamEnded() {
				return codes.Internal, "server closed the stream without sending trailers", nil, nil
			}
		case *http2.DataFrame:
			if f.StreamID != healthStream {
				continue
			}
			if len(data)+len(f.Data()) > maxHealthResponse {
				return codes.ResourceExhausted, fmt.Sprintf("health check response larger than %d bytes", maxHealthResponse), nil, nil
			}
			data = append(data, f.Data()...)
			if f.StreamEnded() {
				return codes.Internal, "server closed the stream without sending trailers", nil, nil
			}
		}
	}
}

// decodeHealthResponse decodes the response's one uncompressed
// length-prefixed message.
func decodeHealthResponse(data []byte) (codes.Code, string, *healthpb.HealthCheckResponse, error) {
	if len(data) < 5 || data[0] != 0 || int(binary.BigEndian.Uint32(data[1:5])) != len(data)-5 {
		return codes.Internal, fmt.Sprintf("malformed health check response: %d bytes, want one uncompressed length-prefixed message", len(data)), nil, nil
	}
	var out healthpb.HealthCheckResponse
	if err := proto.Unmarshal(data[5:], &out); err != nil {
		return codes.Internal, fmt.Sprintf("malformed health check response: %v", err), nil, nil
	}
	return codes.OK, "", &out, nil
}

// grpcStatus reads grpc-status and grpc-message (percent-encoded) from
// a HEADERS frame's fields.
func grpcStatus(fields []hpack.HeaderField) (codes.Code, string, bool) {
	var v, msg string
	found := false
	for _, f := range fields {
		switch f.Name {
		case "grpc-status":
			v, found = f.Value, true
		case "grpc-message":
			msg = f.Value
		}
	}
	if !found {
		return 0, "", false
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return codes.Unknown, fmt.Sprintf("malformed grpc-status %q", v), true
	}
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return codes.Code(n), msg, true
}
