//go:build nodelane

package nodelane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lab/nodevm"
)

// Bounds of the helpers' commands.
const (
	// cmdTimeout bounds a command that answers at once (systemctl show,
	// crictl ps, nodeguard pod ls): seconds under TCG at most.
	cmdTimeout = 30 * time.Second
	// poll is how often a wait looks again: the checks' conditions change
	// on a scale of seconds under TCG.
	poll = 500 * time.Millisecond
)

// inLane skips t outside the node lane's guest: the checks start and kill
// services and write /etc, which they may do only on the throwaway node.
func inLane(t *testing.T) {
	t.Helper()
	if os.Getenv(nodevm.EnvLane) != "1" {
		t.Skip("runs only inside the node lane's VM: make test-node")
	}
	host, _ := os.Hostname()
	comm, _ := os.ReadFile("/proc/1/comm")
	if host != nodevm.Hostname || strings.TrimSpace(string(comm)) != "systemd" {
		t.Skipf("runs only inside the node lane's VM (hostname %q, PID 1 %q): make test-node", host, bytes.TrimSpace(comm))
	}
}

// cmdError is a command that failed, with its output.
type cmdError struct {
	cmd    string
	err    error
	output string
}

func (e *cmdError) Error() string {
	return fmt.Sprintf("%s: %v: %s", e.cmd, e.err, tail(e.output, 20))
}

func (e *cmdError) Unwrap() error { return e.err }

// run runs name with args, bounded by timeout, and returns its combined
// output; a failure or a timeout is a *cmdError with the output.
func run(timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("no answer within %s", timeout)
	}
	if err != nil {
		return string(out), &cmdError{cmd: name + " " + strings.Join(args, " "), err: err, output: string(out)}
	}
	return string(out), nil
}

// stdout runs name like run but returns standard output alone (JSON), with
// standard error in the error.
func stdout(timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("no answer within %s", timeout)
	}
	if err != nil {
		return out, &cmdError{cmd: name + " " + strings.Join(args, " "), err: err, output: stderr.String()}
	}
	return out, nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// errTimeout is wrapped by a wait that ran out of time.
var errTimeout = errors.New("timed out")

// waitFor calls cond every poll until it reports done, returns an error, or
// bound passes; it returns how long it waited. detail describes the last
// state seen, for the error.
func waitFor(what string, bound time.Duration, cond func() (done bool, detail string, err error)) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(bound)
	for {
		done, detail, err := cond()
		if err != nil {
			return time.Since(start), fmt.Errorf("wait for %s: %w", what, err)
		}
		if done {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return time.Since(start), fmt.Errorf("wait for %s: %w after %s; last seen: %s", what, errTimeout, bound, detail)
		}
		time.Sleep(poll)
	}
}

// systemctl runs systemctl with args.
func systemctl(timeout time.Duration, args ...string) (string, error) {
	return run(timeout, "systemctl", args...)
}

// unitProps returns properties of a unit (systemctl show -p).
func unitProps(unit string, props ...string) (map[string]string, error) {
	out, err := run(cmdTimeout, "systemctl", "show", unit, "-p", strings.Join(props, ","))
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m, nil
}

// journalCursor returns the cursor of the journal's newest entry, so a
// check can read only what came after it.
func journalCursor() (string, error) {
	out, err := stdout(cmdTimeout, "journalctl", "-n", "1", "-o", "json", "--no-pager")
	if err != nil {
		return "", err
	}
	es, err := ParseJournal(out)
	if err != nil || len(es) == 0 {
		return "", fmt.Errorf("journal cursor: %d entries, %v", len(es), err)
	}
	return es[len(es)-1]["__CURSOR"], nil
}

// journal returns a unit's entries after cursor ("" for all).
func journal(unit, cursor string) ([]JournalEntry, error) {
	args := []string{"-u", unit, "-o", "json", "--no-pager"}
	if cursor != "" {
		args = append(args, "--after-cursor", cursor)
	}
	out, err := stdout(cmdTimeout, "journalctl", args...)
	if err != nil {
		return nil, err
	}
	return ParseJournal(out)
}

// journalText returns a unit's last n lines as journalctl prints them, for
// failure messages.
func journalText(unit string, n int) string {
	out, err := run(cmdTimeout, "journalctl", "-u", unit, "-n", strconv.Itoa(n), "--no-pager", "-o", "short-monotonic")
	if err != nil {
		return "(journalctl failed: " + err.Error() + ")"
	}
	return out
}

// nodeguard runs the installed nodeguard command.
func nodeguard(timeout time.Duration, args ...string) (string, error) {
	return run(timeout, "/usr/local/bin/nodeguard", args...)
}

// applyPods applies a manifest file with `nodeguard pod apply -f`.
func applyPods(file string) (string, error) {
	return nodeguard(cmdTimeout, "pod", "apply", "-f", file)
}

