package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/lifecycle/api"

	"github.com/nodeguard/nodeguard/internal/syncbuf"
)

const unitFile = "../deploy/systemd/nodeguard.service"

// unitVerifier reads the unit at file and returns it with a function that
// runs `systemd-analyze verify` on a text of it: the lines it prints about
// the unit, "" when none. The text is copied, under the unit's own name,
// to a temporary directory with ExecStart pointing at the binary built for
// the tests (verify checks that every Exec* binary exists, and
// /usr/local/bin/nodeguard is not installed here; --root does not help:
// systemd 252 then looks the unit up by name beneath the root, not the
// file given). Nothing else in the copy changes.
func unitVerifier(t *testing.T, file string) ([]byte, func(*testing.T, []byte) string) {
	t.Helper()
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is missing on CI (scripts/deps.sh installs Debian's systemd package)")
		}
		cgtest.Need(t, false, "systemd-analyze is missing (scripts/deps.sh installs Debian's systemd package)")
	}
	unit, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const exec0 = "ExecStart=/usr/local/bin/nodeguard "
	if !bytes.Contains(unit, []byte("\n"+exec0)) {
		t.Fatalf("%s does not start %q", file, exec0)
	}
	bin := buildBinary(t)
	return unit, func(t *testing.T, text []byte) string {
		dir := t.TempDir()
		path := filepath.Join(dir, filepath.Base(file))
		text = bytes.Replace(text, []byte(exec0), []byte("ExecStart="+bin+" "), 1)
		if err := os.WriteFile(path, text, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(analyze, "verify", path)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		var about []string
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if strings.Contains(line, "nodeguard") {
				about = append(about, line)
			} else if line != "" {
				t.Logf("systemd-analyze, not about the unit: %s", line)
			}
		}
		if err != nil && len(about) == 0 {
			about = append(about, fmt.Sprintf("exit: %v: %s", err, out))
		}
		return strings.Join(about, "\n")
	}
}

// TestTheSystemdUnitVerifies runs `systemd-analyze verify` on
// deploy/systemd/nodeguard.service: any line it prints about the unit (an
// unknown or misspelt directive, a directive this systemd does not have, a
// bad value) fails the test. verify also checks that every Exec* binary
// exists and is executable, and /usr/local/bin/nodeguard is not installed
// here; --root does not help (systemd 252 then looks the unit up by name
// beneath the root, not the file given), so the unit is copied, under its
// own name, to a temporary directory with ExecStart pointing at the binary
// built for the tests. Nothing else in the copy changes.
func TestTheSystemdUnitVerifies(t *testing.T) {
	unit, verify := unitVerifier(t, unitFile)
	t.Run("the unit as shipped is clean", func(t *testing.T) {
		if out := verify(t, unit); out != "" {
			t.Errorf("systemd-analyze verify %s:\n%s", unitFile, out)
		}
	})
	t.Run("a directive this systemd lacks is reported", func(t *testing.T) {
		// The check is not vacuous: RestartSteps= came with systemd 254.
		bad := bytes.Replace(unit, []byte("RestartSec=2\n"), []byte("RestartSec=2\nRestartSteps=5\n"), 1)
		if out := verify(t, bad); !strings.Contains(out, "RestartSteps") {
			t.Errorf("systemd-analyze said nothing about RestartSteps=: %q", out)
		}
	})
	t.Run("the unit says what a node agent needs", func(t *testing.T) {
		for _, line := range []string{
			"Type=notify", "Wants=containerd.service", "After=containerd.service", "Restart=always", "RestartSec=2",
			"WatchdogSec=30", "OOMScoreAdjust=-999", "KillMode=process", "StandardOutput=journal",
			"StandardError=journal", "ExecStart=/usr/local/bin/nodeguard run --config " + config.DefaultPath,
			"ExecReload=/bin/kill -HUP $MAINPID", "TasksMax=infinity",
		} {
			if !bytes.Contains(unit, []byte("\n"+line+"\n")) {
				t.Errorf("the unit lacks %q", line)
			}
		}
		// Options that give the service its own mount namespace would
		// hide the pod volumes it mounts; device policies would bind its
		// pods.
		for _, bad := range []string{"ProtectSystem=", "PrivateTmp=", "ProtectHome=", "ProtectKernelTunables=",
			"ProtectControlGroups=", "PrivateDevices=", "ProtectClock=", "DevicePolicy=", "MemoryMax=",
			// A relative cgroupRoot beneath the unit is refused on v2:
			// nothing to delegate.
			"Delegate="} {
			if bytes.Contains(unit, []byte("\n"+bad)) {
				t.Errorf("the unit sets %s, which breaks a node agent", bad)
			}
		}
	})
}

