//go:build nodelane

package nodelane

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lab/nodevm"
)

// Bounds of the checks, each with why. Under TCG the node is 5-10 times
// slower than the hardware: a pod sandbox takes 2-7 s, the first one with
// CNI up to 15 s.
const (
	// targetBound: the lane unit starts after multi-user.target, so the
	// target is active at once unless the boot failed.
	targetBound = 60 * time.Second
	// readyBound is how soon after `systemctl start` the agent must send
	// READY=1 (sensing, the CRI connection and the API socket up).
	readyBound = 60 * time.Second
	// startCmdBound lets systemctl start run past readyBound, up to the
	// unit's default TimeoutStartSec (90 s), to show what happens.
	startCmdBound = 100 * time.Second
	// journalBound: a line nodeguard logs reaches the journal within it.
	journalBound = 30 * time.Second
	// podsBound: two pods, images present, under TCG.
	podsBound = 150 * time.Second
	// watchdogBound: WatchdogSec=30 of the shipped unit, SIGABRT and its
	// goroutine dump, RestartSec=2 and a new start.
	watchdogBound = 100 * time.Second
	// restartBound: RestartSec=2 and a new start after kill -9.
	restartBound = 60 * time.Second
	// adoptBound: the restarted agent lists every pod Running again.
	adoptBound = 90 * time.Second
	// settleBound: nodeguard.service active/running again after a reload,
	// restart or daemon-reload. A reload (Type=notify) lasts until the
	// agent has re-read its configuration and sent READY=1 again; on a
	// freshly booted CI machine the check after a reload found the unit
	// still reloading.
	settleBound = 60 * time.Second
	// adoptSettle is how long the adopted pods are watched for a
	// duplicate sandbox or a restart after they look adopted.
	adoptSettle = 10 * time.Second
	// evictBound: the hog reaches the threshold in ~10 s at 48 MiB/s,
	// after its pod started.
	evictBound = 120 * time.Second
	// deleteBound: every pod stopped and removed, under TCG.
	deleteBound = 90 * time.Second
	// leftoverBound: the last cgroups, mounts and leases go after the
	// pods.
	leftoverBound = 45 * time.Second
	// allocatable is node allocatable for the eviction check: the guest's
	// memory less systemReserved. Small enough that the hog crosses the
	// hard threshold in seconds, large enough for the other pods.
	allocatable = 640 << 20
)

// Pods of the checks, from testdata/.
var (
	staticPod  = podRef{Namespace: "default", Name: "static-sleeper", File: "testdata/static-sleeper.yaml", QOS: corev1.PodQOSBestEffort, Static: true}
	appliedPod = podRef{Namespace: "lane", Name: "applied-burstable", File: "testdata/applied-burstable.yaml", QOS: corev1.PodQOSBurstable}
	hogPod     = podRef{Namespace: "lane", Name: "hog", File: "testdata/hog.yaml", QOS: corev1.PodQOSBestEffort}
)

// podRef is one of the checks' pods.
type podRef struct {
	Namespace, Name, File string
	QOS                   corev1.PodQOSClass
	Static                bool
	UID                   string // known once it runs
}

func (p podRef) String() string { return p.Namespace + "/" + p.Name }

// node is what the checks know of the node: the installed configuration,
// the values written over it, the pods that run.
type node struct {
	installed []byte
	values    NodeValues
	current   []byte // the configuration file now
	pods      []*podRef
	// runtime is the run's containerd (nodevm.EnvContainerd, parsed): which
	// one the containerd check expects to find.
	runtime string
	// runtimeDriver is the cgroup driver containerd reported through CRI
	// RuntimeConfig in the containerd check; "" where it does not report
	// one (containerd 1.6). The checks that depend on the runtime's
	// behaviour go by it.
	runtimeDriver string
}

// TestNode checks nodeguard as a systemd service on a systemd node with
// pure cgroup v2 and containerd's systemd cgroup driver. The checks run in
// order, each on the node the previous ones left; one that needs what an
// earlier one failed to make fails at once and says so.
func TestNode(t *testing.T) {
	inLane(t)
	installed, err := os.ReadFile(ConfigPath)
	if err != nil {
		t.Fatalf("read the installed configuration: %v", err)
	}
	ctrd, err := nodevm.ParseContainerd(os.Getenv(nodevm.EnvContainerd))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{installed: installed, runtime: ctrd}
	t.Run("systemd reached multi-user.target", n.multiUser)
	t.Run("containerd is active and its CRI uses the systemd cgroup driver", n.containerd)
	t.Run("systemctl start nodeguard reaches active through READY", n.start)
	t.Run("the journal has nodeguard's lines with their priorities", n.priorities)
	t.Run("systemctl reload applies a changed eviction threshold", n.reload)
	t.Run("systemctl daemon-reload leaves the pod root's tripwire armed", n.daemonReload)
	t.Run("a manifest pod and an applied pod run", n.podsRun)
	t.Run("their containers are in cri-containerd scopes beneath the pod slices", n.podCgroups)
	t.Run("crictl sees the sandboxes and containers with the kubelet's labels", n.crictlLabels)
	t.Run("the watchdog kills and restarts a hung agent", n.watchdog)
	t.Run("after kill -9 systemd restarts the agent and it adopts every pod", n.adopt)
	t.Run("a runaway pod is evicted before the kernel OOM killer", n.evict)
	t.Run("deleting every pod leaves nothing behind", n.cleanup)
	t.Run("node mode: nodeguard joins a real control plane, runs a Deployment, serves logs and exec, evicts as the API sees it", n.nodeMode)
	t.Run("kubelet: the real kubelet registers its Node Ready and runs a Guaranteed, a Burstable and a BestEffort pod in its kubepods.slice cgroups, sandboxes labelled as it labels them", n.kubelet)
	t.Run("the three-way OOM race on the kubelet's node: the kubelet alone, with nodeguard guard beside it, and nodeguard in node mode, same pods and hogs", n.kubeRace)
	t.Run("nfs volumes from a server in a netns of the check: mounted, written, unmounted on deletion and after kill -9", n.nfs)
	t.Run("supplementalGroupsPolicy Strict on a runtime that reports the feature", n.strictGroups)
	t.Run("an image volume: read from and read-only on containerd 2.x, unmounted on deletion; refused on 1.6", n.imageVolume)
	t.Run("appArmorProfile Localhost, RuntimeDefault and Unconfined confine containers as the kernel reports", n.appArmor)
	t.Run("the pods people write run on the node: lifecycle hooks, sidecars, gRPC probes, block volumes, exec, attach and port-forward", n.workloads)
	t.Run("with cgroupDriver unset nodeguard takes the driver containerd reports", n.driverFromRuntime)
	t.Run("a cgroupDriver other than containerd's is refused, saying which to set", n.driverMismatch)
	t.Run("with containerd's cgroupfs driver, nodeguard's cgroupfs driver runs the pods in /kubepods", n.cgroupfsDriver)
	t.Run("the OOM race on containerd's systemd driver: nodeguard loses no trial to the kernel OOM killer", n.race)
}

