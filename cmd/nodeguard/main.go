// Command nodeguard is the node agent: it wires the rooms of the project
// together behind a few subcommands (doctor, events, bench). It holds no
// logic of its own beyond flags, configuration and output.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

type globalFlags struct {
	logLevel  string
	logFormat string
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(g.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", g.logFormat)
}

func newRoot() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "nodeguard",
		Short:         "nodeguard guards a Linux node: kernel events in, evictions out, before the OOM killer",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(newDoctorCmd(g), newEventsCmd(g), newBenchCmd(g), newMetricsCmd(g), newTopCmd(g), newRunCmd(g), newPodCmd(g))
	return root
}

// exitError carries an exit code for commands that must fail with a
// specific status after printing their own report (doctor).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRoot().ExecuteContext(ctx)
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "nodeguard:", err)
	if ee, ok := err.(*exitError); ok {
		os.Exit(ee.code)
	}
	os.Exit(1)
}
