//go:build nodelane

package nodelane

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lab/nodevm"
)

// The driver checks run last, on a node without pods (the cleanup check
// removed them): first nodeguard with the other driver than containerd's,
// then both switched to cgroupfs.
const (
	// containerdConfig is where the lane's image has containerd's
	// configuration (nodevm bakes it with SystemdCgroup = true).
	containerdConfig = "/etc/containerd/config.toml"
	// refusedBound: the pod's sandbox is tried, refused by runc, and its
	// status says why, within a few sync passes under TCG.
	refusedBound = 90 * time.Second
	// containerdBound: containerd restarted and its CRI answering.
	containerdBound = 60 * time.Second
)

// restartAgent writes v over the installed configuration and restarts
// nodeguard, waiting for READY.
func (n *node) restartAgent(t *testing.T, v NodeValues) {
	t.Helper()
	if err := n.writeConfig(v); err != nil {
		t.Fatal(err)
	}
	if out, err := systemctl(startCmdBound, "restart", "nodeguard"); err != nil {
		t.Fatalf("systemctl restart nodeguard: %v %s; journal:\n%s", err, out, journalText("nodeguard", 30))
	}
	requireAgent(t)
}

// deletePod removes a pod through the API and waits until it is gone.
func deletePod(t *testing.T, p podRef) {
	t.Helper()
	if out, err := nodeguard(cmdTimeout, "pod", "rm", "-n", p.Namespace, p.Name); err != nil && !strings.Contains(out, "not found") {
		t.Fatalf("nodeguard pod rm %s: %v %s", p, err, out)
	}
	if _, err := waitFor(p.String()+" gone", deleteBound, func() (bool, string, error) {
		l, err := listPods()
		if err != nil {
			return false, err.Error(), nil
		}
		return findPod(l, p.Namespace, p.Name) == nil, describePods(l), nil
	}); err != nil {
		t.Fatal(err)
	}
}

// refusedAtStart restarts nodeguard with cgroupDriver agent on a runtime
// that reports driver runtime through CRI RuntimeConfig, and checks that
// the start is refused before READY: systemctl restart fails, the unit is
// not active, and the journal has the agent's error naming both drivers
// and the one to set; no sandbox runs. It then restarts the agent with
// after, waiting for READY.
func (n *node) refusedAtStart(t *testing.T, agent, runtime string, after NodeValues) {
	t.Helper()
	v := n.values
	v.CgroupDriver = agent
	if err := n.writeConfig(v); err != nil {
		t.Fatal(err)
	}
	cursor, err := journalCursor()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	out, err := systemctl(startCmdBound, "restart", "nodeguard")
	took := time.Since(t0)
	if err == nil {
		t.Errorf("systemctl restart nodeguard succeeded (READY=1) with cgroupDriver %s on containerd's %s driver, which RuntimeConfig reports: want it refused at start", agent, runtime)
	}
	want := []string{"cgroup driver mismatch", "cgroupDriver is " + agent + " but the runtime reports " + runtime, "set cgroupDriver: " + runtime}
	e, jerr := waitJournal(cursor, journalBound, "the agent's refusal naming both drivers", func(e JournalEntry) bool {
		if e["_PID"] == "1" {
			return false
		}
		for _, w := range want {
			if !strings.Contains(e["MESSAGE"], w) {
				return false
			}
		}
		return true
	})
	if jerr != nil {
		t.Errorf("%v; journal:\n%s", jerr, journalText("nodeguard", 20))
	}
	p, perr := unitProps("nodeguard", "ActiveState", "SubState", "Result", "ExecMainStatus", "NRestarts")
	if perr != nil {
		t.Fatal(perr)
	}
	if p["ActiveState"] == "active" {
		t.Errorf("nodeguard.service is %s/%s after the refusal", p["ActiveState"], p["SubState"])
	}
	if sbs, err := criPods(); err == nil {
		for _, sb := range sbs {
			if sb.Labels[LabelPodUID] != "" && sb.State == "SANDBOX_READY" {
				t.Errorf("a sandbox runs after the refusal: %+v", sb)
			}
		}
	}
	if jerr == nil {
		t.Logf("refused at start (systemctl restart: %s after %s; unit %s/%s, result %s, exit status %s, restarts %s): %q",
			firstLine(out), took.Round(time.Millisecond), p["ActiveState"], p["SubState"], p["Result"], p["ExecMainStatus"], p["NRestarts"], e["MESSAGE"])
	}
	n.restartAgent(t, after)
}

