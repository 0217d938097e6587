// What the agent does for itself at start, in every mode: STOPPING=1 to
// systemd at the end, the kubelet's own oom_score_adj, the daemon's
// garbage-collection target (GOGC) and, in guard mode, its memory locked
// (mlockall).

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/internal/group"

	"github.com/nodeguard/nodeguard/qos"
)

// setOwnOOMScoreAdj gives nodeguard the kubelet's own -999, so that the OOM
// killer takes pods before the agent that guards them. Without
// CAP_SYS_RESOURCE the kernel refuses values below the current minimum:
// one log line says so and what stays in force.
func setOwnOOMScoreAdj(log *slog.Logger) {
	want := qos.NodeguardOOMScoreAdj
	err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(want)), 0)
	if err != nil {
		log.Warn("oom_score_adj of nodeguard not lowered (no CAP_SYS_RESOURCE?)", "wanted", want, "kept", OwnOOMScoreAdj(), "err", err)
		return
	}
	log.Info("oom_score_adj of nodeguard set", "value", want)
}

// OwnOOMScoreAdj reads this process's oom_score_adj: the floor without
// CAP_SYS_RESOURCE.
func OwnOOMScoreAdj() int {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0
	}
	var v int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &v); err != nil {
		return 0
	}
	return v
}

// daemonGCPercent is the agent's garbage-collection target (GOGC) unless
// the environment sets GOGC. A node agent's memory comes out of the node's
// reserve, and most of its heap is the same few megabytes of pod and
// cgroup state rebuilt every second: at the Go default of 100 the heap
// peaks at twice what is live. 50 keeps max RSS under the 80 MiB target
// for little CPU (docs/benchmarks.md has the figures). (Prometheus lowers
// its GOGC to 75 for the same reason.)
const daemonGCPercent = 50

// setDaemonGC applies daemonGCPercent unless GOGC is set, and says which
// is in force.
func setDaemonGC(log *slog.Logger) {
	if v, ok := os.LookupEnv("GOGC"); ok {
		log.Debug("garbage collection target from GOGC", "GOGC", v)
		return
	}
	debug.SetGCPercent(daemonGCPercent)
	log.Debug("garbage collection target", "GOGC", daemonGCPercent)
}

// lockMemory keeps the agent's pages in memory: mlockall(MCL_CURRENT |
// MCL_FUTURE | MCL_ONFAULT), every page locked as it is first touched and
// none loaded before. A node that thrashes evicts the page cache it
// re-reads, the agent's own code among it: measured on the node lane's
// guest, a tail /dev/zero pod stalled the node for minutes and the guard
// beside the kubelet, its text paged out, did not act on a PSI rule met
// for minutes. Locked, the code it runs stays resident (a static binary's
// text is file-backed: the first thing reclaim takes) and the heap it
// grows is never swapped. ONFAULT: the pages never touched (most of the
// binary) cost nothing. Without CAP_IPC_LOCK and under RLIMIT_MEMLOCK it
// fails: one line says so, and the agent runs unlocked.
func lockMemory(log *slog.Logger) {
	if err := unix.Mlockall(unix.MCL_CURRENT | unix.MCL_FUTURE | unix.MCL_ONFAULT); err != nil {
		log.Warn("memory not locked: under heavy memory pressure the kernel may page the agent's code out and stall it (CAP_IPC_LOCK and LimitMEMLOCK=infinity allow it)", "err", err)
		return
	}
	log.Info("memory locked as touched (mlockall, on fault)")
}

// daemonSelf is what every daemon of nodeguard does for itself at start:
// STOPPING=1 to systemd once its group ends, the kubelet's own
// oom_score_adj, the daemon's garbage-collection target.
func daemonSelf(g *group.Group, n *Notifier, log *slog.Logger) {
	g.Go("stop notice", func(ctx context.Context) error {
		<-ctx.Done()
		n.stopping()
		return nil
	})
	setOwnOOMScoreAdj(log)
	setDaemonGC(log)
}
