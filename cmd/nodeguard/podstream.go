package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// sessionFlags are exec's and attach's -i and -t.
type sessionFlags struct {
	stdin, tty bool
}

func (f *sessionFlags) add(cmd *cobra.Command, stdinUsage string) {
	cmd.Flags().BoolVarP(&f.stdin, "stdin", "i", false, stdinUsage)
	cmd.Flags().BoolVarP(&f.tty, "tty", "t", false, "allocate a terminal; with -i and a terminal on stdin, it is put in raw mode and resizes follow")
}

// run runs one exec or attach session with the command's streams, as
// kubectl's: with -t on a terminal, stdin goes raw for the session (and
// is restored after it) and SIGWINCH sends the new size; with -t on
// something else, kubectl's warning and no terminal.
func (f *sessionFlags) run(cmd *cobra.Command, session func(context.Context, api.StreamIO) error) error {
	sio := api.StreamIO{Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(), TTY: f.tty}
	in := cmd.InOrStdin()
	if f.stdin {
		sio.Stdin = in
	}
	if f.tty {
		t, ok := terminalOf(in)
		if !ok {
			if f.stdin {
				fmt.Fprintln(cmd.ErrOrStderr(), "Unable to use a TTY - input is not a terminal or the right kind of file")
				sio.TTY = false
			}
		} else {
			if f.stdin {
				restore, err := t.raw()
				if err != nil {
					return err
				}
				defer restore()
			}
			q := t.watchSize()
			defer q.stop()
			sio.Resize = q
		}
	}
	err := session(cmd.Context(), sio)
	if ee, ok := errors.AsType[*api.ExitError](err); ok {
		code := ee.Code
		if code < 1 || code > 255 {
			code = 255 // an exit status is one byte: 256 would read as success
		}
		return &exitError{code: code, msg: ee.Error()}
	}
	return err
}

// terminal is the CLI's stdin when it is a terminal.
type terminal struct{ fd int }

func terminalOf(r io.Reader) (terminal, bool) {
	f, ok := r.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return terminal{}, false
	}
	return terminal{fd: int(f.Fd())}, true
}

// raw puts the terminal in raw mode: keys, ^C included, go to the remote
// terminal, which echoes and handles them.
func (t terminal) raw() (restore func(), err error) {
	old, err := term.MakeRaw(t.fd)
	if err != nil {
		return nil, fmt.Errorf("put the terminal in raw mode: %w", err)
	}
	return func() { term.Restore(t.fd, old) }, nil
}

// sizeQueue is remotecommand's TerminalSizeQueue: the terminal's size at
// once, then after each SIGWINCH; nil once stopped.
type sizeQueue struct {
	t     terminal
	sigs  chan os.Signal
	done  chan struct{}
	first chan struct{}
	once  sync.Once
}

func (t terminal) watchSize() *sizeQueue {
	q := &sizeQueue{t: t, sigs: make(chan os.Signal, 1), done: make(chan struct{}), first: make(chan struct{}, 1)}
	q.first <- struct{}{}
	signal.Notify(q.sigs, syscall.SIGWINCH)
	return q
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	for {
		select {
		case <-q.done:
			return nil
		case <-q.first:
		case <-q.sigs:
		}
		w, h, err := term.GetSize(q.t.fd)
		if err != nil || w <= 0 || h <= 0 {
			continue // no size to send: wait for the next change
		}
		return &remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}
	}
}

func (q *sizeQueue) stop() {
	q.once.Do(func() {
		signal.Stop(q.sigs)
		close(q.done)
	})
}

func (p *podCLI) attachCmd() *cobra.Command {
	var namespace, container string
	var f sessionFlags
	cmd := &cobra.Command{
		Use:   "attach NAME [-c CONTAINER] [-i] [-t]",
		Short: "Attach to a running container's main process: its output, and with -i its stdin",
		Long: `Connects to the main process of a running container through the runtime's
streaming server, as kubectl attach: its stdout and stderr are printed as it
writes them, and with -i the command's stdin is sent to it (the container
needs stdin: true; a terminal needs tty: true, and -t). Exits when the
container ends, with its exit code, or on interrupt.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := p.client()
			defer c.Close()
			return f.run(cmd, func(ctx context.Context, sio api.StreamIO) error {
				return c.Attach(ctx, namespace, args[0], container, sio)
			})
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", podspec.DefaultNamespace, "the pod's namespace")
	cmd.Flags().StringVarP(&container, "container", "c", "", "container name (default: the pod's default container)")
	f.add(cmd, "send stdin to the container (it needs stdin: true)")
	return cmd
}

// portForwardUsage is the error for a port-forward command line without
// ports.
const portForwardUsage = "usage: nodeguard pod port-forward NAME [LOCAL:]REMOTE..."

func (p *podCLI) portForwardCmd() *cobra.Command {
	var namespace string
	cmd := &cobra.Command{
		Use:   "port-forward NAME [LOCAL:]REMOTE...",
		Short: "Forward local ports on 127.0.0.1 to a pod's ports until interrupted",
		Long: `Listens on 127.0.0.1 (loopback only) on each LOCAL port (REMOTE when only
REMOTE is given; 0 or an empty LOCAL picks a free port) and forwards each
connection to the pod's REMOTE port through the runtime's streaming server,
which connects to it inside the pod's network namespace, as kubectl
port-forward. Runs until interrupted.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New(portForwardUsage)
			}
			for _, a := range args[1:] {
				if err := checkPortSpec(a); err != nil {
					return err
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c := p.client()
			defer c.Close()
			return c.PortForward(cmd.Context(), namespace, args[0], args[1:], func([]portforward.ForwardedPort) {},
				cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", podspec.DefaultNamespace, "the pod's namespace")
	return cmd
}

// checkPortSpec checks one [LOCAL:]REMOTE before anything is dialled.
func checkPortSpec(s string) error {
	local, remote, found := strings.Cut(s, ":")
	if !found {
		local, remote = "", local
	}
	if n, err := strconv.ParseUint(remote, 10, 16); err != nil || n == 0 {
		return fmt.Errorf("port %q: REMOTE %q: want a port number between 1 and 65535", s, remote)
	}
	if local != "" {
		if _, err := strconv.ParseUint(local, 10, 16); err != nil {
			return fmt.Errorf("port %q: LOCAL %q: want a port number between 0 and 65535", s, local)
		}
	}
	return nil
}
