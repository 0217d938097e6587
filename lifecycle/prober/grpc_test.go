package prober

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
)

// slowHealth is a health server whose "slow" service never answers.
type slowHealth struct{ *health.Server }

func (s slowHealth) Check(ctx context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if r.Service == "slow" {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Server.Check(ctx, r)
}

// grpcServers are the test's servers, by port: health answers the health
// protocol (the overall health SERVING, "sick" NOT_SERVING, "slow" never),
// bare is a gRPC server without it, mute accepts connections and never
// speaks, http1 answers every connection with an HTTP/1.1 400 and closes
// it.
type grpcServers struct{ health, bare, mute, http1 int }

// serveGRPC starts the servers on listeners made by listen (127.0.0.1:0
// somewhere) and stops them when the test ends.
func serveGRPC(t testing.TB, listen func() (net.Listener, error)) grpcServers {
	t.Helper()
	var lns [4]net.Listener
	for i := range lns {
		ln, err := listen()
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
	}
	hs := health.NewServer()
	hs.SetServingStatus("sick", healthpb.HealthCheckResponse_NOT_SERVING)
	withHealth := grpc.NewServer()
	healthpb.RegisterHealthServer(withHealth, slowHealth{hs})
	bare := grpc.NewServer()
	go withHealth.Serve(lns[0])
	go bare.Serve(lns[1])
	go func() {
		for {
			c, err := lns[3].Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n"))
			c.Close()
		}
	}()
	t.Cleanup(func() {
		withHealth.Stop()
		bare.Stop()
		lns[2].Close()
		lns[3].Close()
	})
	port := func(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }
	return grpcServers{health: port(lns[0]), bare: port(lns[1]), mute: port(lns[2]), http1: port(lns[3])}
}

func grpcProbe(port int, service string) *corev1.Probe {
	a := &corev1.GRPCAction{Port: int32(port)}
	if service != "" {
		a.Service = &service
	}
	return &corev1.Probe{TimeoutSeconds: 1, ProbeHandler: corev1.ProbeHandler{GRPC: a}}
}

// testGRPC runs the table of gRPC probes through h against srv at
// 127.0.0.1, checking the kubelet's messages.
func testGRPC(t *testing.T, h Handlers, srv grpcServers) {
	target := Target{PodIP: "127.0.0.1"}
	tests := []struct {
		name    string
		probe   *corev1.Probe
		want    Result
		message string
	}{
		{"the overall health SERVING succeeds", grpcProbe(srv.health, ""), Success, "service healthy"},
		{"a service NOT_SERVING fails", grpcProbe(srv.health, "sick"), Failure, `service unhealthy (responded with "NOT_SERVING")`},
		{"an unknown service fails with the server's NotFound", grpcProbe(srv.health, "nosuch"), Failure, "error: health rpc probe failed: rpc error: code = NotFound"},
		{"a server without the health service fails", grpcProbe(srv.bare, ""), Failure, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health)"},
		{"a health check past timeoutSeconds fails", grpcProbe(srv.health, "slow"), Failure, "timeout: health rpc did not complete within 1s"},
		{"a server that never speaks gRPC fails at the timeout", grpcProbe(srv.mute, ""), Failure, `timeout: failed to connect service "127.0.0.1:`},
		{"a server that answers HTTP/1.1 and closes is connected to again until the timeout", grpcProbe(srv.http1, ""), Failure, `timeout: failed to connect service "127.0.0.1:`},
		{"a closed port fails at the timeout, as with the kubelet's blocking dial", grpcProbe(1, ""), Failure, `timeout: failed to connect service "127.0.0.1:1" within 1s`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, msg, err := h.Probe(context.Background(), tt.probe, target)
			if err != nil || got != tt.want || !strings.HasPrefix(msg, tt.message) {
				t.Fatalf("Probe = %v %q %v, want %v %q...", got, msg, err, tt.want, tt.message)
			}
		})
	}
}

func TestGRPCProbes(t *testing.T) {
	t.Run("on loopback", func(t *testing.T) {
		srv := serveGRPC(t, func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") })
		var d net.Dialer
		testGRPC(t, Handlers{Dial: d.DialContext}, srv)
	})
	t.Run("in a network namespace, dialled by NetNSDialer", func(t *testing.T) {
		file := tempNetNS(t)
		srv := serveGRPC(t, func() (ln net.Listener, err error) {
			err = ns.WithNetNSPath(file, func(ns.NetNS) error {
				ln, err = net.Listen("tcp", "127.0.0.1:0")
				return err
			})
			return ln, err
		})
		dial, closeNS, err := NetNSDialer(file)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeNS() })
		testGRPC(t, Handlers{Dial: dial}, srv)
	})
	t.Run("without a dialer the probe cannot be made", func(t *testing.T) {
		_, _, err := Handlers{}.Probe(context.Background(), grpcProbe(9090, ""), Target{PodIP: "127.0.0.1"})
		if err == nil || !strings.Contains(err.Error(), ErrUnsupported.Error()) {
			t.Fatalf("err %v, want ErrUnsupported", err)
		}
	})
}