// writeConfig writes the installed configuration with v over it.
func (n *node) writeConfig(v NodeValues) error {
	b, err := NodeConfig(n.installed, v)
	if err != nil {
		return err
	}
	if err := os.WriteFile(ConfigPath, b, 0o600); err != nil {
		return err
	}
	n.values, n.current = v, b
	return nil
}

// agent returns the unit's state, sub-state and main pid.
func agent() (active, sub string, pid int, err error) {
	p, err := unitProps("nodeguard", "ActiveState", "SubState", "MainPID")
	if err != nil {
		return "", "", 0, err
	}
	pid, _ = strconv.Atoi(p["MainPID"])
	return p["ActiveState"], p["SubState"], pid, nil
}

// requireAgent fails t unless nodeguard is active and running, waiting up
// to settleBound while the unit is in a transition (see settledAgent).
func requireAgent(t *testing.T) int {
	t.Helper()
	active, sub, pid, waited, err := settledAgent(settleBound)
	if err != nil || active != "active" || sub != "running" || pid == 0 {
		props, _ := unitProps("nodeguard.service", "Result", "ExecMainCode", "ExecMainStatus", "NRestarts")
		t.Fatalf("precondition: nodeguard.service is not running (%s/%s after %s, main pid %d, %v; %v); see the start check. Last journal lines:\n%s\nkernel:\n%s",
			active, sub, waited.Round(time.Millisecond), pid, err, props, journalText("nodeguard", 40), kernelTail(20))
	}
	return pid
}

// settledAgent polls the unit's state until it is active/running with a
// main pid, or settled elsewhere (inactive or failed: nothing will start
// it), or bound has passed; it returns the last state seen and how long
// it waited. Any other state is a transition systemd is still making:
// reloading, activating (a start or an auto-restart), deactivating.
func settledAgent(bound time.Duration) (active, sub string, pid int, waited time.Duration, err error) {
	start := time.Now()
	for {
		active, sub, pid, err = agent()
		waited = time.Since(start)
		switch {
		case err == nil && active == "active" && sub == "running" && pid != 0:
			return active, sub, pid, waited, nil
		case err == nil && (active == "inactive" || active == "failed"):
			return active, sub, pid, waited, nil
		case waited >= bound:
			return active, sub, pid, waited, err
		}
		time.Sleep(poll)
	}
}

// requirePods fails t at once unless the start check's pods run.
func (n *node) requirePods(t *testing.T) {
	t.Helper()
	if len(n.pods) < 2 {
		t.Fatalf("precondition: the pods of the pods check do not run (%d of 2 known); see that check", len(n.pods))
	}
}

