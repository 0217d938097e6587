package nodevm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// LaneTag is the build tag of the guest's checks: without it, the host
// lane's `go test ./...` compiles none of them.
const LaneTag = "nodelane"

// DefaultPackage holds the checks.
const DefaultPackage = "./lab/nodelane"

// DefaultTestTimeout is the test binary's -test.timeout: below the guest's
// DefaultTimeout, so that a hung check panics with every goroutine's stack
// on the test channel before qemu is killed.
const DefaultTestTimeout = 12 * time.Minute

// LaneConfig configures RunLane.
type LaneConfig struct {
	// Runner is the absolute path of the nodevm binary given to go test
	// -exec.
	Runner string
	// Go is the go command.
	Go string
	// Package is the go test package of the checks.
	Package string
	// GoTestFlags are added to the go test command (e.g. -run X).
	GoTestFlags []string
	// TestTimeout is go test's -timeout; zero is DefaultTestTimeout plus
	// the race mode's RaceAllowance.
	TestTimeout time.Duration
	// Verbose also prints go test's === RUN lines.
	Verbose bool
	// Base is the runner configuration.
	Base Config
	Log  *slog.Logger
}

// ErrLaneFailed reports that a check failed, or the package did.
var ErrLaneFailed = errors.New("node lane failed")

// RunLane prepares everything (printing progress), then runs the checks as
// `CGO_ENABLED=0 go test -tags nodelane -json -count=1 -exec <runner>
// <package>`, printing each check's output as it arrives and one line per
// check, and ends with one summary line. It returns an error matching
// ErrLaneFailed when a check or the package failed, after the summary.
func RunLane(ctx context.Context, c LaneConfig, stdout, stderr io.Writer) error {
	start := time.Now()
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	c.Base.Log = c.Log
	p, err := Prepare(ctx, c.Base)
	if err != nil {
		return fmt.Errorf("prepare the node lane: %w", err)
	}
	state := "cached"
	if p.Image.Built {
		state = "built in " + p.Image.BuildTime["total"].String()
	}
	ctrd := p.ContainerdVersion + " (the root filesystem's)"
	if b := p.Containerd; b != nil {
		ctrd = b.Version + " (cached, on the payload)"
		if b.Built {
			ctrd = b.Version + " (built in " + b.BuildTime.String() + ", on the payload)"
		}
	}
	prepared := time.Since(start).Round(time.Millisecond)
	fmt.Fprintf(stdout, "=== node lane: kernel %s, root filesystem %s (%s), containerd %s, crictl %s, ready in %s; race %s; host load average %s\n",
		p.Kernel.Release, p.Image.Key, state, ctrd, CrictlVersion, prepared, c.Base.Race, HostLoad())

	timeout := c.TestTimeout
	if timeout == 0 {
		timeout = DefaultTestTimeout + RaceAllowance(c.Base.Race)
	}
	pkg := c.Package
	if pkg == "" {
		pkg = DefaultPackage
	}
	args := append([]string{"test", "-tags", LaneTag, "-json", "-count=1", "-timeout", timeout.String(), "-exec", c.Runner}, c.GoTestFlags...)
	args = append(args, pkg)
	cmd := exec.CommandContext(ctx, c.Go, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", EnvStage+"="+c.Base.Stage, EnvRace+"="+c.Base.Race, EnvContainerd+"="+c.Base.Containerd)
	if c.Base.Out != "" {
		cmd.Env = append(cmd.Env, EnvOut+"="+c.Base.Out)
	}
	cmd.Stderr = stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "=== node lane: CGO_ENABLED=0 %s %s\n", c.Go, strings.Join(args, " "))
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return err
	}
	sum, rerr := ReadChecks(pipe, stdout, c.Verbose)
	werr := cmd.Wait()
	sum.Release, sum.Containerd = p.Kernel.Release, p.ContainerdVersion
	fmt.Fprintf(stdout, "=== node lane: prepare %s, go test (build, payload, boot, checks) %s, total %s; host load average %s\n",
		prepared, time.Since(t0).Round(time.Second), time.Since(start).Round(time.Second), HostLoad())
	fmt.Fprintln(stdout, sum.String())
	switch {
	case rerr != nil:
		return rerr
	case sum.Failed > 0 || sum.PackageFailed:
		return ErrLaneFailed
	case werr != nil:
		fmt.Fprintf(stderr, "node lane: go test: %v\n", werr)
		return ErrLaneFailed
	case sum.Checks == 0:
		fmt.Fprintln(stderr, "node lane: no check ran")
		return ErrLaneFailed
	}
	return nil
}

