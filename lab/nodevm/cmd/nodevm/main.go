// Command nodevm runs the node lane's checks (package lab/nodelane)
// inside a qemu VM that boots a Debian 12 root filesystem with systemd,
// containerd and the `make install`ed nodeguard (see package nodevm).
//
// As go test's runner:
//
//	NODEGUARD_NODE_STAGE=<make install DESTDIR> CGO_ENABLED=0 \
//	    go test -tags nodelane -exec /abs/path/nodevm ./lab/nodelane
//
// go test starts `nodevm <test binary> <test flags...>` in the package
// directory; nodevm exits with the test binary's exit status.
//
// As qemu's relay of a guest's connection to its control plane (a
// NODEGUARD_NODE_CLUSTER run; qemu spawns it for each connection):
//
//	nodevm -relay 127.0.0.1:PORT
//
// As the node lane of make test-node:
//
//	nodevm -lane [-run REGEXP] [-v] [PACKAGE]
//
// prepares the caches, runs the checks and prints one summary line.
// NODEGUARD_NODE_OUT names the directory the guest's output disk is
// copied to (make test-node: out/node); NODEGUARD_NODE_RACE the race
// check's mode (quick, full, off).
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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nodeguard/nodeguard/lab/nodevm"
)

// sbin are the directories of the build's tools (mkfs.ext4, chroot,
// depmod in the chroot) that a non-login PATH may lack.
var sbin = []string{"/usr/local/sbin", "/usr/sbin", "/sbin"}

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	path := filepath.SplitList(os.Getenv("PATH"))
	for _, d := range sbin {
		if !slices.Contains(path, d) {
			path = append(path, d)
		}
	}
	os.Setenv("PATH", strings.Join(path, string(filepath.ListSeparator)))
	if args := os.Args[1:]; len(args) == 2 && args[0] == "-relay" {
		os.Exit(relay(args[1]))
	}
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

// relay is what qemu's guestfwd spawns for each connection the guest
// makes to its control plane (nodevm.GuestNet). qemu gives it the
// connection as its stdin, stdout and stderr alike: nothing may be
// written to stderr (it would land in the guest's TLS stream), so an
// error is only the exit status, and stderr goes to /dev/null before
// anything can write to it (a panic's trace included).
func relay(addr string) int {
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		_ = syscall.Dup2(int(null.Fd()), 2)
		os.Stderr = null
	}
	if err := nodevm.Relay(addr, os.Stdin, os.Stdout); err != nil {
		return 1
	}
	return 0
}

// execTest is go test -exec mode.
func execTest(ctx context.Context, binary string, args []string, log *slog.Logger) int {
	c, err := nodevm.ConfigFromEnv(os.Getenv, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodevm: %v\n", err)
		return 2
	}
	dir, err := os.Getwd()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodevm: %v\n", err)
		return 2
	}
	p, err := nodevm.Prepare(ctx, c)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodevm: prepare: %v\n", err)
		return 2
	}
	res, err := nodevm.Run(ctx, c, p, nodevm.Test{Binary: binary, Args: args, Dir: dir, Environ: os.Environ()}, os.Stdout, os.Stderr)
	log.Info("guest ended", "payload_disk", res.Payload.Round(time.Millisecond), "guest", res.Elapsed.Round(time.Millisecond),
		"exit_status", res.Status, "exited", res.Exited, "host_load", nodevm.HostLoad())
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodevm: %v\n", err)
		if res.TimedOut {
			return 124
		}
		return 1
	}
	return res.Status
}

// lane is make test-node's driver.
func lane(ctx context.Context, args []string, log *slog.Logger) int {
	fs := flag.NewFlagSet("nodevm", flag.ContinueOnError)
	isLane := fs.Bool("lane", false, "run the node lane: prepare, run the checks, print a summary")
	runRE := fs.String("run", "", "passed to go test -run")
	verbose := fs.Bool("v", false, "also print go test's === RUN lines")
	goCmd := fs.String("go", "go", "the go command")
	timeout := fs.Duration("timeout", 0, fmt.Sprintf("go test -timeout (default %s, plus %s's allowance for the race)", nodevm.DefaultTestTimeout, nodevm.EnvRace))
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage:\n  go test -tags %s -exec /abs/path/nodevm PACKAGE   (with %s set)\n  nodevm -lane [flags] [PACKAGE]\n",
			nodevm.LaneTag, nodevm.EnvStage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if !*isLane || fs.NArg() > 1 {
		fs.Usage()
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodevm: %v\n", err)
		return 2
	}
	// The runner go test starts sits in the package directory: a
	// relative output directory is this one's.
	if out := os.Getenv(nodevm.EnvOut); out != "" && !filepath.IsAbs(out) {
		abs, err := filepath.Abs(out)
		if err != nil {
			fmt.Fprintf(os.Stderr, "nodevm: %s: %v\n", nodevm.EnvOut, err)
			return 2
		}
		os.Setenv(nodevm.EnvOut, abs)
	}
	base, err := nodevm.ConfigFromEnv(os.Getenv, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodevm: %v\n", err)
		return 2
	}
	base.Go = *goCmd
	c := nodevm.LaneConfig{
		Runner:      self,
		Go:          *goCmd,
		Package:     fs.Arg(0),
		TestTimeout: *timeout,
		Verbose:     *verbose,
		Base:        base,
		Log:         log,
	}
	if *runRE != "" {
		c.GoTestFlags = append(c.GoTestFlags, "-run", *runRE)
	}
	if err := nodevm.RunLane(ctx, c, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, nodevm.ErrLaneFailed) {
			fmt.Fprintf(os.Stderr, "nodevm: %v\n", err)
		}
		return 1
	}
	return 0
}
