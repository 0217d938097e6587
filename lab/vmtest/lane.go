package vmtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"time"
)

// LaneConfig configures RunLane.
type LaneConfig struct {
	// Kernels are the kernel series to test on, in order.
	Kernels []string
	// Packages are go test package patterns, each run on its own.
	Packages []string
	// Runner is the absolute path of the vmrun binary given to go test
	// -exec.
	Runner string
	// Go is the go command.
	Go string
	// GoTestFlags are added to every go test command (e.g. -run X).
	GoTestFlags []string
	// Verbose prints every test's output, not only failed tests'.
	Verbose bool
	// Base is the runner configuration; its Kernel is set per kernel.
	Base Config
	Log  *slog.Logger
}

// ErrLaneFailed reports that at least one package failed in the VM lane.
var ErrLaneFailed = errors.New("VM lane failed")

// RunLane runs every package on every kernel, each package in its own
// `CGO_ENABLED=0 NODEGUARD_VM_KERNEL=<k> go test -json -count=1 -exec
// <runner> <pkg>`, prints go test's usual output, and ends with one summary
// line per kernel. It returns an error matching ErrLaneFailed when a package
// failed, after printing the summary.
func RunLane(ctx context.Context, c LaneConfig, stdout, stderr io.Writer) error {
	start := time.Now()
	var summaries []*KernelSummary
	failed := false
	for _, k := range c.Kernels {
		cfg := c.Base
		cfg.Kernel = k
		if _, err := metaPackage(k); err != nil {
			return err
		}
		t0 := time.Now()
		p, err := Prepare(ctx, cfg)
		if err != nil {
			return fmt.Errorf("prepare kernel %s: %w", k, err)
		}
		fmt.Fprintf(stdout, "=== vm lane: kernel %s is %s, ready in %s\n", k, p.Kernel, time.Since(t0).Round(time.Millisecond))
		s := &KernelSummary{Release: p.Kernel.Release}
		summaries = append(summaries, s)
		for _, pkg := range c.Packages {
			results, err := c.goTest(ctx, k, pkg, stdout, stderr)
			if err != nil {
				failed = true
				if !anyFailed(results) {
					// go test failed without a failed package: say why.
					fmt.Fprintf(stderr, "vm lane: go test %s on %s: %v\n", pkg, k, err)
				}
			}
			if len(results) == 0 {
				// Nothing parsed: count the pattern as one failed
				// package so that it shows.
				results = []PackageResult{{Package: pkg, Action: "fail"}}
			}
			for _, r := range results {
				s.Add(r)
				if r.Action == "fail" {
					failed = true
				}
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	fmt.Fprintf(stdout, "=== vm lane: %d kernels x %d packages in %s\n", len(c.Kernels), len(c.Packages), time.Since(start).Round(time.Second))
	for _, s := range summaries {
		fmt.Fprintln(stdout, s)
	}
	if failed {
		return ErrLaneFailed
	}
	return nil
}

// goTest runs one package on one kernel and returns its results; err is set
// when go test itself failed (which a failed package also does).
func (c *LaneConfig) goTest(ctx context.Context, kernel, pkg string, stdout, stderr io.Writer) ([]PackageResult, error) {
	args := append([]string{"test", "-json", "-count=1", "-exec", c.Runner}, c.GoTestFlags...)
	args = append(args, pkg)
	cmd := exec.CommandContext(ctx, c.Go, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", EnvKernel+"="+kernel)
	cmd.Stderr = stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "=== vm lane: CGO_ENABLED=0 %s=%s %s %s\n", EnvKernel, kernel, c.Go, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	results, rerr := ReadTestJSON(pipe, stdout, c.Verbose)
	werr := cmd.Wait()
	if rerr != nil {
		return results, rerr
	}
	return results, werr
}

func anyFailed(rs []PackageResult) bool {
	for _, r := range rs {
		if r.Action == "fail" {
			return true
		}
	}
	return false
}