func (n *node) multiUser(t *testing.T) {
	d, err := waitFor("multi-user.target active", targetBound, func() (bool, string, error) {
		p, err := unitProps("multi-user.target", "ActiveState")
		if err != nil {
			return false, "", err
		}
		return p["ActiveState"] == "active", p["ActiveState"], nil
	})
	if err != nil {
		failed, _ := systemctl(cmdTimeout, "--failed", "--no-legend", "--plain")
		t.Fatalf("%v; failed units: %s", err, failed)
	}
	state, _ := systemctl(cmdTimeout, "is-system-running")
	analyze, _ := run(cmdTimeout, "systemd-analyze")
	t.Logf("multi-user.target active (waited %s); system %s; %s", d.Round(time.Millisecond), strings.TrimSpace(state), firstLine(analyze))
	if s := strings.TrimSpace(state); s != "running" {
		failed, _ := systemctl(cmdTimeout, "--failed", "--no-legend", "--plain")
		t.Logf("failed units (the node is %s): %s", s, failed)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

func (n *node) containerd(t *testing.T) {
	p, err := unitProps("containerd", "ActiveState", "SubState", "MainPID", "ControlGroup")
	if err != nil {
		t.Fatal(err)
	}
	if p["ActiveState"] != "active" || p["SubState"] != "running" {
		t.Fatalf("containerd.service is %s/%s; journal:\n%s", p["ActiveState"], p["SubState"], journalText("containerd", 30))
	}
	ver, err := criVersion()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Readlink("/proc/" + p["MainPID"] + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	// The runtime is the one this run asked for (nodevm.EnvContainerd).
	switch n.runtime {
	case nodevm.ContainerdV2:
		if ver.RuntimeVersion != nodevm.ContainerdV2 {
			t.Errorf("the CRI reports %s %s, want the payload's containerd %s", ver.RuntimeName, ver.RuntimeVersion, nodevm.ContainerdV2)
		}
		if want := nodevm.ContainerdBinDir + "/containerd"; exe != want {
			t.Errorf("containerd.service runs %s, want the payload's %s (the unit's drop-in)", exe, want)
		}
	default:
		pkg, err := run(cmdTimeout, "dpkg-query", "-W", "-f=${Version}", "containerd")
		if err != nil || !strings.HasPrefix(strings.TrimSpace(pkg), strings.TrimPrefix(ver.RuntimeVersion, "v")) {
			t.Errorf("the CRI reports %s %s, not the root filesystem's package containerd %s (%v)", ver.RuntimeName, ver.RuntimeVersion, strings.TrimSpace(pkg), err)
		}
		if exe != "/usr/bin/containerd" {
			t.Errorf("containerd.service runs %s, want Debian's /usr/bin/containerd", exe)
		}
	}
	// The driver as the runtime reports it (CRI RuntimeConfig), where it
	// does: containerd 2.x must; 1.6 answers Unimplemented.
	reported := "not reported"
	switch driver, err := runtimeDriver(); {
	case errors.Is(err, ErrNotReported):
		reported = "not reported (" + err.Error() + ")"
		if n.runtime == nodevm.ContainerdV2 {
			t.Errorf("containerd %s does not report its cgroup driver: %v", ver.RuntimeVersion, err)
		}
	case err != nil:
		t.Error(err)
	case driver != CgroupDriver:
		t.Errorf("CRI RuntimeConfig reports the %s cgroup driver, want %s (SystemdCgroup = true)", driver, CgroupDriver)
	default:
		n.runtimeDriver, reported = driver, driver
	}
	info, err := crictl("info")
	if err != nil {
		t.Fatal(err)
	}
	systemd, runtime, ok, err := RuncSystemdCgroup(info)
	switch {
	case err != nil:
		t.Fatal(err)
	case !ok:
		t.Errorf("crictl info does not show the %q runtime's options.SystemdCgroup:\n%s", runtime, tail(string(info), 40))
	case !systemd:
		t.Errorf("the CRI's default runtime %q has SystemdCgroup false: containers would get cgroupfs paths", runtime)
	}
	out, err := crictl("images", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	sandbox, from, err := SandboxImage(info, out)
	if err != nil || sandbox != images.PauseName {
		t.Errorf("sandbox image %q (%v), want the local pause image %s", sandbox, err, images.PauseName)
	}
	for _, name := range []string{images.PauseName, images.BusyboxName, images.HogName} {
		if !strings.Contains(string(out), `"`+name+`"`) {
			t.Errorf("image %s is not imported (crictl images)", name)
		}
	}
	saveOutput(t, "containerd-"+n.runtime, map[string][]byte{"crictl-info.json": info, "crictl-images.json": out})
	t.Logf("%s %s (%s) %s in %s; CRI RuntimeConfig cgroup driver: %s; CRI runtime %s with SystemdCgroup=%v; sandbox image %s (%s)",
		ver.RuntimeName, ver.RuntimeVersion, exe, p["SubState"], p["ControlGroup"], reported, runtime, systemd, sandbox, from)
}

// saveOutput writes files into dir on the output disk (nodevm.EnvOutDir),
// for the host to keep (fixtures of a new runtime's output); a failure is
// logged, not a check's failure.
func saveOutput(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	root := os.Getenv(nodevm.EnvOutDir)
	if root == "" {
		t.Logf("%s is not set: %s/ is not kept", nodevm.EnvOutDir, dir)
		return
	}
	d := filepath.Join(root, dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Logf("keep %s: %v", d, err)
		return
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			t.Logf("keep %s: %v", name, err)
		}
	}
}

// reservedFor returns systemReserved's memory that leaves node allocatable
// at want bytes, in Mi.
func reservedFor(want int64) (string, error) {
	total, err := meminfo("MemTotal")
	if err != nil {
		return "", err
	}
	r := (total - want) >> 20
	if r <= 0 {
		return "", fmt.Errorf("the guest has %d MiB, less than the %d MiB allocatable the checks need", total>>20, want>>20)
	}
	return strconv.FormatInt(r, 10) + "Mi", nil
}

func (n *node) start(t *testing.T) {
	reserved, err := reservedFor(allocatable)
	if err != nil {
		t.Fatal(err)
	}
	v := Node()
	v.SystemReservedMemory = reserved
	if err := n.writeConfig(v); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(ManifestDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(staticPod.File)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ManifestDir, filepath.Base(staticPod.File)), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("node configuration written: %s over the installed file, systemReserved memory %s (allocatable %d MiB); static pod %s in %s",
		"runtimeEndpoint, cgroupDriver, cgroupRoot, podManifestPath", reserved, allocatable>>20, staticPod, ManifestDir)

	cursor, err := journalCursor()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	out, startErr := systemctl(startCmdBound, "start", "nodeguard")
	took := time.Since(t0)
	p, err := unitProps("nodeguard", "ActiveState", "SubState", "Type", "NotifyAccess", "MainPID", "StatusText", "Result", "ExecMainStatus", "WatchdogUSec")
	if err != nil {
		t.Fatal(err)
	}
	if startErr != nil || p["ActiveState"] != "active" {
		t.Fatalf("systemctl start nodeguard after %s: %v %s; unit %s/%s result %s exit status %s; journal:\n%s",
			took.Round(time.Millisecond), startErr, out, p["ActiveState"], p["SubState"], p["Result"], p["ExecMainStatus"], journalText("nodeguard", 40))
	}
	if p["Type"] != "notify" {
		t.Errorf("unit Type=%s: active does not mean READY=1", p["Type"])
	}
	if took > readyBound {
		t.Errorf("READY=1 came %s after systemctl start, later than %s", took.Round(time.Millisecond), readyBound)
	}
	if p["StatusText"] == "" {
		t.Errorf("no STATUS= from the agent (StatusText empty)")
	}
	t.Logf("active (READY=1 through sd_notify, Type=%s NotifyAccess=%s) %s after systemctl start; main pid %s; watchdog %s; status %q",
		p["Type"], p["NotifyAccess"], took.Round(time.Millisecond), p["MainPID"], p["WatchdogUSec"], p["StatusText"])

	// What the agent read of the runtime's cgroup driver before READY:
	// the driver CRI RuntimeConfig reported (the containerd check read it
	// with crictl), or that the runtime reports none.
	what, match := "the agent's line that the runtime does not report its cgroup driver", func(m string) bool {
		return strings.Contains(m, "does not report its cgroup driver")
	}
	if d := n.runtimeDriver; d != "" {
		what, match = "the agent's line that its cgroup driver matches the runtime's "+d, func(m string) bool {
			return strings.Contains(m, "cgroup driver matches the runtime's") && strings.Contains(m, "cgroup_driver="+d)
		}
	}
	e, err := waitJournal(cursor, journalBound, what, func(e JournalEntry) bool { return e["_PID"] != "1" && match(e["MESSAGE"]) })
	if err != nil {
		t.Errorf("%v", err)
	} else {
		t.Logf("at start: %q", e["MESSAGE"])
	}
}

// agentEntries returns the journal entries that nodeguard's own processes
// wrote (not systemd's messages about the unit).
func agentEntries(es []JournalEntry) []JournalEntry {
	var out []JournalEntry
	for _, e := range es {
		if e["_PID"] != "1" && (e["_COMM"] == "nodeguard" || e["SYSLOG_IDENTIFIER"] == "nodeguard") {
			out = append(out, e)
		}
	}
	return out
}

// waitJournal waits for an entry of the agent after cursor that match
// accepts, and returns it.
func waitJournal(cursor string, bound time.Duration, what string, match func(JournalEntry) bool) (JournalEntry, error) {
	var found JournalEntry
	_, err := waitFor(what, bound, func() (bool, string, error) {
		es, err := journal("nodeguard", cursor)
		if err != nil {
			return false, "", err
		}
		for _, e := range es {
			if match(e) {
				found = e
				return true, "", nil
			}
		}
		var last []string
		for _, e := range es[max(0, len(es)-8):] {
			last = append(last, e["PRIORITY"]+" "+e["MESSAGE"])
		}
		return false, fmt.Sprintf("%d entries after the cursor, the last: %s", len(es), strings.Join(last, " | ")), nil
	})
	return found, err
}

func (n *node) priorities(t *testing.T) {
	requireAgent(t)
	es, err := journal("nodeguard", "")
	if err != nil {
		t.Fatal(err)
	}
	own := agentEntries(es)
	if len(own) == 0 {
		t.Fatalf("no journal entry from nodeguard's process among %d entries of the unit", len(es))
	}
	for _, e := range own {
		if e["PRIORITY"] == "" {
			t.Errorf("entry without PRIORITY: %q", e["MESSAGE"])
		}
		if m := e["MESSAGE"]; len(m) > 2 && m[0] == '<' && m[2] == '>' {
			t.Errorf("syslog prefix left in the message (journald did not parse it): %q", m)
		}
	}
	var info JournalEntry
	for _, e := range own {
		if strings.Contains(e["MESSAGE"], "nodeguard running") {
			info = e
		}
	}
	switch {
	case info == nil:
		t.Errorf("no \"nodeguard running\" line among %d entries of nodeguard", len(own))
	case info["PRIORITY"] != "6":
		t.Errorf("\"nodeguard running\" (info) has PRIORITY %q, want 6: %q", info["PRIORITY"], info["MESSAGE"])
	}

	// A warning on demand: a reload with a change that needs a restart
	// (eviction.tick) is logged at warn, and changes nothing running.
	cursor, err := journalCursor()
	if err != nil {
		t.Fatal(err)
	}
	base := n.values
	v := base
	v.Set = append(slices.Clone(base.Set), Setting{Path: []string{"eviction", "tick"}, Value: "2s"})
	if err := n.writeConfig(v); err != nil {
		t.Fatal(err)
	}
	if out, err := systemctl(cmdTimeout, "reload", "nodeguard"); err != nil {
		t.Fatalf("systemctl reload: %v %s", err, out)
	}
	warn, err := waitJournal(cursor, journalBound, "a warning about a change that needs a restart", func(e JournalEntry) bool {
		return e["_PID"] != "1" && strings.Contains(e["MESSAGE"], "restart")
	})
	if err != nil {
		t.Errorf("%v", err)
	} else if warn["PRIORITY"] != "4" {
		t.Errorf("the warning has PRIORITY %q, want 4: %q", warn["PRIORITY"], warn["MESSAGE"])
	}
	// Back to the node's values: the reload check starts from them.
	if err := n.writeConfig(base); err != nil {
		t.Fatal(err)
	}
	cursor, _ = journalCursor()
	if out, err := systemctl(cmdTimeout, "reload", "nodeguard"); err != nil {
		t.Fatalf("systemctl reload: %v %s", err, out)
	}
	if _, err := waitJournal(cursor, journalBound, "the reload back to the node's values", func(e JournalEntry) bool {
		return e["_PID"] != "1" && strings.Contains(e["MESSAGE"], "reload")
	}); err != nil {
		t.Errorf("%v", err)
	}
	if info != nil && warn != nil {
		t.Logf("%d entries of nodeguard, all with PRIORITY; info=%s %q; warn=%s %q", len(own), info["PRIORITY"], info["MESSAGE"], warn["PRIORITY"], warn["MESSAGE"])
	}
}

// evictionHardWith returns the installed evictionHard with signal set to
// value.
func (n *node) evictionHardWith(signal, value string) (map[string]any, error) {
	cur, ok, err := Lookup(n.installed, "eviction", "evictionHard")
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if ok {
		mm, isMap := cur.(map[string]any)
		if !isMap {
			return nil, fmt.Errorf("installed eviction.evictionHard is %T", cur)
		}
		maps.Copy(m, mm)
	}
	m[signal] = value
	return m, nil
}

// reloadedHard is the threshold the reload check sets and the eviction
// check then runs with (the installed one is 100Mi).
const reloadedHard = "150Mi"

func (n *node) reload(t *testing.T) {
	pid := requireAgent(t)
	hard, err := n.evictionHardWith("memory.available", reloadedHard)
	if err != nil {
		t.Fatal(err)
	}
	v := n.values
	v.Set = append(slices.Clone(v.Set), Setting{Path: []string{"eviction", "evictionHard"}, Value: hard})
	if err := n.writeConfig(v); err != nil {
		t.Fatal(err)
	}
	cursor, err := journalCursor()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := systemctl(cmdTimeout, "reload", "nodeguard"); err != nil {
		t.Fatalf("systemctl reload: %v %s", err, out)
	}
	e, err := waitJournal(cursor, journalBound, "the new threshold applied", func(e JournalEntry) bool {
		m := e["MESSAGE"]
		return e["_PID"] != "1" && strings.Contains(m, "thresholds reloaded") && strings.Contains(m, "memory.available") && strings.Contains(m, reloadedHard)
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 15))
	}
	if after := requireAgent(t); after != pid {
		t.Errorf("the reload restarted the agent: main pid %d, was %d", after, pid)
	}
	t.Logf("applied without a restart: %q", e["MESSAGE"])
}

func (n *node) podsRun(t *testing.T) {
	requireAgent(t)
	if out, err := applyPods(appliedPod.File); err != nil {
		t.Fatalf("nodeguard pod apply -f %s: %v %s", appliedPod.File, err, out)
	}
	want := []podRef{staticPod, appliedPod}
	var l *corev1.PodList
	t0 := time.Now()
	d, err := waitFor("both pods Running with their containers ready", podsBound, func() (bool, string, error) {
		var err error
		if l, err = listPods(); err != nil {
			return false, err.Error(), nil // the API may be busy: keep asking
		}
		for _, w := range want {
			p := findPod(l, w.Namespace, w.Name)
			if p == nil || p.Status.Phase != corev1.PodRunning || !allReady(p) {
				return false, describePods(l), nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		crictlPods, _ := crictl("pods")
		t.Fatalf("%v\ncrictl pods:\n%s\njournal:\n%s", err, crictlPods, journalText("nodeguard", 30))
	}
	n.pods = nil
	for _, w := range want {
		p := findPod(l, w.Namespace, w.Name)
		ref := w
		ref.UID = string(p.UID)
		if p.Status.QOSClass != "" && p.Status.QOSClass != w.QOS {
			t.Errorf("%s: status.qosClass %s, want %s", w, p.Status.QOSClass, w.QOS)
		}
		n.pods = append(n.pods, &ref)
	}
	t.Logf("%s and %s Running %s after the apply (waited %s); uids %s, %s; IP leases in %s: %q", staticPod, appliedPod,
		time.Since(t0).Round(time.Millisecond), d.Round(time.Millisecond), n.pods[0].UID, n.pods[1].UID, n.ipamDir(), leases(n.ipamDir()))
}

func allReady(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) != len(p.Spec.Containers) {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return true
}

// podContainers returns the running containers containerd has for a pod.
func podContainers(uid string) ([]CRIContainer, error) {
	cs, err := criContainers()
	if err != nil {
		return nil, err
	}
	var out []CRIContainer
	for _, c := range cs {
		if c.Labels[LabelPodUID] == uid && c.State == "CONTAINER_RUNNING" {
			out = append(out, c)
		}
	}
	return out, nil
}

func (n *node) podCgroups(t *testing.T) {
	requireAgent(t)
	n.requirePods(t)
	for _, p := range n.pods {
		cs, err := podContainers(p.UID)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			t.Errorf("%s: containerd has no running container with %s=%s", p, LabelPodUID, p.UID)
			continue
		}
		for _, c := range cs {
			pid, err := containerPID(c.ID)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			got, err := ProcCgroupV2(b)
			if err != nil {
				t.Errorf("%s: %v", p, err)
				continue
			}
			want, err := ContainerScope(p.QOS, p.UID, c.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s container %s (pid %d) is in %s, want %s", p, c.Metadata.Name, pid, got, want)
				continue
			}
			scope := filepath.Base(want)
			u, err := unitProps(scope, "ActiveState", "Slice")
			if err != nil || u["ActiveState"] != "active" || u["Slice"] != filepath.Base(filepath.Dir(want)) {
				t.Errorf("%s: systemd does not run %s in %s: %v %v", p, scope, filepath.Base(filepath.Dir(want)), u, err)
			}
			t.Logf("%s container %s pid %d in %s", p, c.Metadata.Name, pid, got)
		}
	}
}

func (n *node) crictlLabels(t *testing.T) {
	requireAgent(t)
	n.requirePods(t)
	sbs, err := criPods()
	if err != nil {
		t.Fatal(err)
	}
	cs, err := criContainers()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range n.pods {
		var ready []CRISandbox
		for _, s := range sbs {
			if s.Labels[LabelPodUID] == p.UID && s.State == "SANDBOX_READY" {
				ready = append(ready, s)
			}
		}
		if len(ready) != 1 {
			t.Errorf("%s: %d ready sandboxes labelled %s=%s, want 1", p, len(ready), LabelPodUID, p.UID)
			continue
		}
		s := ready[0]
		if s.Labels[LabelPodName] != p.Name || s.Labels[LabelPodNamespace] != p.Namespace {
			t.Errorf("%s: sandbox %s labels %v", p, s.ID, s.Labels)
		}
		if s.Metadata.Name != p.Name || s.Metadata.Namespace != p.Namespace || s.Metadata.UID != p.UID {
			t.Errorf("%s: sandbox %s metadata %+v", p, s.ID, s.Metadata)
		}
		var names []string
		for _, c := range cs {
			if c.PodSandboxID != s.ID {
				continue
			}
			names = append(names, c.Labels[LabelContainerName])
			if c.Labels[LabelContainerName] != c.Metadata.Name || c.Labels[LabelPodUID] != p.UID ||
				c.Labels[LabelPodName] != p.Name || c.Labels[LabelPodNamespace] != p.Namespace {
				t.Errorf("%s: container %s (%s) labels %v", p, c.ID, c.Metadata.Name, c.Labels)
			}
		}
		if !slices.Contains(names, "sleep") {
			t.Errorf("%s: crictl ps shows containers %q in sandbox %s, want sleep", p, names, s.ID)
		}
		t.Logf("%s: sandbox %.12s labels %s=%s %s=%s %s=%s; containers %q", p, s.ID, LabelPodName, s.Labels[LabelPodName],
			LabelPodNamespace, s.Labels[LabelPodNamespace], LabelPodUID, s.Labels[LabelPodUID], names)
	}
}

func (n *node) watchdog(t *testing.T) {
	pid := requireAgent(t)
	before, _ := unitProps("nodeguard", "NRestarts", "WatchdogUSec")
	cursor, err := journalCursor()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	// Never leave the agent stopped for the next checks.
	defer func() {
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(st), ") T ") {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	var newPID int
	d, err := waitFor("a new agent after the watchdog fired", watchdogBound, func() (bool, string, error) {
		active, sub, p, err := agent()
		if err != nil {
			return false, "", err
		}
		newPID = p
		return p != pid && p != 0 && active == "active" && sub == "running", fmt.Sprintf("%s/%s main pid %d", active, sub, p), nil
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
	}
	var timeout, exit string
	var systemd []string
	// journald may still be taking in the old agent's goroutine dump:
	// systemd's lines about the unit can come after the new agent runs.
	_, _ = waitFor("systemd's watchdog line in the journal", journalBound, func() (bool, string, error) {
		es, err := journal("nodeguard", cursor)
		if err != nil {
			return false, "", err
		}
		timeout, exit, systemd = "", "", nil
		for _, e := range es {
			if e["_PID"] != "1" {
				continue
			}
			m := e["MESSAGE"]
			systemd = append(systemd, m)
			if strings.Contains(m, "Watchdog timeout") {
				timeout = m
			}
			if strings.Contains(m, "Main process exited") && exit == "" {
				exit = m
			}
		}
		return timeout != "", strings.Join(systemd, " | "), nil
	})
	if timeout == "" {
		// Not among the unit's lines: look at all of PID 1's and at the
		// kernel log (where systemd logs when journald does not take
		// its lines), to tell a lost line from a restart for another
		// reason.
		elsewhere := "nowhere else either"
		if out, err := stdout(cmdTimeout, "journalctl", "_PID=1", "--after-cursor", cursor, "-o", "cat", "--no-pager"); err == nil && strings.Contains(string(out), "nodeguard.service: Watchdog timeout") {
			elsewhere = "but among PID 1's lines without the unit's fields"
		} else if k, err := run(cmdTimeout, "dmesg"); err == nil && strings.Contains(k, "nodeguard.service: Watchdog timeout") {
			elsewhere = "but in the kernel log"
		}
		t.Errorf("no \"Watchdog timeout\" among systemd's lines about the unit after the SIGSTOP (%s); systemd said: %s; the agent's last lines:\n%s",
			elsewhere, strings.Join(systemd, " | "), journalText("nodeguard", 15))
	}
	// The watchdog fires WatchdogSec after the last WATCHDOG=1, which the
	// agent sends every WatchdogSec/4: at 22.5 to 30 s after the SIGSTOP.
	if d < 20*time.Second {
		t.Errorf("restarted %s after the SIGSTOP, before the watchdog could have fired (WatchdogSec=30, pings every 7.5 s)", d.Round(time.Millisecond))
	}
	after, _ := unitProps("nodeguard", "NRestarts")
	nb, _ := strconv.Atoi(before["NRestarts"])
	na, _ := strconv.Atoi(after["NRestarts"])
	if na != nb+1 {
		t.Errorf("NRestarts %d, was %d: want one restart", na, nb)
	}
	t.Logf("SIGSTOP of %d: %q; %q; new agent %d running %s after the SIGSTOP (%s since)", pid, timeout, exit, newPID,
		d.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}

// podState is what adoption must keep of a pod.
type podState struct {
	sandboxes  []string // ready sandbox ids
	containers []string // running container ids
	memoryMax  string   // the pod slice's memory.max
	unitMax    string   // and its unit's MemoryMax, as systemd has it
}

// snapshot records every pod's state.
func (n *node) snapshot() (map[string]podState, error) {
	sbs, err := criPods()
	if err != nil {
		return nil, err
	}
	cs, err := criContainers()
	if err != nil {
		return nil, err
	}
	out := map[string]podState{}
	for _, p := range n.pods {
		var s podState
		for _, sb := range sbs {
			if sb.Labels[LabelPodUID] == p.UID && sb.State == "SANDBOX_READY" {
				s.sandboxes = append(s.sandboxes, sb.ID)
			}
		}
		for _, c := range cs {
			if c.Labels[LabelPodUID] == p.UID && c.State == "CONTAINER_RUNNING" {
				s.containers = append(s.containers, c.ID)
			}
		}
		slices.Sort(s.sandboxes)
		slices.Sort(s.containers)
		slice, err := PodSlice(p.QOS, p.UID)
		if err != nil {
			return nil, err
		}
		if s.memoryMax, err = cgroupFile(slice, "memory.max"); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		u, err := unitProps(filepath.Base(slice), "MemoryMax")
		if err != nil {
			return nil, err
		}
		s.unitMax = u["MemoryMax"]
		out[p.UID] = s
	}
	return out, nil
}

func (n *node) adopt(t *testing.T) {
	pid := requireAgent(t)
	n.requirePods(t)
	before, err := n.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	kmax, err1 := cgroupFile("/kubepods.slice", "memory.max")
	khigh, err2 := cgroupFile("/kubepods.slice", "memory.high")
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("kubepods.slice: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	t0 := time.Now()
	d, err := waitFor("systemd to restart the agent", restartBound, func() (bool, string, error) {
		active, sub, p, err := agent()
		if err != nil {
			return false, "", err
		}
		return p != pid && p != 0 && active == "active" && sub == "running", fmt.Sprintf("%s/%s main pid %d", active, sub, p), nil
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
	}
	var l *corev1.PodList
	if _, err := waitFor("every pod Running again", adoptBound, func() (bool, string, error) {
		var err error
		if l, err = listPods(); err != nil {
			return false, err.Error(), nil
		}
		for _, p := range n.pods {
			q := findPod(l, p.Namespace, p.Name)
			if q == nil || string(q.UID) != p.UID || q.Status.Phase != corev1.PodRunning || !allReady(q) {
				return false, describePods(l), nil
			}
		}
		return true, "", nil
	}); err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
	}
	if len(l.Items) != len(n.pods) {
		t.Errorf("%d pods after the restart, want %d: %s", len(l.Items), len(n.pods), describePods(l))
	}
	time.Sleep(adoptSettle) // a duplicate sandbox or a restarted container shows by now
	after, err := n.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range n.pods {
		b, a := before[p.UID], after[p.UID]
		if !slices.Equal(a.sandboxes, b.sandboxes) {
			t.Errorf("%s: ready sandboxes %q after the restart, were %q", p, a.sandboxes, b.sandboxes)
		}
		if !slices.Equal(a.containers, b.containers) {
			t.Errorf("%s: running containers %q after the restart, were %q", p, a.containers, b.containers)
		}
		if a.memoryMax != b.memoryMax || a.unitMax != b.unitMax {
			t.Errorf("%s: pod slice memory.max %s (unit MemoryMax=%s) after the restart, was %s (%s)", p, a.memoryMax, a.unitMax, b.memoryMax, b.unitMax)
		}
	}
	if sbs, err := criPods(); err == nil && len(sbs) != len(n.pods) {
		t.Errorf("containerd has %d sandboxes, want %d (one per pod, no duplicates)", len(sbs), len(n.pods))
	}
	kmax2, _ := cgroupFile("/kubepods.slice", "memory.max")
	khigh2, _ := cgroupFile("/kubepods.slice", "memory.high")
	if kmax2 != kmax || khigh2 != khigh {
		t.Errorf("kubepods.slice memory.max %s memory.high %s after the restart, were %s and %s", kmax2, khigh2, kmax, khigh)
	}
	var maxes []string
	for _, p := range n.pods {
		maxes = append(maxes, fmt.Sprintf("%s memory.max %s (MemoryMax=%s)", p, after[p.UID].memoryMax, after[p.UID].unitMax))
	}
	t.Logf("restarted by systemd %s after kill -9 of %d; %d pods adopted %s after it, same sandboxes and containers; %s; kubepods.slice memory.max %s memory.high %s",
		d.Round(time.Millisecond), pid, len(n.pods), time.Since(t0).Round(time.Millisecond), strings.Join(maxes, ", "), kmax, khigh)
}

func (n *node) evict(t *testing.T) {
	requireAgent(t)
	n.requirePods(t)
	before, err := n.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	restarts := map[string]int32{}
	if l, err := listPods(); err == nil {
		for _, p := range l.Items {
			for _, c := range p.Status.ContainerStatuses {
				restarts[string(p.UID)+"/"+c.Name] = c.RestartCount
			}
		}
	}
	eventsBefore, err := kubepodsEvents()
	if err != nil {
		t.Fatal(err)
	}
	mark := fmt.Sprintf("eviction check %d", time.Now().UnixNano())
	if err := kmsgMark(mark); err != nil {
		t.Fatal(err)
	}
	cursor, _ := journalCursor()
	if out, err := applyPods(hogPod.File); err != nil {
		t.Fatalf("nodeguard pod apply -f %s: %v %s", hogPod.File, err, out)
	}
	t0 := time.Now()
	var peak string
	var hog *corev1.Pod
	_, err = waitFor("the hog evicted", evictBound, func() (bool, string, error) {
		if p, err := cgroupFile("/kubepods.slice", "memory.peak"); err == nil {
			peak = p
		}
		if ev, err := kubepodsEvents(); err == nil && ev["oom_kill"] > eventsBefore["oom_kill"] {
			return false, "", fmt.Errorf("the kernel OOM killer fired in kubepods.slice first (memory.events %v, was %v)", ev, eventsBefore)
		}
		l, err := listPods()
		if err != nil {
			return false, err.Error(), nil
		}
		hog = findPod(l, hogPod.Namespace, hogPod.Name)
		if hog == nil {
			return false, describePods(l), nil
		}
		for _, c := range hog.Status.ContainerStatuses {
			if x := c.State.Terminated; x != nil && x.Reason == "OOMKilled" {
				return false, "", fmt.Errorf("the hog was OOM-killed by the kernel, not evicted: %s", describePods(l))
			}
		}
		return hog.Status.Phase == corev1.PodFailed && hog.Status.Reason == "Evicted", describePods(l), nil
	})
	took := time.Since(t0)
	if err != nil {
		t.Errorf("%v; journal:\n%s", err, journalText("nodeguard", 25))
	}
	evicted := err == nil
	eventsAfter, err := kubepodsEvents()
	if err != nil {
		t.Fatal(err)
	}
	if eventsAfter["oom_kill"] != eventsBefore["oom_kill"] {
		t.Errorf("kubepods.slice memory.events oom_kill %d, was %d", eventsAfter["oom_kill"], eventsBefore["oom_kill"])
	}
	klog, err := kernelLogSince(mark)
	if err != nil {
		t.Error(err)
	} else if lines := KernelOOMLines(klog); len(lines) > 0 {
		t.Errorf("the kernel log reports an OOM kill: %s", strings.Join(lines, " | "))
	}
	after, err := n.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	l, err := listPods()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range n.pods {
		q := findPod(l, p.Namespace, p.Name)
		if q == nil || q.Status.Phase != corev1.PodRunning {
			t.Errorf("%s was touched: %s", p, describePods(l))
			continue
		}
		if !slices.Equal(after[p.UID].sandboxes, before[p.UID].sandboxes) || !slices.Equal(after[p.UID].containers, before[p.UID].containers) {
			t.Errorf("%s was touched: sandboxes %q containers %q, were %q %q", p, after[p.UID].sandboxes, after[p.UID].containers,
				before[p.UID].sandboxes, before[p.UID].containers)
		}
		for _, c := range q.Status.ContainerStatuses {
			if r := restarts[p.UID+"/"+c.Name]; c.RestartCount != r {
				t.Errorf("%s container %s restarted: %d restarts, were %d", p, c.Name, c.RestartCount, r)
			}
		}
	}
	var decision string
	if es, err := journal("nodeguard", cursor); err == nil {
		for _, e := range agentEntries(es) {
			if strings.Contains(e["MESSAGE"], "evict") && strings.Contains(e["MESSAGE"], "hog") && decision == "" {
				decision = e["MESSAGE"]
			}
		}
	}
	if evicted {
		t.Logf("hog evicted %s after its apply (message %q); kubepods.slice memory.peak %s of memory.max %s; memory.events %v; decision: %s",
			took.Round(time.Millisecond), hog.Status.Message, peak, mustCgroup("/kubepods.slice", "memory.max"), eventsAfter, decision)
	}
}

// kubepodsEvents reads kubepods.slice's memory.events (hierarchical: every
// pod's OOM kills count).
func kubepodsEvents() (map[string]int64, error) {
	s, err := cgroupFile("/kubepods.slice", "memory.events")
	if err != nil {
		return nil, err
	}
	return ParseFlatKeyed([]byte(s))
}

func mustCgroup(cg, file string) string {
	s, err := cgroupFile(cg, file)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return s
}

func (n *node) cleanup(t *testing.T) {
	requireAgent(t)
	rootDir, ipamDir := n.rootDir(), n.ipamDir()
	l, err := listPods()
	if err != nil {
		t.Fatal(err)
	}
	var uids []string
	for _, p := range l.Items {
		uids = append(uids, string(p.UID))
		if p.Namespace == staticPod.Namespace && p.Name == staticPod.Name {
			if err := os.Remove(filepath.Join(ManifestDir, filepath.Base(staticPod.File))); err != nil {
				t.Error(err)
			}
			continue
		}
		if out, err := nodeguard(cmdTimeout, "pod", "rm", "-n", p.Namespace, p.Name); err != nil {
			t.Errorf("nodeguard pod rm %s/%s: %v %s", p.Namespace, p.Name, err, out)
		}
	}
	t0 := time.Now()
	if _, err := waitFor("no pod left", deleteBound, func() (bool, string, error) {
		l, err := listPods()
		if err != nil {
			return false, err.Error(), nil
		}
		return len(l.Items) == 0, describePods(l), nil
	}); err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 25))
	}
	gone := time.Since(t0)
	leftovers := func() map[string][]string {
		return map[string][]string{
			"no pod slice":                 podSlices(),
			"no cri-containerd scope":      scopes(),
			"no pod cgroup directory":      podCgroupDirs(uids),
			"no pod volume mount":          podMounts(rootDir),
			"no veth":                      veths(),
			"no IP lease in the IPAM dir":  leases(ipamDir),
			"no sandbox or container left": criLeft(),
		}
	}
	var last map[string][]string
	d, _ := waitFor("nothing left", leftoverBound, func() (bool, string, error) {
		last = leftovers()
		for _, v := range last {
			if len(v) > 0 {
				return false, fmt.Sprint(last), nil
			}
		}
		return true, "", nil
	})
	for _, name := range slices.Sorted(maps.Keys(last)) {
		t.Run(name, func(t *testing.T) {
			if left := last[name]; len(left) > 0 {
				t.Errorf("%d left %s after the pods were deleted: %s", len(left), (gone + d).Round(time.Millisecond), strings.Join(left, ", "))
			}
		})
	}
	t.Logf("%d pods deleted in %s; leftovers checked for %s more; pod directories kept in %s: %q", len(uids), gone.Round(time.Millisecond),
		d.Round(time.Millisecond), filepath.Join(rootDir, "pods"), podDirs(rootDir))
}

// rootDir is the configuration's rootDir (the documented default when it
// has none).
func (n *node) rootDir() string {
	if v, ok, _ := Lookup(n.current, "rootDir"); ok && fmt.Sprint(v) != "" {
		return fmt.Sprint(v)
	}
	return "/var/lib/nodeguard"
}

// ipamDir is nodeguard's host-local IPAM directory: network.ipamDir, or
// <rootDir>/cni/networks when that is empty (the documented default).
func (n *node) ipamDir() string {
	if v, ok, _ := Lookup(n.current, "network", "ipamDir"); ok && fmt.Sprint(v) != "" {
		return fmt.Sprint(v)
	}
	return filepath.Join(n.rootDir(), "cni", "networks")
}

// walkCgroups calls fn for every cgroup directory beneath /sys/fs/cgroup.
func walkCgroups(fn func(path, name string)) {
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		fn(strings.TrimPrefix(p, "/sys/fs/cgroup"), d.Name())
		return nil
	})
}

func podSlices() []string {
	var out []string
	walkCgroups(func(p, name string) {
		if strings.HasPrefix(name, "kubepods-") && strings.Contains(name, "pod") && strings.HasSuffix(name, ".slice") &&
			name != "kubepods-besteffort.slice" && name != "kubepods-burstable.slice" {
			out = append(out, p)
		}
	})
	if u, err := systemctl(cmdTimeout, "list-units", "--all", "--plain", "--no-legend", "kubepods-*pod*.slice"); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(u), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				out = append(out, "unit "+f[0])
			}
		}
	}
	return out
}

