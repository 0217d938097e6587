package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/internal/syncbuf"
	"github.com/nodeguard/nodeguard/pressure"
)

// eventLog records, in order, what happened on several goroutines.
type eventLog struct {
	mu  sync.Mutex
	all []string
}

func (l *eventLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, e)
}

func (l *eventLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

// testSensing starts the SENSE side on this host's cgroups, without BPF
// and without a metrics listener, with a fast tick.
func testSensing(t *testing.T, onSnapshot func(*pressure.Snapshot)) *sensing {
	t.Helper()
	f := &senseFlags{noBPF: true, tick: 20 * time.Millisecond, fullEvery: time.Hour, rootDir: t.TempDir(), onSnapshot: onSnapshot}
	s, err := startSensing(context.Background(), f, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSensingServeReturnsOnlyAfterItsLoops: what Serve starts (the
// snapshot loop and its observer, which re-arms the tripwire) must have
// returned when Serve does, since the caller closes the snapshotter, the
// tripwire and the BPF objects next. The observer is held inside a
// snapshot while ctx ends; Serve must wait for it.
func TestSensingServeReturnsOnlyAfterItsLoops(t *testing.T) {
	var events eventLog
	entered, returned := make(chan struct{}, 1), make(chan struct{}, 1)
	release := make(chan struct{})
	s := testSensing(t, func(*pressure.Snapshot) {
		events.add("observer began")
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		events.add("observer returned")
		select {
		case returned <- struct{}{}:
		default:
		}
	})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() {
		err := s.Serve(ctx)
		events.add("Serve returned")
		served <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot reached the observer within 10 s")
	}
	cancel()
	// Give a Serve that does not wait the time to return; one that
	// waits cannot, whatever the time.
	select {
	case err := <-served:
		served <- err
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10 s of the observer's release")
	}
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the observer did not return within 10 s of its release")
	}
	got := events.list()
	ret := slices.Index(got, "Serve returned")
	if ret < 0 || slices.Contains(got[ret:], "observer began") || slices.Contains(got[ret:], "observer returned") {
		t.Errorf("Serve returned while the snapshot observer still ran (the snapshotter and the tripwire are closed next): %q", got)
	}
}

// TestTheWatchdogStopsWhenSensingStalls: WATCHDOG=1 must stop when the
// sensing loop no longer works, so that systemd restarts the agent, even
// while the eviction manager's own snapshots (Fresh, every tick) keep the
// newest snapshot fresh.
func TestTheWatchdogStopsWhenSensingStalls(t *testing.T) {
	cases := []struct {
		name string
		// stall makes sensing stall; it returns the undo for the
		// cleanup.
		stall func(s *sensing, stopServe context.CancelFunc, block *atomic.Bool) func()
	}{
		{"the sensor's loop has stopped (as when Serve ended)", func(_ *sensing, stopServe context.CancelFunc, _ *atomic.Bool) func() {
			stopServe()
			return func() {}
		}},
		{"the snapshot observer (tripwire re-arming) is stuck", func(_ *sensing, _ context.CancelFunc, block *atomic.Bool) func() {
			block.Store(true)
			return func() { block.Store(false) }
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var block atomic.Bool
			unblock := make(chan struct{})
			var once sync.Once
			s := testSensing(t, func(*pressure.Snapshot) {
				if block.Load() {
					<-unblock
				}
			})
			defer s.Close()
			ctx, cancel := context.WithCancel(context.Background())
			serveCtx, stopServe := context.WithCancel(ctx)
			var wg sync.WaitGroup
			defer func() {
				cancel()
				once.Do(func() { close(unblock) })
				wg.Wait()
			}()
			wg.Go(func() { _ = s.Serve(serveCtx) })
			// The eviction manager confirms on a fresh snapshot every
			// tick: it keeps Latest fresh whatever the loop does.
			wg.Go(func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-time.After(20 * time.Millisecond):
						s.sensor.Fresh(ctx)
					}
				}
			})
			path, msgs := notifySocket(t, t.TempDir())
			var logb syncbuf.Buffer
			n := &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}, watchdog: 400 * time.Millisecond,
				log: slog.New(slog.NewTextHandler(&logb, nil))}
			wg.Go(func() { n.runWatchdog(ctx, s.heartbeats(), func() string { return "running" }) })

			// wait reads notifications until one has a line starting
			// with prefix; it returns the pings seen on the way.
			wait := func(prefix string, within time.Duration) int {
				t.Helper()
				pings := 0
				deadline := time.After(within)
				for {
					select {
					case m := <-msgs:
						for _, l := range strings.Split(m.text, "\n") {
							if l == "WATCHDOG=1" {
								pings++
							}
							if strings.HasPrefix(l, prefix) {
								return pings
							}
						}
					case <-deadline:
						t.Fatalf("no %q within %v (%d pings)", prefix, within, pings)
					}
				}
			}
			for range 3 {
				wait("WATCHDOG=1", 10*time.Second)
			}
			undo := c.stall(s, stopServe, &block)
			defer undo()
			wait("STATUS=sensing loop stuck", 10*time.Second)
			pings := 0
			for end := time.After(time.Second); ; {
				select {
				case m := <-msgs:
					pings += strings.Count(m.text, "WATCHDOG=1")
					continue
				case <-end:
				}
				break
			}
			if pings != 0 {
				t.Errorf("%d pings in the second after the watchdog said sensing is stuck", pings)
			}
			if !strings.Contains(logb.String(), "loop=sensing") {
				t.Errorf("no error line names sensing:\n%s", logb.String())
			}
		})
	}
}

