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
	"net/http"
	"net/url"
	"os"
	"strconv"
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
	var (
		code codes.Code
		msg  string
		resp *healthpb.HealthCheckResponse
	)
	for {
		conn, err := dialUntil(cctx, h.Dial, addr)
		if err != nil {
			if cctx.Err() != nil {
				return Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, to, err), nil
			}
			return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
		}
		var ready bool
		code, msg, resp, ready, err = healthCheck(cctx, conn, addr, service)
		conn.Close()
		// The connection's deadline is the context's, and may fire a
		// little before the context says it is done.
		timedOut := err != nil && (cctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded))
		if err != nil && !ready {
			// The connection never became ready (the server never sent
			// its HTTP/2 settings: it closed, reset, answered something
			// else or said nothing): as gRPC's blocking dial, connect
			// again until the timeout.
			if timedOut || !waitReconnect(cctx) {
				return Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, to, context.DeadlineExceeded), nil
			}
			continue
		}
		switch {
		case timedOut:
			code = codes.DeadlineExceeded
		case err != nil:
			return Failure, fmt.Sprintf("error: health rpc probe failed: %+v", status.Error(codes.Unavailable, err.Error())), nil
		}
		break
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
		if !waitReconnect(ctx) {
			return nil, err
		}
	}
}

// waitReconnect waits reconnectDelay, jittered, and reports whether ctx
// is still live after it.
func waitReconnect(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	wait := time.NewTimer(reconnectDelay - reconnectDelay/5 + rand.N(2*reconnectDelay/5))
	defer wait.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wait.C:
		return true
	}
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
// OK, the response; ready says whether the server sent its settings (the
// connection became ready, as gRPC counts it). err is a failure before a
// status: ctx's end (the connection's deadline), a transport error or the
// connection gone away.
func healthCheck(ctx context.Context, conn net.Conn, authority, service string) (code codes.Code, text string, resp *healthpb.HealthCheckResponse, ready bool, err error) {
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return 0, "", nil, false, err
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
		return 0, "", nil, false, err
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
			return 0, "", nil, false, err
		}
	}
	bw := bufio.NewWriterSize(conn, 512)
	fr := http2.NewFramer(bw, bufio.NewReaderSize(conn, 4096))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 16 << 10
	if _, err := bw.WriteString(http2.ClientPreface); err != nil {
		return 0, "", nil, ready, ctxErr(err)
	}
	// No server push: its PUSH_PROMISE header blocks are not decoded.
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0}); err != nil {
		return 0, "", nil, ready, ctxErr(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: healthStream, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		return 0, "", nil, ready, ctxErr(err)
	}
	if err := fr.WriteData(healthStream, true, body); err != nil {
		return 0, "", nil, ready, ctxErr(err)
	}
	if err := bw.Flush(); err != nil {
		return 0, "", nil, ready, ctxErr(err)
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
			return 0, "", nil, ready, ctxErr(err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				ready = true
				ack(fr.WriteSettingsAck())
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				ack(fr.WritePing(true, f.Data))
			}
		case *http2.GoAwayFrame:
			if f.LastStreamID < healthStream {
				return 0, "", nil, ready, fmt.Errorf("the server went away (%v) before the call", f.ErrCode)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID != healthStream {
				continue
			}
			// The server cancels the call at the deadline it was sent
			// (grpc-timeout), which may come a little before ours.
			if dl, ok := ctx.Deadline(); ok && f.ErrCode == http2.ErrCodeCancel && time.Until(dl) < deadlineSlack {
				return codes.DeadlineExceeded, "", nil, ready, nil
			}
			return rstCode(f.ErrCode), fmt.Sprintf("stream terminated by RST_STREAM with error code: %v", f.ErrCode), nil, ready, nil
		case *http2.MetaHeadersFrame:
			if f.StreamID != healthStream {
				continue
			}
			if !headers {
				headers = true
				if st := f.PseudoValue("status"); st != "200" {
					n, _ := strconv.Atoi(st)
					return httpCode(n), fmt.Sprintf("unexpected HTTP status code received from server: %s (%s)", st, http.StatusText(n)), nil, ready, nil
				}
			}
			// A trailers-only response (an error, at once) has its
			// status in the headers; otherwise the message comes first
			// and the status in the trailers that end the stream.
			if code, text, ok := grpcStatus(f.Fields); ok {
				if code != codes.OK {
					return code, text, nil, ready, nil
				}
				code, text, resp := decodeHealthResponse(data)
				return code, text, resp, ready, nil
			}
			if f.StreamEnded() {
				return codes.Internal, "server closed the stream without sending trailers", nil, ready, nil
			}
		case *http2.DataFrame:
			if f.StreamID != healthStream {
				continue
			}
			if len(data)+len(f.Data()) > maxHealthResponse {
				return codes.ResourceExhausted, fmt.Sprintf("health check response larger than %d bytes", maxHealthResponse), nil, ready, nil
			}
			data = append(data, f.Data()...)
			if f.StreamEnded() {
				return codes.Internal, "server closed the stream without sending trailers", nil, ready, nil
			}
		}
	}
}

// decodeHealthResponse decodes the response's one uncompressed
// length-prefixed message.
func decodeHealthResponse(data []byte) (codes.Code, string, *healthpb.HealthCheckResponse) {
	if len(data) < 5 || data[0] != 0 || int(binary.BigEndian.Uint32(data[1:5])) != len(data)-5 {
		return codes.Internal, fmt.Sprintf("malformed health check response: %d bytes, want one uncompressed length-prefixed message", len(data)), nil
	}
	var out healthpb.HealthCheckResponse
	if err := proto.Unmarshal(data[5:], &out); err != nil {
		return codes.Internal, fmt.Sprintf("malformed health check response: %v", err), nil
	}
	return codes.OK, "", &out
}

// httpCode is the gRPC code of a response's HTTP status other than 200,
// as grpc-go's client maps it.
func httpCode(status int) codes.Code {
	switch status {
	case http.StatusBadRequest:
		return codes.Internal
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.Unimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codes.Unavailable
	}
	return codes.Unknown
}

// rstCode is the gRPC code of a stream reset by the server, as grpc-go's
// client maps the HTTP/2 error code.
func rstCode(c http2.ErrCode) codes.Code {
	switch c {
	case http2.ErrCodeRefusedStream:
		return codes.Unavailable
	case http2.ErrCodeCancel:
		return codes.Canceled
	case http2.ErrCodeFlowControl, http2.ErrCodeEnhanceYourCalm:
		return codes.ResourceExhausted
	case http2.ErrCodeInadequateSecurity:
		return codes.PermissionDenied
	}
	return codes.Internal
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