func scopes() []string {
	var out []string
	walkCgroups(func(p, name string) {
		if strings.HasPrefix(name, "cri-containerd-") {
			out = append(out, p)
		}
	})
	if u, err := systemctl(cmdTimeout, "list-units", "--all", "--plain", "--no-legend", "cri-containerd-*.scope"); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(u), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				out = append(out, "unit "+f[0])
			}
		}
	}
	return out
}

// podCgroupDirs finds cgroups named after a deleted pod in either naming
// (pod<uid> of the cgroupfs driver, pod<uid_> of the systemd one).
func podCgroupDirs(uids []string) []string {
	var out []string
	walkCgroups(func(p, name string) {
		for _, u := range uids {
			if strings.Contains(name, u) || strings.Contains(name, strings.ReplaceAll(u, "-", "_")) {
				out = append(out, p)
				return
			}
		}
	})
	return out
}

func podMounts(rootDir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{err.Error()}
	}
	m, err := MountsBelow(b, filepath.Join(rootDir, "pods"))
	if err != nil {
		return []string{err.Error()}
	}
	return m
}

func veths() []string {
	out, err := run(cmdTimeout, "ip", "-o", "link", "show", "type", "veth")
	if err != nil {
		return []string{err.Error()}
	}
	var vs []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) > 1 {
			vs = append(vs, strings.TrimSuffix(f[1], ":"))
		}
	}
	return vs
}