// breakListener makes the TCP listener of process pid on addr fail, as
// a listener fails in the field (accept(2) returns an error that is not
// temporary): it takes a duplicate of the socket out of the process
// (pidfd_getfd(2), root) and shuts it down, and the process's next
// accept returns EINVAL.
func breakListener(t *testing.T, pid int, addr string) {
	t.Helper()
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		t.Fatal(err)
	}
	// /proc/<pid>/task/<tid>/net/tcp: "sl local_address rem_address st
	// ... inode"; the local port in hex, st 0A is LISTEN. Every thread's:
	// /proc/<pid>/net is the main thread's network namespace, and a
	// thread of the agent's may be in a pod's or the runtime's for a
	// moment (a probe, a CNI call: LockOSThread and setns).
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	inode := ""
	for _, task := range tasks {
		f, err := os.Open(fmt.Sprintf("/proc/%d/task/%s/net/tcp", pid, task.Name()))
		if err != nil {
			continue // the thread ended
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) > 9 && strings.HasSuffix(fl[1], fmt.Sprintf(":%04X", port)) && fl[3] == "0A" {
				inode = fl[9]
			}
		}
		f.Close()
		if inode != "" {
			break
		}
	}
	if inode == "" {
		t.Fatalf("process %d does not listen on %s", pid, addr)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fds {
		if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); l != "socket:["+inode+"]" {
			continue
		}
		fd, _ := strconv.Atoi(e.Name())
		pidfd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			t.Fatalf("pidfd_open %d: %v", pid, err)
		}
		defer unix.Close(pidfd)
		dup, err := unix.PidfdGetfd(pidfd, fd, 0)
		if err != nil {
			t.Fatalf("pidfd_getfd %d fd %d: %v", pid, fd, err)
		}
		defer unix.Close(dup)
		if err := unix.Shutdown(dup, unix.SHUT_RD); err != nil {
			t.Fatalf("shutdown the listener: %v", err)
		}
		return
	}
	t.Fatalf("no descriptor of process %d is socket:[%s]", pid, inode)
}

// waitExit waits, bounded, for the daemon to exit and returns its error.
func (d *testDaemon) waitExit(t *testing.T, within time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		t.Fatalf("the agent still runs %v later", within)
	}
	return nil
}