// driverFromRuntime: nodeguard with cgroupDriver unset, as make install
// ships it, on a runtime that reports its driver (containerd 2.x): the
// agent takes containerd's systemd driver from CRI RuntimeConfig, says so,
// and a pod runs in its systemd slice beneath kubepods.slice. On a runtime
// that does not report one (1.6) driverMismatch checks the fallback.
func (n *node) driverFromRuntime(t *testing.T) {
	requireAgent(t)
	n.requireReportedDriver(t)
	if n.runtimeDriver == "" {
		t.Skip("containerd does not report its cgroup driver (CRI RuntimeConfig): the unset driver's fallback is checked with the mismatch")
	}
	base := n.values
	v := base
	v.CgroupDriver = ""
	cursor, err := journalCursor()
	if err != nil {
		t.Fatal(err)
	}
	n.restartAgent(t, v)
	defer n.restartAgent(t, base)
	e, err := waitJournal(cursor, journalBound, "the agent taking the runtime's driver", func(e JournalEntry) bool {
		return strings.Contains(e["MESSAGE"], "cgroup driver: the runtime's") && strings.Contains(e["MESSAGE"], "systemd")
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 20))
	}
	if out, err := applyPods(appliedPod.File); err != nil {
		t.Fatalf("nodeguard pod apply -f %s: %v %s", appliedPod.File, err, out)
	}
	var pod *corev1.Pod
	d, err := waitFor("the pod Running", podsBound, func() (bool, string, error) {
		l, err := listPods()
		if err != nil {
			return false, err.Error(), nil
		}
		pod = findPod(l, appliedPod.Namespace, appliedPod.Name)
		return pod != nil && pod.Status.Phase == corev1.PodRunning, describePods(l), nil
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
	}
	uid := string(pod.UID)
	slice := "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(uid, "-", "_") + ".slice"
	checkContainerCgroups(t, uid, func(id string) string { return slice + "/cri-containerd-" + id + ".scope" })
	t.Logf("cgroupDriver unset: %q; the pod Running in %s after %s", e["MESSAGE"], slice, d.Round(time.Millisecond))
	deletePod(t, appliedPod)
}

// driverMismatch: nodeguard with cgroupDriver: cgroupfs on containerd's
// systemd driver. A runtime that reports its driver (containerd 2.x)
// gets the agent refused at start; one that does not (1.6) gets every
// sandbox refused, with the pod's status saying which driver to set.
func (n *node) driverMismatch(t *testing.T) {
	requireAgent(t)
	n.requireReportedDriver(t)
	if n.runtimeDriver != "" {
		if d, err := runtimeDriver(); err != nil || d != "systemd" {
			t.Fatalf("precondition: containerd's RuntimeConfig reports %q (%v), want systemd", d, err)
		}
		n.refusedAtStart(t, "cgroupfs", "systemd", n.values)
		return
	}
	// cgroupDriver unset, as make install ships it: with no driver
	// reported the agent warns, takes cgroupfs (the kubelet's default),
	// and each sandbox is checked.
	t.Logf("containerd does not report its cgroup driver (CRI RuntimeConfig; see the containerd check): with cgroupDriver unset the agent warns and takes cgroupfs, and each sandbox is checked")
	v := n.values
	v.CgroupDriver = ""
	cursor, err := journalCursor()
	if err != nil {
		t.Fatal(err)
	}
	n.restartAgent(t, v)
	if _, err := waitJournal(cursor, journalBound, "the agent's warning that it takes cgroupfs", func(e JournalEntry) bool {
		return strings.Contains(e["MESSAGE"], "cgroupDriver is not set and the runtime does not report its own")
	}); err != nil {
		t.Errorf("%v; journal:\n%s", err, journalText("nodeguard", 20))
	}
	if out, err := applyPods(appliedPod.File); err != nil {
		t.Fatalf("nodeguard pod apply -f %s: %v %s", appliedPod.File, err, out)
	}
	var msg, uid string
	d, err := waitFor("the pod's status to say the driver is containerd's", refusedBound, func() (bool, string, error) {
		l, err := listPods()
		if err != nil {
			return false, err.Error(), nil
		}
		p := findPod(l, appliedPod.Namespace, appliedPod.Name)
		if p == nil {
			return false, describePods(l), nil
		}
		if p.Status.Phase == corev1.PodRunning {
			return false, "", fmt.Errorf("the pod runs with cgroupDriver cgroupfs on containerd's systemd driver: %s", describePods(l))
		}
		msg, uid = p.Status.Message, string(p.UID)
		return strings.Contains(msg, "cgroupDriver: systemd"), describePods(l), nil
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 20))
	}
	if sbs, err := criPods(); err == nil {
		for _, sb := range sbs {
			if sb.Labels[LabelPodUID] != "" && sb.State == "SANDBOX_READY" {
				t.Errorf("a sandbox runs after the refusal: %+v", sb)
			}
		}
	}
	t.Logf("refused within %s: %q", d.Round(time.Millisecond), msg)
	deletePod(t, appliedPod)
	if _, err := waitFor("no cgroup of the refused pod", leftoverBound, func() (bool, string, error) {
		left := podCgroupDirs([]string{uid})
		return len(left) == 0, strings.Join(left, " "), nil
	}); err != nil {
		t.Error(err)
	}
}

// requireReportedDriver fails t at once on containerd 2.x when the
// containerd check did not read its driver through RuntimeConfig: the
// driver checks would otherwise take the path of a runtime that does not
// report one.
func (n *node) requireReportedDriver(t *testing.T) {
	t.Helper()
	if n.runtime == nodevm.ContainerdV2 && n.runtimeDriver == "" {
		t.Fatalf("precondition: containerd %s reported no cgroup driver through RuntimeConfig in the containerd check; see that check", nodevm.ContainerdV2)
	}
}

