package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// TestAgainstGRPCGo checks the hand-encoded protocol against grpc-go's
// own health client, as the kubelet's prober and nodeguard's use it.
func TestAgainstGRPCGo(t *testing.T) {
	dir := t.TempDir()
	ready, sick := filepath.Join(dir, "ready"), filepath.Join(dir, "sick")
	rules, err := parseRules([]string{"=" + ready, "live=!" + sick})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: handler(rules), Protocols: &protocols}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := healthpb.NewHealthClient(conn)
	check := func(t *testing.T, svc string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		return resp.GetStatus(), err
	}
	want := func(t *testing.T, svc string, want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		if got, err := check(t, svc); err != nil || got != want {
			t.Fatalf("Check(%q) = %v, %v; want %v", svc, got, err, want)
		}
	}

	t.Run("a service follows its file", func(t *testing.T) {
		want(t, "", healthpb.HealthCheckResponse_NOT_SERVING)
		if err := os.WriteFile(ready, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want(t, "", healthpb.HealthCheckResponse_SERVING)
	})
	t.Run("an inverted service is NOT_SERVING while its file exists", func(t *testing.T) {
		want(t, "live", healthpb.HealthCheckResponse_SERVING)
		if err := os.WriteFile(sick, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		want(t, "live", healthpb.HealthCheckResponse_NOT_SERVING)
	})
	t.Run("an unnamed service is NOT_FOUND", func(t *testing.T) {
		_, err := check(t, "nosuch")
		if status.Code(err) != codes.NotFound {
			t.Fatalf("Check(nosuch): %v, want NotFound", err)
		}
	})
	t.Run("another method is UNIMPLEMENTED", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err == nil {
			_, err = w.Recv()
		}
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("Watch: %v, want Unimplemented", err)
		}
	})
}

func TestParseRules(t *testing.T) {
	for _, bad := range []string{"nofile", "svc=", "svc=!"} {
		if _, err := parseRules([]string{bad}); err == nil {
			t.Errorf("parseRules(%q): no error", bad)
		}
	}
}

func TestServiceName(t *testing.T) {
	tests := []struct {
		name string
		msg  []byte
		want string
		bad  bool
	}{
		{"an empty request is the overall health", nil, "", false},
		{"field 1 is the service", []byte{0x0a, 3, 'a', 'b', 'c'}, "abc", false},
		{"unknown fields are skipped", []byte{0x10, 0x96, 0x01, 0x0a, 1, 'x', 0x1d, 1, 2, 3, 4}, "x", false},
		{"a length past the end is refused", []byte{0x0a, 9, 'a'}, "", true},
		{"a group is refused", []byte{0x0b}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := serviceName(tt.msg)
			if (err != nil) != tt.bad || got != tt.want {
				t.Fatalf("serviceName = %q, %v; want %q (error %v)", got, err, tt.want, tt.bad)
			}
		})
	}
}