// notifyMsg is one datagram received on a NOTIFY_SOCKET.
type notifyMsg struct {
	pid  int32 // the sender, from SCM_CREDENTIALS as systemd reads it
	text string
	at   time.Time
}

// notifySocket listens where a service manager would, with SO_PASSCRED so
// that each message carries its sender's pid (systemd's NotifyAccess=main
// accepts only the main process's).
func notifySocket(t *testing.T, dir string) (string, <-chan notifyMsg) {
	t.Helper()
	path := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	raw, err := conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PASSCRED, 1) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	ch := make(chan notifyMsg, 1024)
	go func() {
		buf, oob := make([]byte, 4096), make([]byte, 1024)
		for {
			n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
			if err != nil {
				close(ch)
				return
			}
			m := notifyMsg{text: string(buf[:n]), at: time.Now(), pid: -1}
			if scms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, scm := range scms {
					if cred, err := unix.ParseUnixCredentials(&scm); err == nil {
						m.pid = cred.Pid
					}
				}
			}
			ch <- m
		}
	}()
	return path, ch
}

func TestWatchdogPingsOnlyWhileTheLoopsRun(t *testing.T) {
	path, msgs := notifySocket(t, t.TempDir())
	var beat atomic.Int64
	beat.Store(time.Now().UnixNano())
	stop := make(chan struct{})
	var stopped atomic.Bool
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				if !stopped.Load() {
					beat.Store(time.Now().UnixNano())
				}
			}
		}
	}()
	defer close(stop)
	var logb syncbuf.Buffer
	n := &Notifier{addr: &net.UnixAddr{Name: path, Net: "unixgram"}, watchdog: 400 * time.Millisecond,
		log: slog.New(slog.NewTextHandler(&logb, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pods := atomic.Int32{}
	go n.runWatchdog(ctx, []heartbeat{{name: "test", period: 50 * time.Millisecond, last: func() time.Time { return time.Unix(0, beat.Load()) }}},
		func() string { return fmt.Sprintf("running: %d pods", pods.Load()) })
	// count collects the messages of d, by content.
	count := func(d time.Duration) map[string]int {
		out := map[string]int{}
		deadline := time.After(d)
		for {
			select {
			case m := <-msgs:
				for _, l := range strings.Split(m.text, "\n") {
					out[l]++
				}
			case <-deadline:
				return out
			}
		}
	}
	if got := count(time.Second); got["WATCHDOG=1"] < 5 || got["STATUS=running: 0 pods"] != 1 {
		t.Fatalf("alive for 1 s with a 400 ms watchdog (pings every 100 ms): %v", got)
	}
	pods.Store(3)
	if got := count(300 * time.Millisecond); got["STATUS=running: 3 pods"] != 1 {
		t.Errorf("the status did not follow: %v", got)
	}
	stopped.Store(true)
	// stuck once the beat is older than 50 ms + 200 ms: pings stop.
	sawStuck := count(400 * time.Millisecond) // the pings before it noticed
	got := count(time.Second)
	for l, n := range sawStuck {
		got[l] += n * boolInt(strings.HasPrefix(l, "STATUS="))
	}
	if got["WATCHDOG=1"] != 0 {
		t.Errorf("%d pings while the loop was stuck", got["WATCHDOG=1"])
	}
	if !strings.Contains(logb.String(), `msg="watchdog: a main loop is stuck`) || !strings.Contains(logb.String(), "loop=test") {
		t.Errorf("no error line names the stuck loop:\n%s", logb.String())
	}
	stuck := false
	for l := range got {
		stuck = stuck || strings.HasPrefix(l, "STATUS=test loop stuck for")
	}
	if !stuck {
		t.Errorf("the status line does not name the stuck loop: %v", got)
	}
	stopped.Store(false)
	if got := count(time.Second); got["WATCHDOG=1"] < 5 {
		t.Errorf("pings did not resume with the loop: %v", got)
	}
}

func TestNotifierTakesSystemdsVariablesFromTheEnvironment(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "/run/test/notify")
	t.Setenv("WATCHDOG_USEC", "4000000")
	n := NewNotifier(slog.New(slog.DiscardHandler))
	if !n.enabled() || n.addr.Name != "/run/test/notify" || n.watchdog != 4*time.Second {
		t.Errorf("notifier %+v", n)
	}
	for _, v := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC"} {
		if _, ok := os.LookupEnv(v); ok {
			t.Errorf("%s is left for child processes", v)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if n := NewNotifier(slog.New(slog.DiscardHandler)); n.enabled() {
		t.Error("enabled without NOTIFY_SOCKET")
	}
}

// testDaemon is `nodeguard run --private-runtime` started by a test.
type testDaemon struct {
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	client *api.Client
	sock   string
}

// startDaemon runs the binary with a private containerd, the given config
// file and extra environment; the cleanup stops it with SIGINT and shows
// its log if the test failed.
func startDaemon(t *testing.T, dir, config string, env []string, args ...string) *testDaemon {
	t.Helper()
	bin := buildBinary(t)
	d := &testDaemon{log: &syncbuf.Buffer{}, sock: filepath.Join(dir, "api.sock")}
	d.cmd = exec.Command(bin, append([]string{"run", "--private-runtime", "--config", config, "--root-dir", filepath.Join(dir, "root"),
		"--api-socket", d.sock, "--metrics-addr", ""}, args...)...)
	d.cmd.Env = append(os.Environ(), env...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.client = api.NewClient(d.sock)
	t.Cleanup(func() {
		d.client.Close()
		d.cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- d.cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			d.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", d.log.String())
		}
	})
	return d
}

// waitLog waits for a log line holding every one of parts, after the
// first skip bytes of the log, and returns the offset past it.
func (d *testDaemon) waitLog(t *testing.T, skip int, timeout time.Duration, parts ...string) int {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		s := d.log.String()
		off := skip
		for _, line := range strings.SplitAfter(s[skip:], "\n") {
			off += len(line)
			if !strings.HasSuffix(line, "\n") {
				break
			}
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return off
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q within %v", parts, timeout)
		}
	}
}

func (d *testDaemon) waitAPI(t *testing.T, ctx context.Context) {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := d.client.List(ctx); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("API never came up")
		}
	}
}