func (n *node) cgroupfsDriver(t *testing.T) {
	requireAgent(t)
	n.requireReportedDriver(t)
	setSystemdCgroup(t, false)
	v := n.values
	v.CgroupDriver = "cgroupfs"
	if n.runtimeDriver != "" {
		// The reverse mismatch: the systemd driver on containerd's
		// cgroupfs, refused at start as well.
		n.refusedAtStart(t, "systemd", "cgroupfs", v)
	} else {
		n.restartAgent(t, v)
	}
	if out, err := applyPods(appliedPod.File); err != nil {
		t.Fatalf("nodeguard pod apply -f %s: %v %s", appliedPod.File, err, out)
	}
	var pod *corev1.Pod
	d, err := waitFor("the pod Running", podsBound, func() (bool, string, error) {
		l, err := listPods()
		if err != nil {
			return false, err.Error(), nil
		}
		pod = findPod(l, appliedPod.Namespace, appliedPod.Name)
		return pod != nil && pod.Status.Phase == corev1.PodRunning && allReady(pod), describePods(l), nil
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
	}
	uid := string(pod.UID)
	podDir := "/kubepods/burstable/pod" + uid
	checkContainerCgroups(t, uid, func(id string) string { return podDir + "/" + id })
	if got := mustCgroup(podDir, "memory.max"); got != fmt.Sprint(64<<20) {
		t.Errorf("%s memory.max %s, want the pod's 64Mi limit", podDir, got)
	}
	kmax := mustCgroup("/kubepods", "memory.max")
	t.Logf("Running %s after the apply; container in %s/<id>, memory.max %s; /kubepods memory.max %s", d.Round(time.Millisecond),
		podDir, mustCgroup(podDir, "memory.max"), kmax)
	deletePod(t, appliedPod)
	if _, err := waitFor("the pod's cgroup gone", leftoverBound, func() (bool, string, error) {
		_, err := os.Stat(filepath.Join("/sys/fs/cgroup", podDir))
		return os.IsNotExist(err), fmt.Sprint(err), nil
	}); err != nil {
		t.Error(err)
	}
}

// daemonReloadBound: how soon after a daemon-reload that reset it the
// tripwire must have armed memory.high again (its refresher runs every
// 100 ms near the line, its poll at most every 100 ms).
const daemonReloadBound = 5 * time.Second

// daemonReload checks that systemd re-applying kubepods.slice's unit
// properties (daemon-reload, which every package installing a unit runs)
// does not leave the pod root without its tripwire: memory.high, which
// nodeguard writes outside systemd's knowledge, is either kept or armed
// again.
func (n *node) daemonReload(t *testing.T) {
	requireAgent(t)
	// Armed first: systemd re-applies the slice's MemoryHigh= on other
	// occasions too (the CI run that added this wait found it max 0.28 s
	// into the check, after the reload check), and the assist arms it
	// again within its read-back period.
	pre, err := waitFor("kubepods.slice memory.high armed before the reload", daemonReloadBound, func() (bool, string, error) {
		v := mustCgroup("/kubepods.slice", "memory.high")
		return v != "max", v, nil
	})
	if err != nil {
		t.Fatalf("%v: the tripwire's assist is not armed", err)
	}
	before := mustCgroup("/kubepods.slice", "memory.high")
	if pre > 100*time.Millisecond {
		t.Logf("memory.high was max when the check began; armed %s later; the agent's last lines:\n%s",
			pre.Round(time.Millisecond), journalText("nodeguard", 8))
	}
	if out, err := systemctl(startCmdBound, "daemon-reload"); err != nil {
		t.Fatalf("systemctl daemon-reload: %v %s", err, out)
	}
	right := mustCgroup("/kubepods.slice", "memory.high")
	d, err := waitFor("kubepods.slice memory.high armed", daemonReloadBound, func() (bool, string, error) {
		v := mustCgroup("/kubepods.slice", "memory.high")
		return v != "max", v, nil
	})
	if err != nil {
		t.Fatalf("%v: it was %s before the reload, %s right after", err, before, right)
	}
	t.Logf("memory.high %s before daemon-reload, %s right after, armed %s later (%s)", before, right,
		d.Round(time.Millisecond), mustCgroup("/kubepods.slice", "memory.high"))
}

// checkContainerCgroups checks that every container of pod uid runs in
// the cgroup want names for its id (/proc/<pid>/cgroup's v2 line).
func checkContainerCgroups(t *testing.T, uid string, want func(id string) string) {
	t.Helper()
	cs, err := podContainers(uid)
	if err != nil || len(cs) == 0 {
		t.Fatalf("the pod's containers: %v %v", cs, err)
	}
	for _, c := range cs {
		pid, err := containerPID(c.ID)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			t.Fatal(err)
		}
		cg, err := ProcCgroupV2(raw)
		if err != nil {
			t.Fatal(err)
		}
		if w := want(c.ID); cg != w {
			t.Errorf("container %s runs in %s, want %s", c.ID, cg, w)
		}
	}
}
