// Where the agent itself runs, checked at start: its cgroup root, its
// placement beside the runtime, its own oom_score_adj.

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/cgroups/kubepods"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/qos"
)

// refuseRelativeRootInService refuses a relative cgroup root beneath a
// systemd service's cgroup on cgroup v2: nodeguard would enable
// controllers in the service's cgroup (after moving itself into a leaf),
// and then systemd could not start the next agent there after a restart
// or crash (the kernel refuses to put a process into a cgroup whose
// controllers are enabled for its children), so the unit would fail to
// start for good while the pods live on.
func refuseRelativeRootInService(h *cgroups.Hierarchy, root string) error {
	if h == nil || !strings.HasSuffix(path.Base(h.Own), ".service") {
		return nil
	}
	return fmt.Errorf("cgroupRoot %q is relative, beneath the systemd service's cgroup %s: on cgroup v2 systemd could not start the agent there again after a restart once pod cgroups hang from it; use cgroupRoot: / (the default)", root, h.Own)
}

// checkPlacement makes sure the runtime will put containers into the
// cgroups nodeguard makes, before any pod runs: the runtime's cgroup
// driver, where it says (CRI RuntimeConfig), must be nodeguard's; and a
// runtime handed relative cgroup parents must share nodeguard's cgroup.
// Every sandbox is checked again once it runs (kubepods.CheckSandbox).
func checkPlacement(ctx context.Context, client *cri.Client, cgm *kubepods.Manager, log *slog.Logger) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	d, ok, err := client.CgroupDriver(cctx)
	switch {
	case err != nil:
		log.Warn("the runtime's cgroup driver is unknown; every sandbox's placement is checked instead", "err", err)
	case !ok:
		log.Info("the runtime does not report its cgroup driver (CRI RuntimeConfig); every sandbox's placement is checked instead",
			"cgroup_driver", cgm.Driver())
	default:
		if err := cgm.CheckRuntimeDriver(d); err != nil {
			return err
		}
		log.Info("cgroup driver matches the runtime's", "cgroup_driver", d)
	}
	switch pid := client.RuntimePID(); {
	case cgm.AbsoluteParents():
	case pid == 0:
		log.Warn("the runtime's pid is unknown (no SO_PEERCRED): cannot check that it shares nodeguard's cgroup, as a relative cgroup root needs; every sandbox's placement is checked instead")
	case pid == 1:
		log.Warn("the CRI socket is served by pid 1 (socket activation): cannot check the runtime's cgroup; every sandbox's placement is checked instead")
	default:
		return cgm.CheckRuntimeCgroup(pid)
	}
	return nil
}

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
