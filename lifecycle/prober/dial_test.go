package prober

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/netplumb"
)

// testNetNS makes a network namespace of the test's own with an HTTP
// server on its loopback, and returns a dialer into it and the server's
// port. /ok answers 200, /fail 500, /redirect 302 to /ok, /elsewhere 302
// to another host; hosts records
// the Host of each request.
func testNetNS(t testing.TB) (DialFunc, int, *[]string, string) {
	t.Helper()
	cgtest.RequirePrivileged(t)
	file := filepath.Join(t.TempDir(), "netns")
	if err := netplumb.NewNetNS(file); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := netplumb.RemoveNetNS(file); err != nil {
			t.Error(err)
		}
	})
	var ln net.Listener
	if err := ns.WithNetNSPath(file, func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var hosts []string
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host+" "+r.Header.Get("X-Probe")+" "+r.UserAgent())
		mu.Unlock()
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere.invalid/ok", http.StatusFound)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	dial, closeNS, err := NetNSDialer(file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeNS() })
	return dial, ln.Addr().(*net.TCPAddr).Port, &hosts, file
}

func TestNetNSProbes(t *testing.T) {
	dial, port, hosts, _ := testNetNS(t)
	h := Handlers{Dial: dial}
	target := Target{PodIP: "127.0.0.1", Container: &corev1.Container{Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}}
	httpGet := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromString("http"),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "Host", Value: "probe.example"}, {Name: "X-Probe", Value: "1"}}}}}
	}
	tests := []struct {
		name  string
		probe *corev1.Probe
		want  Result
	}{
		{"a tcpSocket probe to a listening port succeeds", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}}, Success},
		{"a tcpSocket probe to a closed port fails", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(1)}}}, Failure},
		{"an httpGet probe answered 200 succeeds", httpGet("/ok"), Success},
		{"an httpGet probe answered 500 fails", httpGet("/fail"), Failure},
		{"an httpGet probe follows a redirect to the same host", httpGet("redirect"), Success},
		{"an httpGet probe redirected to another host is a warning, not followed", httpGet("/elsewhere"), Warning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, msg, err := h.Probe(context.Background(), tt.probe, target)
			if err != nil || got != tt.want {
				t.Fatalf("Probe = %v %q %v, want %v", got, msg, err, tt.want)
			}
		})
	}
	t.Run("the Host header and the others are sent", func(t *testing.T) {
		want := "probe.example 1 " + userAgent
		if len(*hosts) == 0 || (*hosts)[0] != want {
			t.Fatalf("requests seen %q, want %q first", *hosts, want)
		}
	})
}

// BenchmarkNetNSProbes measures one probe's CPU in this process (user +
// system, from getrusage, as cpu-ns/op): what nodeguard spends per TCP or
// HTTP probe, the server's share included (it runs in this process too,
// so the figure is an upper bound).
func BenchmarkNetNSProbes(b *testing.B) {
	dial, port, _, file := testNetNS(b)
	h := Handlers{Dial: dial}
	target := Target{PodIP: "127.0.0.1"}
	for _, bc := range []struct {
		name  string
		probe *corev1.Probe
	}{
		{"tcpSocket", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}}},
		{"httpGet", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ok", Port: intstr.FromString(strconv.Itoa(port))}}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			before := cpuTime(b)
			for b.Loop() {
				if r, msg, err := h.Probe(context.Background(), bc.probe, target); r != Success {
					b.Fatalf("probe: %v %q %v", r, msg, err)
				}
			}
			b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
	// The same TCP probe from a goroutine that stays in the namespace: what
	// the two setns calls of every NetNSDialer dial cost on top.
	b.Run("tcpSocket without setns", func(b *testing.B) {
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}}
		var d net.Dialer
		in := Handlers{Dial: d.DialContext}
		before := cpuTime(b)
		err := ns.WithNetNSPath(file, func(ns.NetNS) error {
			for range b.N {
				if r, msg, err := in.Probe(context.Background(), probe, target); r != Success {
					return fmt.Errorf("probe: %v %q %v", r, msg, err)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
