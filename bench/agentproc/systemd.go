package agentproc

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// unitTimeout bounds one systemctl call (a unit's start under TCG).
const unitTimeout = 2 * time.Minute

// Systemctl runs systemctl with args, bounded by unitTimeout, and returns
// its combined output.
func Systemctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, unitTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	return string(out), err
}

// FollowJournal follows unit's journal from since (a second before, whole
// seconds), its messages only (the kubelet's klog lines), until the
// returned reader is closed or ctx is done. Its signature is
// bench.KubeletLog's.
func FollowJournal(unit string) func(ctx context.Context, since time.Time) (io.ReadCloser, error) {
	return func(ctx context.Context, since time.Time) (io.ReadCloser, error) {
		cmd := exec.CommandContext(ctx, "journalctl", "-u", unit, "-f", "-o", "cat", "--no-pager",
			"--since", "@"+strconv.FormatInt(since.Unix()-1, 10))
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, fmt.Errorf("journalctl: %w", err)
		}
		cmd.Stderr = io.Discard
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("journalctl: %w", err)
		}
		return &procReader{r: out, cmd: cmd}, nil
	}
}

// procReader is a child's stdout; Close ends the child (by its pid) and
// waits for it.
type procReader struct {
	r    io.Reader
	cmd  *exec.Cmd
	once sync.Once
}

func (p *procReader) Read(b []byte) (int, error) { return p.r.Read(b) }

func (p *procReader) Close() error {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		_ = p.cmd.Wait()
	})
	return nil
}
