package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier speaks systemd's notification protocol (sd_notify(3)): READY=1
// once the agent serves, STATUS= lines, RELOADING=1 around a SIGHUP,
// STOPPING=1, and WATCHDOG=1 while its loops are alive. Outside systemd
// (no NOTIFY_SOCKET) every method does nothing.
//
// NewNotifier takes NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID out of
// the environment, as sd_notify(3) recommends, so that no child process
// (the private runtime's containerd, which notifies too; CNI plugins)
// speaks to systemd for nodeguard. go-systemd's daemon.SdNotify reads
// NOTIFY_SOCKET on every call, so it could not send after that: the
// datagram is sent here the same way, to the address captured once.
type Notifier struct {
	addr *net.UnixAddr // nil: not under a service manager
	log  *slog.Logger
	// watchdog is WatchdogSec (WATCHDOG_USEC); 0: no watchdog.
	watchdog time.Duration
	failed   atomic.Bool // one warning for a failing socket
}

// NewNotifier is the notifier of this process: make it before any child
// process starts, for it takes systemd's variables out of the environment.
func NewNotifier(log *slog.Logger) *Notifier {
	n := &Notifier{log: log}
	// WATCHDOG_PID naming another process (inherited) disables it.
	wd, err := daemon.SdWatchdogEnabled(true)
	if err != nil {
		log.Warn("systemd watchdog: bad environment, no watchdog pings", "err", err)
	}
	n.watchdog = wd
	if path := os.Getenv("NOTIFY_SOCKET"); path != "" {
		n.addr = &net.UnixAddr{Name: path, Net: "unixgram"} // "@name": abstract, as Go maps it
		os.Unsetenv("NOTIFY_SOCKET")
	}
	return n
}

// enabled reports whether a service manager listens.
func (n *Notifier) enabled() bool { return n != nil && n.addr != nil }

// send writes one datagram of newline-separated assignments. A failure is
// logged once: the agent runs on without its manager hearing it (and the
// watchdog, if any, will restart it).
func (n *Notifier) send(states ...string) {
	if !n.enabled() {
		return
	}
	err := func() error {
		c, err := net.DialUnix("unixgram", nil, n.addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(strings.Join(states, "\n")))
		return err
	}()
	if err != nil && n.failed.CompareAndSwap(false, true) {
		n.log.Warn("systemd notification failed", "socket", n.addr.Name, "state", states[0], "err", err)
	}
}

// status sets the one-line status systemctl status shows.
func (n *Notifier) Status(format string, args ...any) {
	n.send("STATUS=" + fmt.Sprintf(format, args...))
}

// ready tells systemd start-up (or a reload) is done.
func (n *Notifier) ready(status string) { n.send(daemon.SdNotifyReady, "STATUS="+status) }

// reloading tells systemd a reload began; ready ends it.
func (n *Notifier) reloading() {
	n.send(daemon.SdNotifyReloading, "STATUS=reloading the configuration")
}

// stopping tells systemd the agent is shutting down.
func (n *Notifier) stopping() { n.send(daemon.SdNotifyStopping, "STATUS=stopping") }

// heartbeat is one part of the agent the watchdog vouches for: a loop
// whose last progress was at last (zero: not started yet) and should come
// every period; and, with down, a part that can stop working outright,
// down saying why (nil: it works). Either may be nil.
type heartbeat struct {
	name   string
	period time.Duration
	last   func() time.Time
	down   func() error
}

// stuck says why b is unhealthy at now ("" when it is not): down, or no
// progress for longer than its period plus grace.
func (b heartbeat) stuck(now, started time.Time, grace time.Duration) (string, time.Duration) {
	if b.down != nil {
		if err := b.down(); err != nil {
			return fmt.Sprintf("%s down: %v", b.name, err), 0
		}
	}
	if b.last == nil {
		return "", 0
	}
	last := b.last()
	if last.IsZero() {
		last = started
	}
	if age := now.Sub(last); age > b.period+grace {
		return fmt.Sprintf("%s loop stuck for %v", b.name, age.Round(time.Millisecond)), age
	}
	return "", 0
}

// counterBeat turns a counter that a loop increments each pass (the
// eviction manager's Evaluations) into a heartbeat: the time it was last
// seen to change. Only the watchdog goroutine calls the result.
func counterBeat(count func() uint64, now func() time.Time) func() time.Time {
	var last uint64
	var at time.Time
	return func() time.Time {
		if c := count(); c != last || at.IsZero() {
			last, at = c, now()
		}
		return at
	}
}

// statusEvery is how often the status line is refreshed without a
// watchdog. With one, the loop checks and pings every quarter of the
// timeout, so that a ping late by scheduling delay is not fatal.
const statusEvery = 5 * time.Second

// runWatchdog checks the heartbeats and pings WATCHDOG=1 until ctx ends.
// A part is unhealthy when it is down, or when its heartbeat is older
// than its period plus half the watchdog timeout; while any is, pings
// stop (systemd restarts the agent once the timeout runs out; with
// KillMode=process the pods stay), the status line names the part, and
// one error is logged. status is the running status line, sent when it
// changes. Outside systemd it returns at once.
func (n *Notifier) runWatchdog(ctx context.Context, beats []heartbeat, status func() string) {
	if !n.enabled() {
		return
	}
	every := statusEvery
	if n.watchdog > 0 {
		every = n.watchdog / 4
	}
	t := time.NewTicker(every)
	defer t.Stop()
	started := time.Now()
	var lastStatus string
	stuck := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		cur := ""
		// Without a watchdog nothing restarts the agent: the status
		// line only counts pods.
		for i := 0; n.watchdog > 0 && i < len(beats) && cur == ""; i++ {
			b := beats[i]
			why, age := b.stuck(now, started, n.watchdog/2)
			if why != "" && stuck == "" {
				attrs := []any{"loop", b.name, "why", why}
				if age > 0 {
					attrs = append(attrs, "stuck_for", age, "limit", b.period+n.watchdog/2)
				}
				n.log.Error("watchdog: a main loop is stuck, no longer pinging systemd (it will restart nodeguard)", attrs...)
			}
			cur = why
		}
		if cur != "" {
			stuck = cur
			if cur != lastStatus {
				n.Status("%s", cur)
				lastStatus = cur
			}
			continue
		}
		if stuck != "" {
			n.log.Warn("watchdog: the main loops run again, pinging systemd", "was", stuck)
			stuck = ""
		}
		states := []string{}
		if n.watchdog > 0 {
			states = append(states, daemon.SdNotifyWatchdog)
		}
		if s := status(); s != lastStatus {
			states = append(states, "STATUS="+s)
			lastStatus = s
		}
		if len(states) > 0 {
			n.send(states...)
		}
	}
}
