package prober

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestSchedule(t *testing.T) {
	epoch := time.Unix(1000, 0)
	grid := schedule{epoch: epoch, grid: time.Second}
	spread := schedule{epoch: epoch}
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	ms := time.Millisecond
	for _, tt := range []struct {
		name      string
		s         schedule
		now       time.Time
		jitter    time.Duration
		wantFirst time.Time
	}{
		{"a worker made between two instants waits for the next", grid, at(2300 * ms), 0, at(3 * time.Second)},
		{"a worker made on an instant probes on it", grid, at(2 * time.Second), 0, at(2 * time.Second)},
		{"a jittered worker falls on the instant after its jitter", grid, at(2300 * ms), 4500 * ms, at(7 * time.Second)},
		{"a worker made before the epoch waits for it", grid, at(-ms), 0, epoch},
		{"spread: a worker probes where it was made", spread, at(2300 * ms), 0, at(2300 * ms)},
		{"spread: or after its jitter", spread, at(2300 * ms), 4500 * ms, at(6800 * ms)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.first(tt.now, tt.jitter); !got.Equal(tt.wantFirst) {
				t.Errorf("first(%v, %v) = %v, want %v", tt.now.Sub(epoch), tt.jitter, got.Sub(epoch), tt.wantFirst.Sub(epoch))
			}
		})
	}
	p := 10 * time.Second
	for _, tt := range []struct {
		name             string
		s                schedule
		last, now        time.Time
		wantAt, wantFire time.Time
	}{
		{"one period on", grid, at(3 * time.Second), at(3005 * ms), at(13 * time.Second), at(13 * time.Second)},
		{"a probe slower than its period fires again at once, on the grid, and keeps its place",
			grid, at(3 * time.Second), at(25500 * ms), at(23 * time.Second), at(26 * time.Second)},
		{"a probe that ends on its next instant fires on it", grid, at(3 * time.Second), at(13 * time.Second), at(13 * time.Second), at(13 * time.Second)},
		{"spread: one period on, off the grid", spread, at(2300 * ms), at(2400 * ms), at(12300 * ms), at(12300 * ms)},
		{"spread: a slow probe fires again at once", spread, at(2300 * ms), at(30 * time.Second), at(22300 * ms), at(30 * time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			at, fire := tt.s.next(tt.last, tt.now, p)
			if !at.Equal(tt.wantAt) || !fire.Equal(tt.wantFire) {
				t.Errorf("next(%v, %v) = %v, fire %v; want %v, fire %v", tt.last.Sub(epoch), tt.now.Sub(epoch),
					at.Sub(epoch), fire.Sub(epoch), tt.wantAt.Sub(epoch), tt.wantFire.Sub(epoch))
			}
			// The instant after the next one is a period on, at its place.
			if at2, _ := tt.s.next(at, at.Add(time.Millisecond), p); !at2.Equal(at.Add(p)) {
				t.Errorf("the instant after %v is %v, want a period on", at.Sub(epoch), at2.Sub(epoch))
			}
		})
	}
}

// acceptorEnv makes the test binary BenchmarkPacedProbes's listener: a
// process of its own in the network namespace the variable names, so that
// the benchmark's getrusage counts the dialling side alone, as a pod's
// server is not nodeguard's process.
const acceptorEnv = "NODEGUARD_PROBER_ACCEPTOR_NETNS"

// grpcServerEnv makes the test binary BenchmarkGRPCProbeClient's server:
// a gRPC health server, a process of its own in the namespace it names.
const grpcServerEnv = "NODEGUARD_PROBER_GRPC_NETNS"

