package prober

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
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

	// The connection is dialled by h.Dial (the node's network namespace),
	// never by gRPC's own dialer, and is not shared between probes: as
	// the HTTP prober's, each probe opens and closes its own.
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUserAgent(userAgent),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return h.Dial(ctx, "tcp", addr)
		}),
	)
	if err != nil {
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	defer conn.Close()
	if err := waitReady(cctx, conn); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return Failure, fmt.Sprintf("timeout: failed to connect service %q within %v: %+v", addr, to, err), nil
		}
		return Failure, fmt.Sprintf("error: failed to connect service at %q: %+v", addr, err), nil
	}
	resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		if s, ok := status.FromError(err); ok {
			switch s.Code() {
			case codes.Unimplemented:
				return Failure, fmt.Sprintf("error: this server does not implement the grpc health protocol (grpc.health.v1.Health): %s", s.Message()), nil
			case codes.DeadlineExceeded:
				return Failure, fmt.Sprintf("timeout: health rpc did not complete within %v", to), nil
			}
		}
		return Failure, fmt.Sprintf("error: health rpc probe failed: %+v", err), nil
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return Failure, fmt.Sprintf("service unhealthy (responded with %q)", st.String()), nil
	}
	return Success, "service healthy", nil
}

// waitReady connects conn and waits until it is ready, as the kubelet's
// grpc.WithBlock dial does: a refused connection is retried (with gRPC's
// back-off) until ctx ends, so a server that is still starting gets the
// whole timeout to answer.
func waitReady(ctx context.Context, conn *grpc.ClientConn) error {
	conn.Connect()
	for {
		s := conn.GetState()
		if s == connectivity.Ready {
			return nil
		}
		if s == connectivity.Idle {
			conn.Connect()
		}
		if !conn.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}