// listPods returns `nodeguard pod ls -o json` (a v1 PodList).
func listPods() (*corev1.PodList, error) {
	out, err := stdout(cmdTimeout, "/usr/local/bin/nodeguard", "pod", "ls", "-o", "json")
	if err != nil {
		return nil, err
	}
	var l corev1.PodList
	if err := json.Unmarshal(out, &l); err != nil {
		return nil, fmt.Errorf("parse nodeguard pod ls -o json: %w: %s", err, tail(string(out), 5))
	}
	return &l, nil
}

// findPod returns the pod named namespace/name in l.
func findPod(l *corev1.PodList, namespace, name string) *corev1.Pod {
	for i := range l.Items {
		if l.Items[i].Namespace == namespace && l.Items[i].Name == name {
			return &l.Items[i]
		}
	}
	return nil
}

// describePods is one line per pod for failure messages.
func describePods(l *corev1.PodList) string {
	if l == nil || len(l.Items) == 0 {
		return "no pods"
	}
	var b strings.Builder
	for _, p := range l.Items {
		fmt.Fprintf(&b, "%s/%s uid=%s phase=%s reason=%q message=%q;", p.Namespace, p.Name, p.UID, p.Status.Phase, p.Status.Reason, p.Status.Message)
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " %s ready=%v restarts=%d", c.Name, c.Ready, c.RestartCount)
			if w := c.State.Waiting; w != nil {
				fmt.Fprintf(&b, " waiting %s %q", w.Reason, w.Message)
			}
			if x := c.State.Terminated; x != nil {
				fmt.Fprintf(&b, " terminated %s exit %d", x.Reason, x.ExitCode)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// crictl runs crictl against the node's containerd and returns its
// standard output.
func crictl(args ...string) ([]byte, error) {
	return stdout(cmdTimeout, "crictl", append([]string{"--runtime-endpoint", "unix://" + nodevm.ContainerdSocket, "--timeout", "20s"}, args...)...)
}

// runtimeDriver asks containerd for its cgroup driver through CRI
// RuntimeConfig (crictl runtime-config): "systemd" or "cgroupfs", or an
// error matching ErrNotReported where the runtime does not say
// (containerd 1.6).
func runtimeDriver() (string, error) {
	out, err := run(cmdTimeout, "crictl", "--runtime-endpoint", "unix://"+nodevm.ContainerdSocket, "--timeout", "20s", "runtime-config")
	return RuntimeConfigDriver([]byte(out), err != nil)
}

// criVersion is `crictl version`.
func criVersion() (CRIVersion, error) {
	out, err := crictl("version")
	if err != nil {
		return CRIVersion{}, err
	}
	return ParseCRIVersion(out)
}

// criPods returns every sandbox containerd has.
func criPods() ([]CRISandbox, error) {
	out, err := crictl("pods", "-o", "json")
	if err != nil {
		return nil, err
	}
	return ParseCRIPods(out)
}

// criContainers returns every container containerd has (-a: exited too).
func criContainers() ([]CRIContainer, error) {
	out, err := crictl("ps", "-a", "-o", "json")
	if err != nil {
		return nil, err
	}
	return ParseCRIContainers(out)
}

// containerPID returns the host pid of a running container (crictl
// inspect's info.pid).
func containerPID(id string) (int, error) {
	out, err := crictl("inspect", "-o", "json", id)
	if err != nil {
		return 0, err
	}
	var v struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return 0, fmt.Errorf("parse crictl inspect %s: %w", id, err)
	}
	if v.Info.Pid <= 0 {
		return 0, fmt.Errorf("crictl inspect %s: no pid", id)
	}
	return v.Info.Pid, nil
}

// cgroupFile reads a file of a cgroup, given by its path beneath the
// cgroup2 mount ("/kubepods.slice").
func cgroupFile(cgroup, file string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", cgroup, file))
	return strings.TrimSpace(string(b)), err
}

// meminfo returns a /proc/meminfo value in bytes.
func meminfo(key string) (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse meminfo %s: %w", key, err)
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		return n, nil
	}
	return 0, fmt.Errorf("meminfo has no %s", key)
}

// kmsgMark writes a line into the kernel log, so a check can read only
// what the kernel logged after it.
func kmsgMark(s string) error {
	return os.WriteFile("/dev/kmsg", []byte("nodelane: "+s+"\n"), 0)
}

// kernelLogSince returns the kernel log after the last line containing
// mark.
func kernelLogSince(mark string) (string, error) {
	out, err := run(cmdTimeout, "dmesg")
	if err != nil {
		return "", err
	}
	i := strings.LastIndex(out, "nodelane: "+mark)
	if i < 0 {
		return "", fmt.Errorf("the kernel log has no mark %q", mark)
	}
	return out[i:], nil
}

// kernelTail returns the kernel log's last n lines (an OOM kill or a
// watchdog's of the agent is there), for a failure's message.
func kernelTail(n int) string {
	out, err := run(cmdTimeout, "dmesg")
	if err != nil {
		return "(dmesg failed: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
