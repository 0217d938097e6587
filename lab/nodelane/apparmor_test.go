//go:build nodelane

package nodelane

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The AppArmor check runs pods whose containers name each kind of profile
// on the guest's kernel, which has AppArmor (Debian's, with the apparmor
// package's apparmor_parser in the image, see nodevm.Packages), and reads
// the label each container's process runs under from the kernel.
const (
	// appArmorEnabled, appArmorProfiles and appArmorParser are the
	// kernel's switch (the kubelet's and runc's IsEnabled read it), the
	// list of loaded profiles (containerd looks a Localhost profile up
	// there) and the loader containerd requires before it applies any
	// profile (its hostSupports).
	appArmorEnabled  = "/sys/module/apparmor/parameters/enabled"
	appArmorProfiles = "/sys/kernel/security/apparmor/profiles"
	appArmorParser   = "/sbin/apparmor_parser"
	// runtimeDefaultProfile is containerd's RuntimeDefault profile, which
	// it generates and loads at the first container that needs it.
	runtimeDefaultProfile = "cri-containerd.apparmor.d"
	// denyWriteProfile confines a container to no write beneath /tmp;
	// lateProfile is loaded only after the pod naming it was applied.
	denyWriteProfile = "nodelane-deny-write"
	lateProfile      = "nodelane-late"
	// appArmorRetryBound: after the profile is loaded, the container's
	// next attempt comes with the kubelet's back-off (10 s, then 20 s
	// from the shipped backoffInitial), plus its creation under TCG.
	appArmorRetryBound = 120 * time.Second
)

var (
	appArmorPod = podRef{Namespace: "lane", Name: "apparmor-containers", File: "testdata/apparmor-containers.yaml", QOS: corev1.PodQOSBurstable}
	latePod     = podRef{Namespace: "lane", Name: "apparmor-late", File: "testdata/apparmor-late.yaml", QOS: corev1.PodQOSBurstable}
)

// appArmor checks appArmorProfile on a node whose kernel enforces AppArmor:
// each container of apparmor-containers runs under the label its field
// (or the deprecated annotation, or neither) asks for, the Localhost
// profile's denied write fails with the kernel's DENIED record while the
// others' succeeds; a pod whose pod-level Localhost profile is not loaded
// waits in CreateContainerError with containerd's reason, and starts under
// the profile once it is loaded, as on the kubelet.
func (n *node) appArmor(t *testing.T) {
	requireAppArmor(t)
	n.ensureAgent(t)
	loadProfile(t, "testdata/apparmor/"+denyWriteProfile, denyWriteProfile)

	if out, err := applyPods(appArmorPod.File); err != nil {
		t.Fatalf("nodeguard pod apply -f %s: %v %s", appArmorPod.File, err, out)
	}
	defer deletePod(t, appArmorPod)
	pod := waitPodRunning(t, appArmorPod, podsBound)
	byName, err := containersByName(string(pod.UID))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, why string
		profile   string
		denied    bool
	}{
		{"localhost", "its field: Localhost", denyWriteProfile, true},
		{"runtime-default", "its field: RuntimeDefault, containerd's profile", runtimeDefaultProfile, false},
		{"unconfined", "its field: Unconfined", AppArmorUnconfined, false},
		{"annotated", "the deprecated annotation localhost/" + denyWriteProfile, denyWriteProfile, true},
		{"unset", "neither: the runtime's default where AppArmor is on, as the kubelet leaves it", runtimeDefaultProfile, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, ok := byName[c.name]
			if !ok {
				t.Fatalf("no running container %q in the pod: %v", c.name, byName)
			}
			label := containerLabel(t, id)
			if label != c.profile {
				t.Errorf("the container runs under %q, want %q (%s)", label, c.profile, c.why)
			}
			t.Logf("runs under %s (%s)", label, c.why)
			tryWrite(t, id, c.name, c.denied)
		})
	}
	profiles := loadedProfiles(t)
	if mode := profiles[runtimeDefaultProfile]; mode != "enforce" {
		t.Errorf("%s: containerd's %s is %q, want loaded in enforce mode", appArmorProfiles, runtimeDefaultProfile, mode)
	}

	t.Run("a pod whose profile is not loaded waits, then runs once it is", n.appArmorLate)
}