func TestMain(m *testing.M) {
	if path := os.Getenv(acceptorEnv); path != "" {
		if err := accept(path); err != nil {
			fmt.Fprintln(os.Stderr, "acceptor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if path := os.Getenv(grpcServerEnv); path != "" {
		if err := serveHealth(path); err != nil {
			fmt.Fprintln(os.Stderr, "grpc server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveHealth listens on 127.0.0.1 in the namespace at path, prints its
// port and serves the gRPC health protocol (SERVING) until it is killed.
func serveHealth(path string) error {
	ln, err := listenIn(path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return srv.Serve(ln)
}

// listenIn moves this thread into the namespace at path for good (it is
// the main goroutine's, never unlocked), listens on 127.0.0.1 there and
// prints the port for the parent to read.
func listenIn(path string) (net.Listener, error) {
	runtime.LockOSThread()
	n, err := ns.GetNS(path)
	if err != nil {
		return nil, err
	}
	if err := n.Set(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	return ln, nil
}

// accept listens on 127.0.0.1 in the namespace at path, prints its port
// and accepts and closes connections until it is killed.
func accept(path string) error {
	ln, err := listenIn(path)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		c.Close()
	}
}

// startAcceptor starts the listener process in the namespace at file and
// returns its port; it is killed (by its pid) when b ends.
func startAcceptor(b *testing.B, file string) int { return startServer(b, acceptorEnv, file) }

// startServer starts this test binary as the server that env names in
// the namespace at file and returns the port it prints; it is killed (by
// its pid) when b ends.
func startServer(b *testing.B, env, file string) int {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env+"="+file)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("the acceptor's port: %v", err)
	}
	port, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		b.Fatalf("the acceptor's port %q: %v", line, err)
	}
	return port
}

// BenchmarkPacedProbes measures what a node's probes cost this process
// at the pace they are made in (user + system CPU from getrusage, per
// probe and in cores), through the Manager's own workers: pods pods with
// a tcpSocket readiness and liveness probe each, every period, dialled
// by NetNSDialer into a network namespace of the benchmark's, where a
// process of its own accepts and closes each connection, over a window
// of two periods once every worker has made its first probe. The workers
// start within a period of the Manager's start, so each is jittered in
// its period (as after an agent's restart); on DefaultGrid against
// spread as the kubelet's tickers (Config.Spread), side by side. The
// kernel runs the listener's side of each handshake in the dialler's
// connect, so that is counted, as it is for nodeguard.
func BenchmarkPacedProbes(b *testing.B) {
	file := tempNetNS(b)
	port := intstr.FromInt32(int32(startAcceptor(b, file)))
	dial, closeNS, err := NetNSDialer(file)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { closeNS() })
	const pods, periodSeconds = 110, 5
	period := periodSeconds * time.Second
	for _, bc := range []struct {
		name   string
		spread bool
	}{{"spread", true}, {"grid=1s", false}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				m := NewManager(Config{Prober: Handlers{Dial: dial}, Spread: bc.spread})
				b.Cleanup(m.Stop)
				for i := range pods {
					tcp := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: port}}, PeriodSeconds: periodSeconds}
					pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", ReadinessProbe: tcp, LivenessProbe: tcp}}}}
					pod.UID, pod.Name = types.UID(fmt.Sprint("uid-", i)), fmt.Sprint("p", i)
					m.SetContainer(pod.UID, "c", Container{ID: "id", Running: true, StartedAt: time.Now().Add(-time.Hour), PodIP: "127.0.0.1"})
					m.AddPod(context.Background(), pod)
				}
				time.Sleep(period + DefaultGrid) // every worker has begun
				n0, cpu0, t0 := probes(b, m), cpuTime(b), time.Now()
				time.Sleep(2 * period)
				n, cpu, wall := probes(b, m)-n0, cpuTime(b)-cpu0, time.Since(t0)
				m.Stop()
				if n == 0 {
					b.Fatal("no probe was made")
				}
				b.ReportMetric(float64(cpu.Microseconds())/float64(n), "cpu-us/probe")
				b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
				b.ReportMetric(float64(n)/wall.Seconds(), "probes/s")
			}
		})
	}
}

// probes is the Manager's count of successful probes; any other result
// fails the benchmark (the listener answers every dial).
func probes(b *testing.B, m *Manager) uint64 {
	var n uint64
	for _, c := range m.Counts() {
		if c.Result != "successful" {
			b.Fatalf("%d %s probes of %s", c.Value, c.Result, c.Pod)
		}
		n += c.Value
	}
	return n
}