// BenchmarkGRPCProbe measures one gRPC probe's CPU in this process (user +
// system, as cpu-ns/op): a fresh plaintext connection, one Check, and its
// close, the server's share included (it runs in this process too, so
// the figure is an upper bound).
func BenchmarkGRPCProbe(b *testing.B) {
	srv := serveGRPC(b, func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") })
	var d net.Dialer
	h := Handlers{Dial: d.DialContext}
	probe := grpcProbe(srv.health, "")
	target := Target{PodIP: "127.0.0.1"}
	before := cpuTime(b)
	for b.Loop() {
		if r, msg, err := h.Probe(context.Background(), probe, target); r != Success {
			b.Fatalf("probe: %v %q %v", r, msg, err)
		}
	}
	b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkGRPCProbeClient measures what one gRPC probe costs the prober
// alone (user + system CPU of this process, as cpu-ns/op; the kernel's
// share of each handshake included): the health server is a process of
// its own in a network namespace of the benchmark's, dialled through
// NetNSDialer, as a pod's server is. Side by side: the probe as shipped
// (one HTTP/2 client connection of its own) and as it was made before, a
// grpc.ClientConn per probe as the kubelet's prober makes it.
func BenchmarkGRPCProbeClient(b *testing.B) {
	file := tempNetNS(b)
	port := startServer(b, grpcServerEnv, file)
	dial, closeNS, err := NetNSDialer(file)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { closeNS() })
	target := Target{PodIP: "127.0.0.1"}
	probe := grpcProbe(port, "")
	b.Run("an HTTP/2 connection of its own", func(b *testing.B) {
		h := Handlers{Dial: dial}
		before := cpuTime(b)
		for b.Loop() {
			if r, msg, err := h.Probe(context.Background(), probe, target); r != Success {
				b.Fatalf("probe: %v %q %v", r, msg, err)
			}
		}
		b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	b.Run("a grpc.ClientConn per probe", func(b *testing.B) {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		before := cpuTime(b)
		for b.Loop() {
			if err := clientConnCheck(dial, addr); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
}

// clientConnCheck is a health check through a grpc.ClientConn made and
// closed for it, as the kubelet's prober (and nodeguard's before) made
// each gRPC probe.
func clientConnCheck(dial DialFunc, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dial(ctx, "tcp", addr) }))
	if err != nil {
		return err
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("status %v", resp.GetStatus())
	}
	return nil
}

// A server that answers the call with an HTTP status of its own (a proxy
// or an HTTP/2 server that is not gRPC) fails with the code grpc-go's
// client gives that status: a 404 is the kubelet's "does not implement
// the grpc health protocol", a 503 a failed health rpc.
func TestGRPCProbeOfAnHTTP2ServerThatIsNotGRPC(t *testing.T) {
	for _, tc := range []struct {
		status int
		want   string
	}{
		{http.StatusNotFound, "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): unexpected HTTP status code received from server: 404 (Not Found)"},
		{http.StatusServiceUnavailable, "error: health rpc probe failed: rpc error: code = Unavailable desc = unexpected HTTP status code received from server: 503 (Service Unavailable)"},
	} {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var protocols http.Protocols
			protocols.SetUnencryptedHTTP2(true)
			srv := &http.Server{Protocols: &protocols, ReadHeaderTimeout: 5 * time.Second,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tc.status) })}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			var d net.Dialer
			got, msg, err := Handlers{Dial: d.DialContext}.Probe(context.Background(), grpcProbe(ln.Addr().(*net.TCPAddr).Port, ""), Target{PodIP: "127.0.0.1"})
			if err != nil || got != Failure || msg != tc.want {
				t.Fatalf("Probe = %v %q %v, want Failure %q", got, msg, err, tc.want)
			}
		})
	}
}

func TestGRPCCodesOfHTTPStatusesAndResets(t *testing.T) {
	for status, want := range map[int]codes.Code{400: codes.Internal, 401: codes.Unauthenticated, 403: codes.PermissionDenied,
		404: codes.Unimplemented, 429: codes.Unavailable, 502: codes.Unavailable, 503: codes.Unavailable, 504: codes.Unavailable, 500: codes.Unknown} {
		if got := httpCode(status); got != want {
			t.Errorf("HTTP %d: %v, want %v", status, got, want)
		}
	}
	for rst, want := range map[http2.ErrCode]codes.Code{http2.ErrCodeRefusedStream: codes.Unavailable, http2.ErrCodeCancel: codes.Canceled,
		http2.ErrCodeFlowControl: codes.ResourceExhausted, http2.ErrCodeEnhanceYourCalm: codes.ResourceExhausted,
		http2.ErrCodeInadequateSecurity: codes.PermissionDenied, http2.ErrCodeProtocol: codes.Internal, http2.ErrCodeNo: codes.Internal} {
		if got := rstCode(rst); got != want {
			t.Errorf("RST_STREAM %v: %v, want %v", rst, got, want)
		}
	}
}
