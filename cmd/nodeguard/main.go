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
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodeguard/nodeguard/internal/logging"
)

type globalFlags struct {
	logLevel  string
	logFormat string
	// logs is the logger logger() made, closed (flushed) by main.
	logs *logging.Logger
}

// logShutdownTimeout bounds how long exit waits for queued log records to
// be written: a stalled output must not keep a stopping agent alive.
const logShutdownTimeout = 2 * time.Second

// logger returns the command's logger: to stderr, never blocking (see
// internal/logging), with the level and format of the flags. Under
// journald it leaves the time to the journal and prefixes priorities.
func (g *globalFlags) logger() (*slog.Logger, error) {
	if g.logs != nil {
		return g.logs.Slog(), nil
	}
	lvl, err := logging.ParseLevel(g.logLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-%w", err)
	}
	format, err := logging.ParseFormat(g.logFormat)
	if err != nil {
		return nil, fmt.Errorf("--log-%w", err)
	}
	g.logs = logging.New(os.Stderr, logging.Options{Level: lvl, Format: format, Journal: logging.JournalStream(os.Stderr)})
	return g.logs.Slog(), nil
}

// closeLogger writes what the logger still holds.
func (g *globalFlags) closeLogger() {
	if g.logs != nil {
		g.logs.Close(logShutdownTimeout)
	}
}

func newRoot() *cobra.Command { return newRootFor(&globalFlags{}) }

func newRootFor(g *globalFlags) *cobra.Command {
	root := &cobra.Command{
		Use:           "nodeguard",
		Short:         "nodeguard guards a Linux node: kernel events in, evictions out, before the OOM killer",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(newDoctorCmd(g), newEventsCmd(g), newBenchCmd(g), newMetricsCmd(g), newTopCmd(g), newRunCmd(g), newGuardCmd(g), newPodCmd(g), newConfigCmd(), newVersionCmd())
	setVersionFlag(root)
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
	g := &globalFlags{}
	err := newRootFor(g).ExecuteContext(ctx)
	g.closeLogger()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "nodeguard:", err)
	if ee, ok := err.(*exitError); ok {
		os.Exit(ee.code)
	}
	os.Exit(1)
}
