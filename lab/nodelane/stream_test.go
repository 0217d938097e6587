//go:build nodelane

package nodelane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
)

// nodeguardBin is the installed command the checks run as a user would.
const nodeguardBin = "/usr/local/bin/nodeguard"

// sessionBound bounds one streaming session of the check (a CRI Exec or
// Attach, the SPDY upgrade through the agent's API socket to the runtime's
// streaming server, a command that answers at once), under TCG.
const sessionBound = 60 * time.Second

// session runs the installed nodeguard with stdin, bounded by
// sessionBound, and returns its stdout and stderr.
func session(stdin string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sessionBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeguardBin, args...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("no end within %s", sessionBound)
	}
	if err != nil {
		err = &cmdError{cmd: "nodeguard " + strings.Join(args, " "), err: err, output: out.String() + errb.String()}
	}
	return out.String(), errb.String(), err
}

// openPTY opens a pseudo-terminal pair of the given size (what a user's
// terminal is to `nodeguard pod exec -it`).
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	fail := func(what string, err error) (*os.File, *os.File, error) {
		master.Close()
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		return fail("unlock the pty", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		return fail("the pty's number", err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fail("open the pty's terminal", err)
	}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		slave.Close()
		return fail("set the terminal's size", err)
	}
	return master, slave, nil
}

// ttySession runs the installed nodeguard on a terminal of the given size
// (its stdin, stdout and stderr, and its controlling terminal in a session
// of its own) and returns what it wrote there.
func ttySession(rows, cols uint16, args ...string) (string, error) {
	master, slave, err := openPTY(rows, cols)
	if err != nil {
		return "", err
	}
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), sessionBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeguardBin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		slave.Close()
		return "", err
	}
	slave.Close() // the child has it: the master reads EIO once it exits
	var out bytes.Buffer
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&out, master) // ends with EIO when the last slave is closed
	}()
	err = cmd.Wait()
	select {
	case <-copied:
	case <-time.After(5 * time.Second): // a grandchild holding the terminal
		master.Close()
		<-copied
	}
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("no end within %s", sessionBound)
	}
	if err != nil {
		return out.String(), &cmdError{cmd: "nodeguard " + strings.Join(args, " "), err: err, output: out.String()}
	}
	return out.String(), nil
}

// forwarding is port-forward's line once it listens.
var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)

// portForward starts `nodeguard pod port-forward p 0:8080` and returns the
// local port it listens on and a function that interrupts it (as ^C does)
// and returns its error and everything it printed.
func portForward(p podRef) (port string, stop func() (string, error), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*sessionBound)
	cmd := exec.CommandContext(ctx, nodeguardBin, "pod", "port-forward", "-n", p.Namespace, p.Name, "0:8080")
	cmd.WaitDelay = 5 * time.Second
	var errb bytes.Buffer
	cmd.Stderr = &errb
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return "", nil, err
	}
	// The reader keeps every line until port-forward ends; the first
	// Forwarding line's port goes to ports.
	var printed strings.Builder
	ports := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			printed.WriteString(sc.Text() + "\n")
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil && len(ports) == 0 {
				ports <- m[1]
			}
		}
	}()
	stop = func() (string, error) {
		defer cancel()
		_ = cmd.Process.Signal(os.Interrupt) // our own child, by its pid
		<-read                               // Wait closes the pipe: read it to its end first
		err := cmd.Wait()
		return printed.String() + errb.String(), err
	}
	select {
	case port := <-ports:
		return port, stop, nil
	case <-read:
		out, err := stop()
		return "", nil, fmt.Errorf("port-forward ended before it listened: %v: %s", err, out)
	case <-time.After(sessionBound):
		out, _ := stop()
		return "", nil, fmt.Errorf("port-forward printed no Forwarding line within %s: %s", sessionBound, out)
	}
}

// streaming checks testdata/stream.yaml through the installed CLI.
func streaming(t *testing.T, rootDir string, uids map[string]string) {
	requireAgent(t)
	pod := waitPodRunning(t, streamPod, podsBound)
	uid := string(pod.UID)
	uids[streamPod.Name] = uid

	t.Run("exec -i pipes stdin through and its end closes the command's stdin", func(t *testing.T) {
		const in = "line one\nline two\n"
		out, errb, err := session(in, "pod", "exec", "-n", streamPod.Namespace, "-i", streamPod.Name, "--", "cat")
		if err != nil {
			t.Fatal(err)
		}
		if out != in {
			t.Errorf("exec -i cat printed %q (stderr %q), want its stdin %q", out, errb, in)
		}
		out, _, err = session("", "pod", "exec", "-n", streamPod.Namespace, "-i", streamPod.Name, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
		if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 3 {
			t.Errorf("exec -i of exit 3: %v, want nodeguard to exit 3", err)
		}
		if out != "out\n" {
			t.Errorf("exec -i printed %q on stdout, want out alone", out)
		}
	})

	t.Run("exec -it runs on a terminal of the size of the user's", func(t *testing.T) {
		// The size comes as a resize after the session starts: the
		// command asks the terminal until it has one (10 s at most).
		const script = `tty; for i in $(seq 50); do s=$(stty size 2>/dev/null); [ -n "$s" ] && [ "$s" != "0 0" ] && break; sleep 0.2; done; echo $s`
		out, err := ttySession(45, 123, "pod", "exec", "-n", streamPod.Namespace, "-it", streamPod.Name, "--", "sh", "-c", script)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(strings.ReplaceAll(out, "\r", ""))
		if len(f) != 3 || !regexp.MustCompile(`^/dev/pts/\d+$`).MatchString(f[0]) || f[1] != "45" || f[2] != "123" {
			t.Errorf("tty; stty size printed %q, want a /dev/pts path and 45 123", out)
		}
	})

	t.Run("port-forward reaches the pod's port from the node's loopback", func(t *testing.T) {
		port, stop, err := portForward(streamPod)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 { // each connection is its own stream of one session
			resp, err := (&http.Client{Timeout: sessionBound}).Get("http://127.0.0.1:" + port + "/index.html")
			if err != nil {
				out, _ := stop()
				t.Fatalf("GET %d through the forward: %v (port-forward printed %q)", i, err, out)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "hello from the pod\n" {
				t.Errorf("GET %d through the forward: %s %q", i, resp.Status, body)
			}
		}
		if out, err := stop(); err != nil {
			t.Errorf("port-forward interrupted: %v, want a clean end: %s", err, out)
		}
	})

	t.Run("attach -i sends stdin to the container's main process and prints what it writes", func(t *testing.T) {
		out, errb, err := session("ping\npong\n", "pod", "attach", "-n", streamPod.Namespace, "-i", streamPod.Name, "-c", "echo")
		if err != nil {
			t.Fatal(err)
		}
		if out != "got:ping\ngot:pong\nbye\n" {
			t.Errorf("attach printed %q (stderr %q)", out, errb)
		}
		// stdinOnce: its stdin closed with the attach, so it ended.
		p := waitPod(t, streamPod, "with echo ended", podsBound, func(p *corev1.Pod) bool { return status(p, "echo").State.Terminated != nil })
		if x := status(p, "echo").State.Terminated; x.ExitCode != 0 || status(p, "echo").RestartCount != 0 {
			t.Errorf("echo after the attach: %s, want exit 0 and no restart", describePod(p))
		}
	})

	t0 := time.Now()
	rmPod(t, streamPod)
	d := waitUnmounted(t, rootDir, uid, deleteBound)
	t.Logf("the pod gone %s after pod rm (%s for its directory)", time.Since(t0).Round(time.Millisecond), d.Round(time.Millisecond))
}
