package prober

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/netplumb"
)

// tempNetNS makes a network namespace of the test's own (privileged tests
// only) and returns its file; it is removed when the test ends.
func tempNetNS(t testing.TB) string {
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
	return file
}

// loopbackListener listens on a free port of the loopback of the network
// namespace at file.
func loopbackListener(t testing.TB, file string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := ns.WithNetNSPath(file, func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return ln
}

// testNetNS makes a network namespace of the test's own with an HTTP
// server on its loopback, and returns a dialer into it and the server's
// port. /ok answers 200, /fail 500, /redirect 302 to /ok, /elsewhere 302
// to another host; hosts records
// the Host of each request.
func testNetNS(t testing.TB) (DialFunc, int, *[]string, string) {
	t.Helper()
	file := tempNetNS(t)
	ln := loopbackListener(t, file)
	var mu sync.Mutex
	var hosts []string
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hosts = append(hosts, r.Host+" "+r.Header.Get("X-Probe")+" "+r.UserAgent()+" "+r.Header.Get("Accept")+" encoding="+r.Header.Get("Accept-Encoding"))
		mu.Unlock()
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere.invalid/ok", http.StatusFound)
	})
	mux.HandleFunc("/hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "after the hints")
	})
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
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
		{"an httpGet probe redirected in a loop fails after 10 redirects", httpGet("/loop"), Failure},
		{"an httpGet probe skips an early hints answer for the final one", httpGet("/hints"), Success},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, msg, err := h.Probe(context.Background(), tt.probe, target)
			if err != nil || got != tt.want {
				t.Fatalf("Probe = %v %q %v, want %v", got, msg, err, tt.want)
			}
			if tt.probe.HTTPGet != nil && tt.probe.HTTPGet.Path == "/loop" && !strings.HasSuffix(msg, "stopped after 10 redirects") {
				t.Errorf("a redirect loop's message %q, want it to end in stopped after 10 redirects", msg)
			}
		})
	}
	t.Run("a refused tcpSocket probe says so as the kubelet's", func(t *testing.T) {
		p := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(1)}}}
		got, msg, err := h.Probe(context.Background(), p, target)
		if want := "dial tcp 127.0.0.1:1: connect: connection refused"; err != nil || got != Failure || msg != want {
			t.Fatalf("Probe = %v %q %v, want Failure %q", got, msg, err, want)
		}
	})
	t.Run("the Host header and the others are sent", func(t *testing.T) {
		// As the kubelet's: Accept */*, and no Accept-Encoding (its
		// transport disables compression).
		want := "probe.example 1 " + userAgent + " */* encoding="
		if len(*hosts) == 0 || (*hosts)[0] != want {
			t.Fatalf("requests seen %q, want %q first", *hosts, want)
		}
	})
}

// An https probe: TLS without a certificate check (the pod's certificate
// names a service, not its IP), the same request inside; an https probe
// of a plain HTTP server is net/http's ErrSchemeMismatch, which the
// hooks' fallback to HTTP looks for.
func TestNetNSHTTPSProbes(t *testing.T) {
	dial, plainPort, _, file := testNetNS(t)
	ln := loopbackListener(t, file)
	seen := make(chan string, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Host + " " + r.URL.Path + " " + r.UserAgent() + " " + r.Proto
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		io.WriteString(w, "tls body")
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	t.Cleanup(srv.Close)
	h := Handlers{Dial: dial}
	probe := func(port int, path string) (Result, string, error) {
		return h.Probe(context.Background(), &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Scheme: corev1.URISchemeHTTPS, Path: path, Port: intstr.FromInt32(int32(port))}}}, Target{PodIP: "127.0.0.1"})
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if got, msg, err := probe(port, "/ok"); err != nil || got != Success || msg != "tls body" {
		t.Fatalf("https probe = %v %q %v, want Success with the body", got, msg, err)
	}
	if want := fmt.Sprintf("127.0.0.1:%d /ok %s HTTP/1.1", port, userAgent); <-seen != want {
		t.Errorf("the server saw another request than %q", want)
	}
	if got, msg, err := probe(port, "/fail"); err != nil || got != Failure || msg != "HTTP probe failed with statuscode: 503" {
		t.Fatalf("https probe answered 503 = %v %q %v, want Failure", got, msg, err)
	}
	_, _, err := h.HTTPGet(context.Background(), &corev1.HTTPGetAction{Scheme: corev1.URISchemeHTTPS, Path: "/ok", Port: intstr.FromInt32(int32(plainPort))},
		Target{PodIP: "127.0.0.1"}, time.Second)
	if !errors.Is(err, http.ErrSchemeMismatch) {
		t.Fatalf("https GET of a plain HTTP server: %v, want http.ErrSchemeMismatch", err)
	}
}