// TestRunDoesNotOutliveItsMetricsServer: the metrics server is one of the
// agent's loops; when it fails, `nodeguard run` must exit non-zero with
// the error (systemd restarts it, the pods stay), never go on with sensing
// stopped under it (no PSI wake-ups, no kernel events, no tripwire
// re-arming) while the API still answers.
func TestRunDoesNotOutliveItsMetricsServer(t *testing.T) {
	cgtest.RequirePrivileged(t)
	config := func(t *testing.T, dir string) string {
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, []byte("imagePull: false\neviction: {dryRun: true}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Run("a port taken at start is refused", func(t *testing.T) {
		// Not a defect: the listener is made before the agent runs.
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Close()
		dir := t.TempDir()
		d := startDaemon(t, dir, config(t, dir), nil, "--metrics-addr", taken.Addr().String())
		err = d.waitExit(t, 90*time.Second)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || !strings.Contains(d.log.String(), "--metrics-addr "+taken.Addr().String()) {
			t.Fatalf("exit %v; the log does not name the address:\n%s", err, d.log.String())
		}
	})
	t.Run("a listener that fails while running ends the agent", func(t *testing.T) {
		dir := t.TempDir()
		addr := freePort(t)
		d := startDaemon(t, dir, config(t, dir), nil, "--metrics-addr", addr)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		d.waitAPI(t, ctx)
		d.waitLog(t, 0, 30*time.Second, `msg="nodeguard running"`)
		breakListener(t, d.cmd.Process.Pid, addr)
		err := d.waitExit(t, 60*time.Second)
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("exit %v, want a failure", err)
		}
		last := ""
		for _, l := range strings.Split(d.log.String(), "\n") {
			if strings.Contains(l, "nodeguard stops") {
				last = l
			}
		}
		if !strings.Contains(last, "sensing: metrics server: serve metrics on "+addr) {
			t.Errorf("the agent's last words do not say the metrics server failed:\n%s", d.log.String())
		}
		t.Logf("exit %v: %s", err, last)
	})
}

// TestRunWatchesTheManifestDirectory runs the agent with a manifest
// directory: a file written is applied without waiting for the resync (a
// minute away; the wait is bounded below it), a broken edit is reported by
// file name and its pod keeps running, and a removed file's pod goes.
func TestRunWatchesTheManifestDirectory(t *testing.T) {
	cgtest.RequirePrivileged(t)
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte("imagePull: false\neviction: {dryRun: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, dir, config, nil, "--pod-manifest-path", manifests)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d.waitAPI(t, ctx)
	// pod waits, bounded, for the pod static to be in the wanted state
	// and returns its UID.
	pod := func(want func(phase string, ok bool) bool, within time.Duration) string {
		t.Helper()
		for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
			p, err := d.client.Get(ctx, "default", "static")
			phase, uid := "", ""
			if err == nil {
				phase, uid = string(p.Status.Phase), string(p.UID)
			}
			if want(phase, err == nil) {
				return uid
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod static: %v, phase %q: not as wanted within %v", err, phase, within)
			}
		}
	}
	path := filepath.Join(manifests, "static.yaml")
	if err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Pod
metadata: {name: static}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: registry.local/nodeguard/busybox:1.35, command: [sleep, "3600"]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Known within 30 s: the resync alone would take a minute.
	pod(func(_ string, ok bool) bool { return ok }, 30*time.Second)
	uid := pod(func(phase string, ok bool) bool { return ok && phase == "Running" }, 90*time.Second)

	off := len(d.log.String())
	if err := os.WriteFile(path, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: static\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitLog(t, off, 30*time.Second, `msg="manifest directory"`, path)
	if got := pod(func(phase string, ok bool) bool { return ok && phase == "Running" }, time.Second); got != uid {
		t.Errorf("the pod changed under a broken manifest: uid %s, was %s", got, uid)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	pod(func(_ string, ok bool) bool { return !ok }, 60*time.Second)
}