// TestRunNotifiesSystemd runs the agent as systemd would, with a
// NOTIFY_SOCKET and a WATCHDOG_USEC, and checks the protocol: STATUS
// lines while starting, READY=1 only when the API answers (a request made
// the moment READY=1 arrives succeeds), every message from the main
// process (NotifyAccess=main), WATCHDOG=1 pings at a quarter of the
// timeout, a status that follows the pods, and STOPPING=1 on SIGTERM.
func TestRunNotifiesSystemd(t *testing.T) {
	cgtest.RequirePrivileged(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte("imagePull: false\neviction: {dryRun: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock, msgs := notifySocket(t, dir)
	d := startDaemon(t, dir, config, []string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=4000000"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var got []notifyMsg
	next := func(timeout time.Duration) notifyMsg {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("notify socket closed")
			}
			if m.pid != int32(d.cmd.Process.Pid) {
				t.Errorf("message %q from pid %d, not nodeguard's %d: systemd (NotifyAccess=main) drops it", m.text, m.pid, d.cmd.Process.Pid)
			}
			got = append(got, m)
			return m
		case <-time.After(timeout):
			t.Fatalf("no notification within %v; so far %+v", timeout, got)
		}
		return notifyMsg{}
	}
	// Start-up: status lines, then READY=1.
	for {
		m := next(90 * time.Second)
		if !strings.Contains(m.text, "READY=1") {
			if !strings.HasPrefix(m.text, "STATUS=") {
				t.Errorf("before READY=1: %q", m.text)
			}
			continue
		}
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := d.client.List(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("READY=1 sent before the API answers: %v", err)
		}
		if !strings.Contains(m.text, "STATUS=running: 0 pods") {
			t.Errorf("READY=1 without the running status: %q", m.text)
		}
		break
	}
	var statuses []string
	for _, m := range got {
		statuses = append(statuses, m.text)
	}
	all := strings.Join(statuses, "|")
	for _, want := range []string{"STATUS=starting the private containerd", "STATUS=connecting to the runtime at unix://", "STATUS=starting sensing"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q while starting: %q", want, statuses)
		}
	}
	// Pings every second (4 s / 4), and a status that follows the pods.
	if _, err := d.client.Apply(ctx, []byte(`apiVersion: v1
kind: Pod
metadata: {name: notified}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: registry.local/nodeguard/busybox:1.35, command: [sleep, "3600"]}
`), "test"); err != nil {
		t.Fatal(err)
	}
	var pings []time.Time
	sawPod := false
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && (len(pings) < 4 || !sawPod); {
		m := next(5 * time.Second)
		for _, l := range strings.Split(m.text, "\n") {
			switch {
			case l == "WATCHDOG=1":
				pings = append(pings, m.at)
			case l == "STATUS=running: 1 pods":
				sawPod = true
			}
		}
	}
	if len(pings) < 4 {
		t.Fatalf("%d watchdog pings", len(pings))
	}
	for i := 1; i < len(pings); i++ {
		if gap := pings[i].Sub(pings[i-1]); gap > 2*time.Second {
			t.Errorf("ping %d came %v after the previous (the timeout is 4 s, pings every 1 s)", i, gap)
		}
	}
	if !sawPod {
		t.Error("the status never said 1 pod")
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	for {
		m, ok := <-msgs
		if !ok {
			t.Fatal("no STOPPING=1")
		}
		if strings.Contains(m.text, "STOPPING=1") {
			break
		}
	}
	t.Logf("%d notifications; pings at %v intervals", len(got), pings[len(pings)-1].Sub(pings[0])/time.Duration(len(pings)-1))
}

// TestSIGHUPReloadsThresholdsAndLoggingWithoutTouchingPods edits the
// configuration of a running agent and sends SIGHUP: a valid file applies
// the new log level (debug lines appear) and eviction thresholds (logged),
// names what needs a restart, and leaves the running pod alone (same
// sandbox and container IDs, no restart); a broken file is refused with
// one line naming the field, and the previous configuration stays.
func TestSIGHUPReloadsThresholdsAndLoggingWithoutTouchingPods(t *testing.T) {
	cgtest.RequirePrivileged(t)
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(config, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The private containerd has no registry: nothing is pulled (the
	// reload below turns it on, a change that needs a restart).
	write("logging: {level: info}\nimagePull: false\neviction:\n  evictionHard: {memory.available: 100Mi}\n")
	d := startDaemon(t, dir, config, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d.waitAPI(t, ctx)
	if _, err := d.client.Apply(ctx, []byte(`apiVersion: v1
kind: Pod
metadata: {name: steady}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {name: c, image: registry.local/nodeguard/busybox:1.35, command: [sleep, "3600"]}
`), "test"); err != nil {
		t.Fatal(err)
	}
	ids := func() string {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			p, err := d.client.Get(ctx, "default", "steady")
			if err == nil && p.Status.Phase == "Running" && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != "" {
				cs := p.Status.ContainerStatuses[0]
				return fmt.Sprintf("uid=%s container=%s restarts=%d ip=%s", p.UID, cs.ContainerID, cs.RestartCount, p.Status.PodIP)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the pod is not running: %v %+v", err, p)
			}
		}
	}
	before := ids()
	if strings.Contains(d.log.String(), "level=DEBUG") {
		t.Fatal("debug lines at level info")
	}

	t.Run("a valid file applies logging and thresholds and names what needs a restart", func(t *testing.T) {
		off := len(d.log.String())
		write("logging: {level: debug}\nimagePull: true\neviction:\n  evictionHard: {memory.available: 150Mi}\n  psiRules: [\"memory.full.avg10>40 for 10s\"]\n")
		d.cmd.Process.Signal(syscall.SIGHUP)
		d.waitLog(t, off, 10*time.Second, `msg="eviction thresholds reloaded"`, "memory.available<150Mi", "allocatableMemory.available<150Mi", "memory.full.avg10>40 for 10s")
		d.waitLog(t, off, 10*time.Second, `msg="configuration changes need a restart`, "fields=[imagePull]")
		off = d.waitLog(t, off, 10*time.Second, `msg="configuration reloaded"`, "log_level=debug")
		if _, err := d.client.List(ctx); err != nil {
			t.Fatal(err)
		}
		d.waitLog(t, off, 10*time.Second, "level=DEBUG", `msg="API request"`)
	})
	t.Run("a broken file is refused by field and the running configuration stays", func(t *testing.T) {
		off := len(d.log.String())
		write("logging: {level: loud}\neviction:\n  evictionHard: {memory.available: 300Mi}\n")
		d.cmd.Process.Signal(syscall.SIGHUP)
		off = d.waitLog(t, off, 10*time.Second, "level=ERROR", `msg="configuration reload refused, the running configuration stays"`, `logging.level \"loud\"`)
		if _, err := d.client.List(ctx); err != nil {
			t.Fatal(err)
		}
		d.waitLog(t, off, 10*time.Second, "level=DEBUG", `msg="API request"`)
		if strings.Contains(d.log.String(), "memory.available<300Mi") {
			t.Error("the refused thresholds were applied")
		}
	})
	if after := ids(); after != before {
		t.Errorf("the pod changed across reloads:\n before %s\n after  %s", before, after)
	}
	if n := strings.Count(d.log.String(), `msg="nodeguard running"`); n != 1 {
		t.Errorf("the agent started %d times", n)
	}
	for _, l := range strings.Split(d.log.String(), "\n") {
		if strings.Contains(l, "reload") || strings.Contains(l, "restart") {
			t.Log(l)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
