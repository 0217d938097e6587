package prober

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/netplumb"
)

func TestSchedule(t *testing.T) {
	epoch := time.Unix(1000, 0)
	grid := schedule{epoch: epoch, grid: time.Second}
	spread := schedule{epoch: epoch, grid: -1}
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
		name      string
		s         schedule
		last, now time.Time
		want      time.Time
	}{
		{"one period on", grid, at(3 * time.Second), at(3005 * ms), at(13 * time.Second)},
		{"a probe slower than its period skips the instants it missed", grid, at(3 * time.Second), at(25 * time.Second), at(33 * time.Second)},
		{"a probe that ends on the next instant skips it", grid, at(3 * time.Second), at(13 * time.Second), at(23 * time.Second)},
		{"an instant off the grid (a grid that does not divide the period) is put back on it", schedule{epoch: epoch, grid: 3 * time.Second}, at(3 * time.Second), at(4 * time.Second), at(15 * time.Second)},
		{"spread: one period on, off the grid", spread, at(2300 * ms), at(2400 * ms), at(12300 * ms)},
		{"spread: missed instants skipped", spread, at(2300 * ms), at(30 * time.Second), at(32300 * ms)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.s.next(tt.last, tt.now, p); !got.Equal(tt.want) {
				t.Errorf("next(%v, %v) = %v, want %v", tt.last.Sub(epoch), tt.now.Sub(epoch), got.Sub(epoch), tt.want.Sub(epoch))
			}
		})
	}
}

// BenchmarkPacedProbes measures what a node's probes cost this process
// at the pace they are made in (user + system CPU from getrusage, per
// probe and in cores), through the Manager's own workers: pods pods with
// a tcpSocket readiness and liveness probe each, every period, dialled
// into a network namespace of the benchmark's by NetNSDialer, over a
// window of two periods once every worker has made its first probe. The
// workers start as those of pods added long after the Manager started
// (each jittered in its period), on DefaultGrid against spread as the
// kubelet's tickers (Config.Grid -1), side by side. The listener only
// accepts and closes; the kernel's handshake is charged to the dialler.
func BenchmarkPacedProbes(b *testing.B) {
	cgtest.RequirePrivileged(b)
	file := filepath.Join(b.TempDir(), "netns")
	if err := netplumb.NewNetNS(file); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := netplumb.RemoveNetNS(file); err != nil {
			b.Error(err)
		}
	})
	var ln net.Listener
	if err := ns.WithNetNSPath(file, func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dial, closeNS, err := NetNSDialer(file)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { closeNS() })
	port := intstr.FromInt32(int32(ln.Addr().(*net.TCPAddr).Port))
	const pods, periodSeconds = 110, 5
	period := periodSeconds * time.Second
	for _, bc := range []struct {
		name string
		grid time.Duration
	}{{"spread", -1}, {"grid=1s", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				m := NewManager(Config{Prober: Handlers{Dial: dial}, Grid: bc.grid})
				m.start = m.start.Add(-time.Hour) // as pods added long after the agent started
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