func leases(ipamDir string) []string {
	var out []string
	nets, err := os.ReadDir(ipamDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no network ever had a lease (the pods check logs the leases it saw)
	}
	if err != nil {
		return []string{err.Error()}
	}
	for _, nd := range nets {
		if !nd.IsDir() {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(ipamDir, nd.Name()))
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		for _, ip := range IPLeases(names) {
			out = append(out, nd.Name()+"/"+ip)
		}
	}
	return out
}

func criLeft() []string {
	var out []string
	if sbs, err := criPods(); err != nil {
		out = append(out, err.Error())
	} else {
		for _, s := range sbs {
			out = append(out, "sandbox "+s.ID[:12]+" "+s.Metadata.Namespace+"/"+s.Metadata.Name)
		}
	}
	if cs, err := criContainers(); err != nil {
		out = append(out, err.Error())
	} else {
		for _, c := range cs {
			out = append(out, "container "+c.ID[:12]+" "+c.Metadata.Name)
		}
	}
	return out
}

// podDirs lists <rootDir>/pods/<uid> directories that are left.
func podDirs(rootDir string) []string {
	es, err := os.ReadDir(filepath.Join(rootDir, "pods"))
	if err != nil {
		return nil // no pods directory: nothing left
	}
	var out []string
	for _, e := range es {
		out = append(out, filepath.Join(rootDir, "pods", e.Name()))
	}
	return out
}
