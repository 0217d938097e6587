package agent

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

	"github.com/nodeguard/nodeguard/internal/syncbuf"
	"github.com/nodeguard/nodeguard/lab/crienv"
)

const streamCLIPods = `apiVersion: v1
kind: Pod
metadata: {name: shell}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: BUSYBOX, command: [sleep, "3600"]}
---
apiVersion: v1
kind: Pod
metadata: {name: httpd}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: httpd
    image: BUSYBOX
    command: [sh, -c, "mkdir -p /www && echo served in the pod > /www/index.html && exec httpd -f -p 8080 -h /www"]
    ports: [{containerPort: 8080}]
`

// openPTY opens a pseudo-terminal pair: the test drives the master, the
// CLI gets the slave as its terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var n uint32
	var ioErr error
	rc, err := m.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	err = rc.Control(func(fd uintptr) {
		if ioErr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ioErr != nil {
			return
		}
		n, ioErr = unix.IoctlGetUint32(int(fd), unix.TIOCGPTN)
	})
	if err != nil || ioErr != nil {
		t.Fatalf("unlock the pty: %v %v", err, ioErr)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

func setSize(t *testing.T, f *os.File, rows, cols uint16) {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var ioErr error
	rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if ioErr != nil {
		t.Fatal(ioErr)
	}
}

func termios(t *testing.T, f *os.File) *unix.Termios {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var tio *unix.Termios
	var ioErr error
	rc.Control(func(fd uintptr) { tio, ioErr = unix.IoctlGetTermios(int(fd), unix.TCGETS) })
	if ioErr != nil {
		t.Fatal(ioErr)
	}
	return tio
}

// waitFor waits, bounded, until out matches re, and returns the match.
func waitFor(t *testing.T, out *syncbuf.Buffer, re *regexp.Regexp, what string) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("never saw %s (%s); output:\n%q", what, re, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPodStreamingCommands(t *testing.T) {
	env := crienv.New(t)
	a := newAgent(t, env, "")
	a.start()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pods := strings.ReplaceAll(streamCLIPods, "BUSYBOX", env.BusyboxImage())
	if _, err := a.client.Apply(ctx, []byte(pods), "stream.yaml"); err != nil {
		t.Fatal(err)
	}
	a.waitRunning(ctx, map[string]bool{"shell": true, "httpd": true}, 90*time.Second)
	cli := func(args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, a.bin, append([]string{"pod", args[0], "--api-socket", a.sock}, args[1:]...)...)
	}

	t.Run("exec -i with a pipe sends stdin, and the command sees its end", func(t *testing.T) {
		cmd := cli("exec", "-i", "shell", "--", "sh", "-c", "cat; echo done")
		cmd.Stdin = strings.NewReader("data\n")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || string(out) != "data\ndone\n" {
			t.Fatalf("echo data | pod exec -i -- cat: %q, %v, stderr %q", out, err, stderr.String())
		}
	})

	t.Run("the remote exit code is the CLI's", func(t *testing.T) {
		cmd := cli("exec", "-i", "shell", "--", "sh", "-c", "exit 7")
		cmd.Stdin = strings.NewReader("")
		out, err := cmd.CombinedOutput()
		ee, ok := errors.AsType[*exec.ExitError](err)
		if !ok || ee.ExitCode() != 7 || !strings.Contains(string(out), "command terminated with exit code 7") {
			t.Fatalf("exit 7 through the CLI: %v, output %q", err, out)
		}
	})

	t.Run("-t on a pipe warns and runs without a terminal", func(t *testing.T) {
		cmd := cli("exec", "-it", "shell", "--", "sh", "-c", "tty; cat")
		cmd.Stdin = strings.NewReader("piped\n")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		// tty says so and fails; the shell's status is cat's.
		if err != nil || !strings.Contains(stderr.String(), "Unable to use a TTY") || string(out) != "not a tty\npiped\n" {
			t.Fatalf("pod exec -it on a pipe: %q, %v, stderr %q", out, err, stderr.String())
		}
	})

	t.Run("exec -it on a terminal: raw mode, a pts in the container, resizes, the exit code, the terminal restored", func(t *testing.T) {
		master, slave := openPTY(t)
		setSize(t, master, 30, 100)
		before := termios(t, slave)
		cmd := cli("exec", "-it", "shell", "--", "sh")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		// The pty is the CLI's controlling terminal, so that a resize
		// sends it SIGWINCH as a shell's terminal would.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
		out := &syncbuf.Buffer{}
		go io.Copy(out, master) // ends with EIO when the last slave closes
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		exited := false
		defer func() {
			if !exited {
				cmd.Process.Kill() // our child, by its pid
				<-done
			}
		}()
		// busybox ash's line editor decorates its prompt with escapes.
		waitFor(t, out, regexp.MustCompile(`/ # `), "the shell's prompt")
		// Raw mode: the local terminal echoes nothing and passes ^C on.
		if tio := termios(t, slave); tio.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
			t.Errorf("the CLI's terminal is not raw during the session: lflag %#x", tio.Lflag)
		}
		io.WriteString(master, "tty; stty size\r")
		waitFor(t, out, regexp.MustCompile(`/dev/pts/\d+\r\n30 100\r\n`), "a pts path and the terminal's size 30 100")
		setSize(t, master, 40, 120)
		// SIGWINCH reaches the CLI, which sends the size: the next stty
		// sees it (asked again until it does: the size travels alone).
		re := regexp.MustCompile(`40 120\r\n`)
		for i := 0; !re.MatchString(out.String()); i++ {
			if i == 100 {
				t.Fatalf("the resize never reached the container; output:\n%q", out.String())
			}
			io.WriteString(master, "stty size\r")
			time.Sleep(100 * time.Millisecond)
		}
		// ^C goes to the remote terminal: it interrupts sleep, not the CLI.
		io.WriteString(master, "sleep 30\r")
		time.Sleep(300 * time.Millisecond)
		io.WriteString(master, "\x03")
		waitFor(t, out, regexp.MustCompile(`(?s)sleep 30.*\^C.*/ # `), "the shell's prompt after ^C")
		io.WriteString(master, "exit 5\r")
		select {
		case err := <-done:
			exited = true
			ee, ok := errors.AsType[*exec.ExitError](err)
			if !ok || ee.ExitCode() != 5 {
				t.Fatalf("exit 5 in the shell: the CLI ended with %v; output:\n%q", err, out.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the CLI did not end after exit; output:\n%q", out.String())
		}
		after := termios(t, slave)
		if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
			t.Errorf("the terminal was not restored: lflag %#x iflag %#x oflag %#x, before %#x %#x %#x",
				after.Lflag, after.Iflag, after.Oflag, before.Lflag, before.Iflag, before.Oflag)
		}
	})

	t.Run("port-forward listens on 127.0.0.1 and reaches the pod's port until interrupted", func(t *testing.T) {
		cmd := cli("port-forward", "httpd", ":8080")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr syncbuf.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		lines := make(chan string, 16)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
			done <- cmd.Wait()
		}()
		var port string
		select {
		case l := <-lines:
			m := regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> 8080$`).FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("port-forward printed %q first; stderr %q", l, stderr.String())
			}
			port = m[1]
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("port-forward printed nothing within 30 s; stderr %q", stderr.String())
		}
		resp, err := http.Get("http://127.0.0.1:" + port + "/index.html")
		if err != nil {
			cmd.Process.Kill()
			t.Fatalf("GET through the forward: %v; stderr %q", err, stderr.String())
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "served in the pod\n" {
			t.Errorf("GET through the forward: %s %q", resp.Status, body)
		}
		cmd.Process.Signal(os.Interrupt)
		for range lines {
		}
		if err := <-done; err != nil {
			t.Fatalf("port-forward after SIGINT: %v; stderr %q", err, stderr.String())
		}
	})

	t.Run("bad port specs are refused before anything is dialled", func(t *testing.T) {
		out, err := cli("port-forward", "httpd", "8080:http").CombinedOutput()
		if err == nil || !strings.Contains(string(out), `REMOTE "http": want a port number`) {
			t.Fatalf("got %v %q", err, out)
		}
	})
}