// testEvent is one line of `go test -json` (cmd/test2json's TestEvent).
type testEvent struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// Skip is a skipped check and the reason it gave.
type Skip struct{ Check, Reason string }

// Summary adds up one run of the checks. A check is a test without
// subtests: a test with subtests only sums them up.
type Summary struct {
	// Release is the guest kernel's; Containerd names the guest's
	// containerd (Prepared.ContainerdVersion), so that the runs on each
	// are told apart.
	Release, Containerd             string
	Checks, Passed, Failed, Skipped int
	FailedChecks                    []string
	Skips                           []Skip
	// PackageFailed reports that the package failed (or never reported)
	// beyond its checks: a build error, a crash, a guest that died.
	PackageFailed bool
}

// String returns the summary line, e.g. "node 6.12.117+deb12-amd64,
// containerd v2.4.2: checks 12, passed 11, failed 1, skipped 0; FAILED:
// TestNode/x".
func (s *Summary) String() string {
	var b strings.Builder
	b.WriteString("node " + s.Release)
	if s.Containerd != "" {
		b.WriteString(", containerd " + s.Containerd)
	}
	fmt.Fprintf(&b, ": checks %d, passed %d, failed %d, skipped %d", s.Checks, s.Passed, s.Failed, s.Skipped)
	if len(s.Skips) > 0 {
		r := make([]string, len(s.Skips))
		for i, k := range s.Skips {
			r[i] = k.Check + ": " + k.Reason
		}
		fmt.Fprintf(&b, " (%s)", strings.Join(r, "; "))
	}
	if len(s.FailedChecks) > 0 {
		fmt.Fprintf(&b, "; FAILED: %s", strings.Join(s.FailedChecks, ", "))
	}
	if s.PackageFailed {
		b.WriteString("; the test package FAILED")
	}
	return b.String()
}

// fileLine matches the "file_test.go:12: " prefix of t.Log and t.Skip lines.
var fileLine = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// ReadChecks reads a `go test -json` stream and writes its output to out as
// it arrives: every line the tests and the runner print, including go
// test's "--- PASS/FAIL/SKIP" line per check, but not the "=== RUN" framing
// that -json implies (printed too when verbose). It returns the summary.
func ReadChecks(r io.Reader, out io.Writer, verbose bool) (Summary, error) {
	var s Summary
	type check struct {
		action string
		lines  []string
	}
	checks := map[string]*check{}
	var order []string
	parents := map[string]bool{}
	ended := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e testEvent
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintln(out, string(line)) // go test's own plain-text errors
			continue
		}
		switch {
		case e.Action == "build-output":
			io.WriteString(out, e.Output)
			continue
		case e.Test == "":
			switch e.Action {
			case "output":
				io.WriteString(out, e.Output)
			case "pass", "skip":
				ended = true
			case "fail":
				ended = true
				s.PackageFailed = true
			}
			continue
		}
		c, ok := checks[e.Test]
		if !ok {
			c = &check{}
			checks[e.Test] = c
			order = append(order, e.Test)
			for p := e.Test; strings.Contains(p, "/"); {
				p = p[:strings.LastIndex(p, "/")]
				parents[p] = true
			}
		}
		switch e.Action {
		case "output":
			if verbose || !isFraming(e.Output) {
				io.WriteString(out, e.Output)
			}
			c.lines = append(c.lines, e.Output)
		case "pass", "fail", "skip":
			c.action = e.Action
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("read go test -json output: %w", err)
	}
	if !ended {
		s.PackageFailed = true
	}
	for _, name := range order {
		if parents[name] {
			continue
		}
		c := checks[name]
		s.Checks++
		switch c.action {
		case "pass":
			s.Passed++
		case "skip":
			s.Skipped++
			s.Skips = append(s.Skips, Skip{Check: name, Reason: skipReason(c.lines)})
		case "fail":
			s.Failed++
			s.FailedChecks = append(s.FailedChecks, name)
		default:
			s.Failed++
			s.FailedChecks = append(s.FailedChecks, name+" (did not finish)")
		}
	}
	return s, nil
}

// isFraming reports the "=== RUN", "=== PAUSE", "=== CONT" and "=== NAME"
// lines that -json's implied -v adds.
func isFraming(line string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(strings.TrimLeft(line, " "), p) {
			return true
		}
	}
	return false
}

// skipReason returns the message a skipped check gave: its last output
// line that is not framing, without the file:line prefix.
func skipReason(output []string) string {
	lines := strings.Split(strings.Join(output, ""), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" || strings.HasPrefix(l, "=== ") || strings.HasPrefix(l, "--- ") {
			continue
		}
		return strings.TrimSpace(fileLine.ReplaceAllString(lines[i], ""))
	}
	return "no reason given"
}