// TestNetNSDialer: the dialer's connections are made in its namespace (the
// server below listens on that namespace's loopback alone) and behave as
// net.Dialer's: the same errors, the context's deadline and cancellation,
// names resolved, UDP as well as TCP.
func TestNetNSDialer(t *testing.T) {
	dial, port, _, file := testNetNS(t)
	ctx := context.Background()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	t.Run("a connection reaches the namespace's loopback and knows its addresses", func(t *testing.T) {
		c, err := dial(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		local, ok := c.LocalAddr().(*net.TCPAddr)
		if c.RemoteAddr().String() != addr || !ok || !local.IP.Equal(net.IPv4(127, 0, 0, 1)) || local.Port == 0 {
			t.Fatalf("conn %T remote %v local %v, want a connection from 127.0.0.1 to %s", c, c.RemoteAddr(), c.LocalAddr(), addr)
		}
		// Closed cleanly within a second, as the kubelet's probe dialer.
		rc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var linger *unix.Linger
		if err := rc.Control(func(fd uintptr) { linger, err = unix.GetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER) }); err != nil || linger == nil {
			t.Fatalf("SO_LINGER: %v", err)
		}
		if linger.Onoff != 1 || linger.Linger != 1 {
			t.Errorf("SO_LINGER %+v, want on, 1 s", *linger)
		}
		if _, err := io.WriteString(c, "GET /ok HTTP/1.0\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("response %v %v, want 200", resp, err)
		}
		// Past the end, the server's close is io.EOF itself, as a
		// net.TCPConn's.
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Fatalf("reading to the end: %v", err)
		}
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("read after the server closed: %v, want io.EOF", err)
		}
	})
	t.Run("a connection's errors are net.TCPConn's", func(t *testing.T) {
		c, err := dial(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		// Nothing sent, so nothing comes: the deadline ends the read.
		if err := c.SetReadDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		_, err = c.Read(make([]byte, 1))
		var op *net.OpError
		var ne net.Error
		want := fmt.Sprintf("read tcp %s->%s: i/o timeout", c.LocalAddr(), addr)
		if !errors.As(err, &op) || op.Op != "read" || !errors.As(err, &ne) || !ne.Timeout() ||
			!errors.Is(err, os.ErrDeadlineExceeded) || err.Error() != want {
			t.Fatalf("read past the deadline: %v, want %q (a net.Error whose Timeout is true)", err, want)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after close: %v, want net.ErrClosed", err)
		}
	})
	t.Run("a closed port is refused with net.Dialer's error", func(t *testing.T) {
		_, err := dial(ctx, "tcp", "127.0.0.1:1")
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" || !errors.Is(err, syscall.ECONNREFUSED) ||
			err.Error() != "dial tcp 127.0.0.1:1: connect: connection refused" {
			t.Fatalf("err %v, want net.Dialer's dial tcp 127.0.0.1:1: connect: connection refused", err)
		}
	})
	// A listener with a backlog of 0 whose one connection is never
	// accepted: the kernel drops the next SYNs, so a dial hangs.
	hanging := func(t *testing.T) string {
		var addr string
		if err := ns.WithNetNSPath(file, func(ns.NetNS) error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return err
			}
			t.Cleanup(func() { unix.Close(fd) })
			if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				return err
			}
			if err := unix.Listen(fd, 0); err != nil {
				return err
			}
			sa, err := unix.Getsockname(fd)
			if err != nil {
				return err
			}
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*unix.SockaddrInet4).Port))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		c, err := dial(ctx, "tcp", addr)
		if err != nil {
			t.Fatalf("fill the backlog: %v", err)
		}
		t.Cleanup(func() { c.Close() })
		return addr
	}
	t.Run("a connection nobody answers ends at the context's deadline, a timeout", func(t *testing.T) {
		addr := hanging(t)
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		c, err := dial(cctx, "tcp", addr)
		if err == nil {
			c.Close()
			t.Fatal("connected past a full backlog")
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || err.Error() != "dial tcp "+addr+": i/o timeout" {
			t.Fatalf("err %v, want net.Dialer's dial tcp %s: i/o timeout", err, addr)
		}
	})
	t.Run("a cancelled dial ends with the context's error", func(t *testing.T) {
		addr := hanging(t)
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		c, err := dial(cctx, "tcp", addr)
		if err == nil {
			c.Close()
			t.Fatal("connected past a full backlog")
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	})
	t.Run("a name is resolved and its addresses tried in turn", func(t *testing.T) {
		// localhost is ::1 and 127.0.0.1; the server has only the latter.
		c, err := dial(ctx, "tcp", net.JoinHostPort("localhost", strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if _, err := dial(ctx, "tcp", "nothing.invalid:80"); err == nil || !strings.Contains(err.Error(), "nothing.invalid") {
			t.Fatalf("err %v, want the lookup's error naming the host", err)
		}
	})
	t.Run("no host is the namespace itself, as for net.Dialer", func(t *testing.T) {
		// An httpGet probe of a host-network pod whose pod IP is
		// unknown dials ":port".
		c, err := dial(ctx, "tcp", net.JoinHostPort("", strconv.Itoa(port)))
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})
	t.Run("udp is dialled in the namespace too", func(t *testing.T) {
		var pc net.PacketConn
		if err := ns.WithNetNSPath(file, func(ns.NetNS) error {
			var err error
			pc, err = net.ListenPacket("udp", "127.0.0.1:0")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		go func() {
			b := make([]byte, 64)
			n, from, err := pc.ReadFrom(b)
			if err == nil {
				pc.WriteTo(b[:n], from)
			}
		}()
		c, err := dial(ctx, "udp", pc.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 64)
		if n, err := c.Read(b); err != nil || string(b[:n]) != "ping" {
			t.Fatalf("echo %q %v, want ping", b[:n], err)
		}
	})
	t.Run("what it cannot dial is refused, naming it", func(t *testing.T) {
		for _, tc := range []struct{ network, addr, want string }{
			{"unix", "/run/x.sock", "dial unix: unknown network unix"},
			{"tcp", "127.0.0.1", "dial tcp: address 127.0.0.1: missing port in address"},
			{"tcp", "[fe80::1%eth0]:80", `dial tcp [fe80::1%eth0]:80: IPv6 zone "eth0": want the interface's index, names are not resolved in the node's network namespace`},
		} {
			if _, err := dial(ctx, tc.network, tc.addr); err == nil || err.Error() != tc.want {
				t.Errorf("dial %s %s: %v, want %s", tc.network, tc.addr, err, tc.want)
			}
		}
	})
	t.Run("after close it dials no more", func(t *testing.T) {
		d, closeNS, err := NetNSDialer(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := closeNS(); err != nil {
			t.Fatal(err)
		}
		if _, err := d(ctx, "tcp", addr); !errors.Is(err, ErrDialerClosed) {
			t.Fatalf("err %v, want ErrDialerClosed", err)
		}
		if _, _, err := NetNSDialer(filepath.Join(t.TempDir(), "none")); err == nil {
			t.Fatal("a dialer into a namespace that does not exist")
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
	// The same TCP probe dialled as NetNSDialer did before its socket
	// maker: every dial moved a fresh locked thread into the namespace
	// and back (ns.Do), parked across the connect.
	b.Run("tcpSocket through ns.Do", func(b *testing.B) {
		n, err := ns.GetNS(file)
		if err != nil {
			b.Fatal(err)
		}
		defer n.Close()
		nsDo := func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := n.Do(func(ns.NetNS) error {
				var d net.Dialer
				c, err := d.DialContext(ctx, network, addr)
				conn = c
				return err
			})
			return conn, err
		}
		probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}}
		old := Handlers{Dial: nsDo}
		before := cpuTime(b)
		for b.Loop() {
			if r, msg, err := old.Probe(context.Background(), probe, target); r != Success {
				b.Fatalf("probe: %v %q %v", r, msg, err)
			}
		}
		b.ReportMetric(float64((cpuTime(b)-before).Nanoseconds())/float64(b.N), "cpu-ns/op")
	})
	// The same TCP probe from a goroutine that stays in the namespace: what
	// the hand-off to NetNSDialer's socket maker costs on top.
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

// TestTheDialerPoolsSocketsOfTheKindsAskedFor: after a first dial of a
// kind, the maker keeps sockets of that kind ready, and dials take them
// (they reach the namespace's loopback, so they were made there) without
// asking the maker, which tops the pool up when it runs below half; no
// other kind is pooled, and close closes what is left in the pools.
func TestTheDialerPoolsSocketsOfTheKindsAskedFor(t *testing.T) {
	_, port, _, file := testNetNS(t)
	d, err := newNSDialer(file)
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	dial, closeNS := d.dial, d.close
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx := context.Background()
	dialOnce := func() {
		t.Helper()
		c, err := dial(ctx, "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	tcp4 := poolIndex(unix.AF_INET, unix.SOCK_STREAM)
	if n := len(d.pools[tcp4]); n != 0 {
		t.Fatalf("%d sockets pooled before any dial", n)
	}
	dialOnce()
	waitFor(t, "the pool to fill", func() bool { return len(d.pools[tcp4]) == socketPool })
	for i := range d.pools {
		if i != tcp4 && len(d.pools[i]) != 0 {
			t.Errorf("pool %d (a kind never dialled) holds %d sockets", i, len(d.pools[i]))
		}
	}
	for range socketPool/2 + 1 {
		dialOnce() // from the pool: each reaches the namespace's loopback
	}
	waitFor(t, "the pool to be topped up", func() bool { return len(d.pools[tcp4]) == socketPool })
	for range 2 * socketPool {
		dialOnce() // faster than a top-up: some ask the maker
	}
	pooled := <-d.pools[tcp4]
	if err := closeNS(); err != nil {
		t.Fatal(err)
	}
	if n := len(d.pools[tcp4]); n != 0 {
		t.Fatalf("%d sockets left in the pool after close", n)
	}
	if _, err := unix.Getsockname(pooled); err != nil {
		t.Fatalf("a socket taken from the pool before close: %v, want it open (it is the taker's)", err)
	}
	unix.Close(pooled)
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
	}
}
