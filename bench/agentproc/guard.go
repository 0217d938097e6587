package agentproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"
)

// Bounds on the guard child process.
const (
	// guardReadyTimeout: nodeguard guard logs "nodeguard guard running"
	// (its BPF programs loaded, the kubelet's pods listed), under TCG.
	guardReadyTimeout = 3 * time.Minute
	// guardStopTimeout bounds SIGTERM -> exit, then it is killed.
	guardStopTimeout = 30 * time.Second
	// guardLineBuffer: guard log lines waiting for the reader; beyond it
	// lines are dropped (written to its log file still), never blocking
	// the guard.
	guardLineBuffer = 4096
)

// Guard starts `nodeguard guard` from a nodeguard binary, once per call of
// Start: its configuration written to a directory, its output appended to
// a log file and handed to the caller line by line.
type Guard struct {
	// Bin is the nodeguard binary, Dir where its configuration file is
	// written, LogPath where its output is appended.
	Bin, Dir, LogPath string
	// Conf is its configuration; Start sets metricsAddr to a free
	// loopback port.
	Conf map[string]any
}

// Start starts the guard and returns once it runs (its "nodeguard guard
// running" line): its log lines (JSON, one object a line) until it stops,
// and stop, which ends it (SIGTERM, SIGKILL after guardStopTimeout) and
// waits for it. Its signature is bench.GuardStarter's.
func (g *Guard) Start(ctx context.Context) (<-chan string, func() error, error) {
	metricsAddr, err := FreeLoopbackAddr()
	if err != nil {
		return nil, nil, err
	}
	g.Conf["metricsAddr"] = metricsAddr
	b, err := yaml.Marshal(g.Conf)
	if err != nil {
		return nil, nil, fmt.Errorf("encode the guard's configuration: %w", err)
	}
	path := filepath.Join(g.Dir, "guard.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, nil, fmt.Errorf("write the guard's configuration: %w", err)
	}
	logf, err := os.OpenFile(g.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("guard log: %w", err)
	}
	args := []string{"guard", "--config", path}
	fmt.Fprintf(logf, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), g.Bin, strings.Join(args, " "))
	cmd := exec.Command(g.Bin, args...)
	// Not journald's stream: the guard would leave out its lines' times.
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "JOURNAL_STREAM=") && !strings.HasPrefix(e, "NOTIFY_SOCKET=") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, nil, fmt.Errorf("guard output pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	exited, err := startLocked(cmd)
	if err != nil {
		pr.Close()
		pw.Close()
		logf.Close()
		return nil, nil, fmt.Errorf("start nodeguard guard: %w", err)
	}
	pw.Close()
	lines := make(chan string, guardLineBuffer)
	running := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		seen := false
		for sc.Scan() {
			l := sc.Text()
			fmt.Fprintln(logf, l)
			if !seen && strings.Contains(l, `"msg":"nodeguard guard running"`) {
				seen = true
				close(running)
			}
			select {
			case lines <- l:
			default: // never block the guard; the line is in its log
			}
		}
	}()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case <-exited:
		case <-time.After(guardStopTimeout):
			_ = cmd.Process.Kill()
			<-exited
			err = fmt.Errorf("nodeguard guard did not stop within %v of SIGTERM; killed", guardStopTimeout)
		}
		<-readDone
		pr.Close()
		logf.Close()
		return err
	}
	select {
	case <-running:
		return lines, stop, nil
	case <-exited:
		err = fmt.Errorf("nodeguard guard exited before it ran (%s); see %s", cmd.ProcessState, g.LogPath)
	case <-time.After(guardReadyTimeout):
		err = fmt.Errorf("nodeguard guard not running after %v; see %s", guardReadyTimeout, g.LogPath)
	case <-ctx.Done():
		err = ctx.Err()
	}
	return nil, nil, errors.Join(err, stop())
}