// appArmorLate applies latePod before its pod-level profile is loaded:
// nodeguard admits it (the kernel has AppArmor; the kubelet does not look
// the profile up either), containerd refuses to create the container, the
// status says why, and nothing of it runs; loaded, the next attempt runs
// it under the profile.
func (n *node) appArmorLate(t *testing.T) {
	if _, ok := loadedProfiles(t)[lateProfile]; ok {
		t.Fatalf("%s is loaded before the check loads it", lateProfile)
	}
	if out, err := applyPods(latePod.File); err != nil {
		t.Fatalf("nodeguard pod apply -f %s: %v %s", latePod.File, err, out)
	}
	defer deletePod(t, latePod)
	var waiting *corev1.ContainerStateWaiting
	var pod *corev1.Pod
	if _, err := waitFor(latePod.String()+" waiting in CreateContainerError", refusedBound, func() (bool, string, error) {
		l, err := listPods()
		if err != nil {
			return false, err.Error(), nil
		}
		if pod = findPod(l, latePod.Namespace, latePod.Name); pod == nil {
			return false, describePods(l), nil
		}
		for _, cs := range pod.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerError" {
				waiting = w
				return true, "", nil
			}
		}
		return false, describePods(l), nil
	}); err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
	}
	// containerd's words, 1.6 and 2.x alike (its generateApparmorSpecOpts).
	if want := "apparmor profile not found " + lateProfile; !strings.Contains(waiting.Message, want) {
		t.Errorf("the waiting message is %q, want containerd's %q", waiting.Message, want)
	}
	if pod.Status.Phase != corev1.PodPending {
		t.Errorf("phase %s, want Pending while its container cannot be created", pod.Status.Phase)
	}
	if cs, err := podContainers(string(pod.UID)); err != nil || len(cs) != 0 {
		t.Errorf("running containers of the pod before its profile is loaded: %v (%v), want none", cs, err)
	}
	t.Logf("waiting: %s: %s", waiting.Reason, waiting.Message)

	t0 := time.Now()
	loadProfile(t, "testdata/apparmor/"+lateProfile, lateProfile)
	running := waitPodRunning(t, latePod, appArmorRetryBound)
	cs, err := podContainers(string(running.UID))
	if err != nil || len(cs) != 1 {
		t.Fatalf("the pod's running containers: %v (%v), want one", cs, err)
	}
	if label := containerLabel(t, cs[0].ID); label != lateProfile {
		t.Errorf("the container runs under %q, want the pod's %q", label, lateProfile)
	}
	t.Logf("Running %s after the profile was loaded", time.Since(t0).Round(time.Millisecond))
}

// requireAppArmor fails unless the kernel enforces AppArmor, its profiles
// are readable (securityfs, which systemd mounts) and apparmor_parser is
// installed: the image is built for it, so a missing piece is a broken
// lane, not a reason to skip.
func requireAppArmor(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(appArmorEnabled)
	if err != nil || strings.TrimSpace(string(b)) != "Y" {
		cmdline, _ := os.ReadFile("/proc/cmdline")
		lsm, _ := os.ReadFile("/sys/kernel/security/lsm")
		t.Fatalf("the kernel does not enforce AppArmor: %s is %q (%v); LSMs %q; kernel command line %q",
			appArmorEnabled, strings.TrimSpace(string(b)), err, lsm, strings.TrimSpace(string(cmdline)))
	}
	if _, err := os.ReadFile(appArmorProfiles); err != nil {
		t.Fatalf("AppArmor's profile list: %v (is securityfs mounted at /sys/kernel/security?)", err)
	}
	if _, err := os.Stat(appArmorParser); err != nil {
		t.Fatalf("%v: containerd applies no AppArmor profile without it (the image lacks the apparmor package?)", err)
	}
}

