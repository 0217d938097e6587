// Command vmrun runs Go test binaries inside throwaway qemu VMs on Debian's
// kernels with pure cgroup v2 (see package vmtest).
//
// As go test's runner:
//
//	CGO_ENABLED=0 NODEGUARD_VM_KERNEL=6.12 go test -exec /abs/path/vmrun ./loader
//
// go test starts `vmrun <test binary> <test flags...>` in the package
// directory; vmrun exits with the test binary's exit status.
//
// As the VM lane of make test-vm:
//
//	vmrun -lane [-kernels '6.1 6.12'] [-run REGEXP] [-v] PACKAGE...
//
// runs every package on every kernel and prints one summary line per kernel.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nodeguard/nodeguard/lab/vmtest"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], log)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, log *slog.Logger) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return lane(ctx, args, log)
	}
	return execTest(ctx, args[0], args[1:], log)
}

// execTest is go test -exec mode.
func execTest(ctx context.Context, binary string, args []string, log *slog.Logger) int {
	c, err := vmtest.ConfigFromEnv(os.Getenv, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		return 2
	}
	if err := vmtest.CheckStatic(binary); err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		return 2
	}
	dir, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		return 2
	}
	p, err := vmtest.Prepare(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: prepare kernel %s: %v\n", c.Kernel, err)
		return 2
	}
	res, err := vmtest.Run(ctx, c, p, vmtest.Test{Binary: binary, Args: args, Dir: dir, Environ: os.Environ()}, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: %s on %s: %v\n", filepath.Base(binary), p.Kernel.Release, err)
		if res.TimedOut {
			return 124
		}
		return 1
	}
	return res.Status
}

// lane is make test-vm's driver.
func lane(ctx context.Context, args []string, log *slog.Logger) int {
	fs := flag.NewFlagSet("vmrun", flag.ContinueOnError)
	isLane := fs.Bool("lane", false, "run the VM lane: every PACKAGE on every kernel, then a summary")
	kernels := fs.String("kernels", strings.Join(vmtest.KernelSeries(), " "), "kernel series to test on, space-separated")
	runRE := fs.String("run", "", "passed to go test -run")
	verbose := fs.Bool("v", false, "print every test's output, not only failed tests'")
	goCmd := fs.String("go", "go", "the go command")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage:\n  go test -exec %s PACKAGE    (with %s set)\n  vmrun -lane [flags] PACKAGE...\n", "/abs/path/vmrun", vmtest.EnvKernel)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !*isLane || fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		return 2
	}
	// Kernel is set per kernel by RunLane; validate the rest now.
	base, err := vmtest.ConfigFromEnv(func(k string) string {
		if k == vmtest.EnvKernel {
			return vmtest.KernelSeries()[0]
		}
		return os.Getenv(k)
	}, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		return 2
	}
	c := vmtest.LaneConfig{
		Kernels:  strings.Fields(*kernels),
		Packages: fs.Args(),
		Runner:   self,
		Go:       *goCmd,
		Verbose:  *verbose,
		Base:     base,
		Log:      log,
	}
	if *runRE != "" {
		c.GoTestFlags = append(c.GoTestFlags, "-run", *runRE)
	}
	if err := vmtest.RunLane(ctx, c, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, vmtest.ErrLaneFailed) {
			fmt.Fprintf(os.Stderr, "vmrun: %v\n", err)
		}
		return 1
	}
	return 0
}