// loadProfile loads the profile in file with apparmor_parser (replacing
// one of the same name, without its cache) and removes it when t ends,
// after the pods that use it are deleted (cleanups run after defers).
func loadProfile(t *testing.T, file, name string) {
	t.Helper()
	if out, err := run(cmdTimeout, appArmorParser, "--replace", "--skip-cache", file); err != nil {
		t.Fatalf("load %s: %v %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := run(cmdTimeout, appArmorParser, "--remove", "--skip-cache", file); err != nil {
			t.Errorf("unload %s: %v %s", name, err, out)
		}
	})
	if mode := loadedProfiles(t)[name]; mode != "enforce" {
		t.Fatalf("%s after apparmor_parser: %q is %q, want enforce", appArmorProfiles, name, mode)
	}
}

// loadedProfiles is the kernel's list of loaded profiles.
func loadedProfiles(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(appArmorProfiles)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ParseAppArmorProfiles(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// containersByName maps the container names of a pod's running
// containers to their ids.
func containersByName(uid string) (map[string]string, error) {
	cs, err := podContainers(uid)
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, c := range cs {
		m[c.Labels[LabelContainerName]] = c.ID
	}
	return m, nil
}

// containerLabel is the AppArmor label of a container's process as the
// kernel reports it: the AppArmor-specific attr/apparmor/current, or
// attr/current where the kernel has no per-LSM directory. The mode must
// be enforce: a complaining profile confines nothing.
func containerLabel(t *testing.T, id string) string {
	t.Helper()
	pid, err := containerPID(id)
	if err != nil {
		t.Fatal(err)
	}
	proc := "/proc/" + strconv.Itoa(pid) + "/attr/"
	b, err := os.ReadFile(proc + "apparmor/current")
	if errors.Is(err, fs.ErrNotExist) {
		b, err = os.ReadFile(proc + "current")
	}
	if err != nil {
		t.Fatalf("read the AppArmor label of pid %d: %v", pid, err)
	}
	profile, mode, err := AppArmorLabel(b)
	if err != nil {
		t.Fatal(err)
	}
	if profile != AppArmorUnconfined && mode != "enforce" {
		t.Errorf("pid %d runs under %s in mode %q, want enforce", pid, profile, mode)
	}
	return profile
}

// tryWrite creates a file beneath the container's /tmp through crictl
// exec (which runs under the container's profile, as kubectl exec does):
// it must fail with EACCES and the kernel's AppArmor DENIED record naming
// the profile when denied, and succeed otherwise.
func tryWrite(t *testing.T, id, name string, denied bool) {
	t.Helper()
	file := "/tmp/nodelane-apparmor-" + name
	mark := fmt.Sprintf("apparmor write %s %d", name, time.Now().UnixNano())
	if err := kmsgMark(mark); err != nil {
		t.Fatal(err)
	}
	// No flag after the id: crictl would take it for its own.
	out, werr := crictl("exec", id, "touch", file)
	switch {
	case !denied && werr != nil:
		t.Errorf("touch %s: %v %s, want it written (nothing denies it)", file, werr, out)
	case denied && werr == nil:
		t.Errorf("touch %s succeeded, want it denied by %s", file, denyWriteProfile)
	case denied && !strings.Contains(werr.Error(), "Permission denied"):
		t.Errorf("touch %s: %v, want Permission denied", file, werr)
	case denied:
		klog, err := kernelLogSince(mark)
		if err != nil {
			t.Fatal(err)
		}
		rec := `apparmor="DENIED"`
		if !strings.Contains(klog, rec) || !strings.Contains(klog, `profile="`+denyWriteProfile+`"`) || !strings.Contains(klog, file) {
			t.Errorf("the kernel log after the write has no %s record of %s for %s:\n%s", rec, denyWriteProfile, file, tail(klog, 10))
		}
		t.Logf("touch %s: %v; the kernel: %s", file, werr, firstLine(klog[strings.Index(klog, "\n")+1:]))
	}
}
