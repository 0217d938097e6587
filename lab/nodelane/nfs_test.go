//go:build nodelane

package nodelane

import (
	"errors"
	"fmt"
	"github.com/nodeguard/nodeguard/lab/nodevm"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	corev1 "k8s.io/api/core/v1"
)

// The NFS check's server: nfsd is per network namespace, so the check
// runs the kernel's NFSv4 server (nfs-kernel-server's rpc.nfsd, exportfs,
// rpc.mountd) in a namespace it makes, linked to the node's (the guest's
// own: the VM has no network device, nothing leaves it) by a veth pair.
// nodeguard mounts from the node's namespace, as the kubelet's nfs plugin
// does. NFSv4 only: no rpcbind, no statd (nodevm masks their units).
const (
	nfsNetNSDir   = "/run/nfs-lane"
	nfsNetNSFile  = nfsNetNSDir + "/net"
	nfsVethNode   = "ngnfs0"
	nfsVethServer = "ngnfs1"
	nfsNodeAddr   = "10.251.0.1/29"
	nfsServerAddr = "10.251.0.2/29"
	nfsExport     = "/srv/nfs-lane"
	// nfsMountBound: a sync pass mounts; the pod's sandbox follows.
	nfsMountBound = podsBound
	// nfsUnreachableBound: mount.nfs's one attempt (nodeguard mounts with
	// retry=0) at a server nobody answers for on the link fails once the
	// neighbour lookup has (about 3 s for each protocol version it
	// tries); a mount(8) still running after 30 s
	// (mounts.DefaultNFSMountTimeout) is reported as such.
	nfsUnreachableBound = 90 * time.Second
	// nfsGiveUpBound: a deleted pod's volume directory goes once the
	// mount(8) running for it has returned: at most that one attempt.
	nfsGiveUpBound = 90 * time.Second
	// nfsHungBound: the container stopped, then for each of the pod's two
	// nfs volumes umount(8) waits DefaultNFSUnmountTimeout (10 s), umount
	// -f as long again, and the detach at most as long; under TCG.
	nfsHungBound = 180 * time.Second
	// nfsLease is the server's NFSv4 lease and grace time (the kernel's
	// minimum): a fresh server refuses new opens for its grace period,
	// 90 s by default.
	nfsLease = "10"
)

var (
	nfsWriterPod      = podRef{Namespace: "lane", Name: "nfs-writer", File: "testdata/nfs-writer.yaml", QOS: corev1.PodQOSBurstable}
	nfsStaticPod      = podRef{Namespace: "default", Name: "nfs-static", File: "testdata/nfs-static.yaml", QOS: corev1.PodQOSBurstable, Static: true}
	nfsUnreachablePod = podRef{Namespace: "lane", Name: "nfs-unreachable", File: "testdata/nfs-unreachable.yaml", QOS: corev1.PodQOSBurstable}
)

// nfsServerScript runs in the server's namespace (under unshare --mount, which
// gives it a mount namespace of its own): the nfsd file system of this
// network namespace, short lease and grace times, the export, rpc.mountd
// in the foreground (its pid printed; the check kills it), then the
// kernel's server with 4 threads, NFSv4 over TCP only (6.12 has no NFSv2
// server at all: rpc.nfsd refuses -N 2 as an unsupported version;
// rpc.mountd -N 2 -N 3 serves no MOUNT protocol, so it needs no rpcbind).
const nfsServerScript = `set -e
umount /proc/fs/nfsd 2>/dev/null || true
mount -t nfsd nfsd /proc/fs/nfsd
echo ` + nfsLease + ` > /proc/fs/nfsd/nfsv4leasetime
echo ` + nfsLease + ` > /proc/fs/nfsd/nfsv4gracetime
exportfs -o rw,sync,no_subtree_check,no_root_squash,insecure 10.251.0.0/29:` + nfsExport + `
rpc.mountd -F -N 2 -N 3 >/run/nfs-lane-mountd.log 2>&1 &
echo $! > /run/nfs-lane-mountd.pid
rpc.nfsd -N 3 --no-udp 4
cat /proc/fs/nfsd/versions
`

// nfsServer starts the server and returns a function that stops it and
// removes its namespace. The namespace is kept by a file of the check's
// own (nfsNetNSFile), not in /run/netns: nodeguard's network collection
// removes every netns file in its netnsDirs (/var/run/netns) that no
// sandbox uses.
func nfsServer(t *testing.T) (stop func()) {
	t.Helper()
	if out, err := run(cmdTimeout, "modprobe", "-a", "nfsd", "nfs", "nfsv4"); err != nil {
		t.Fatalf("load the NFS modules (the root filesystem keeps kernel/fs and kernel/net): %v %s", err, out)
	}
	for _, dir := range []string{nfsExport, filepath.Join(nfsExport, "ro"), nfsNetNSDir} {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	// unshare(1) binds the namespace on a file only on a mount that is
	// not shared: a private bind mount of the directory, as ip-netns
	// makes of /run/netns.
	steps := [][]string{
		{"mount", "--bind", nfsNetNSDir, nfsNetNSDir},
		{"mount", "--make-private", nfsNetNSDir},
		{"touch", nfsNetNSFile},
		{"unshare", "--net=" + nfsNetNSFile, "true"},
		// The pair is made in the server's namespace, its peer moved to
		// the node's (the check's own).
		inServerNS("ip", "link", "add", nfsVethServer, "type", "veth", "peer", "name", nfsVethNode, "netns", strconv.Itoa(os.Getpid())),
		{"ip", "addr", "add", nfsNodeAddr, "dev", nfsVethNode},
		{"ip", "link", "set", nfsVethNode, "up"},
		inServerNS("ip", "addr", "add", nfsServerAddr, "dev", nfsVethServer),
		inServerNS("ip", "link", "set", nfsVethServer, "up"),
		inServerNS("ip", "link", "set", "lo", "up"),
	}
	stop = func() {
		if b, err := os.ReadFile("/run/nfs-lane-mountd.pid"); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
		// Threads to 0 stops the namespace's nfsd; the veth pair goes
		// with either end.
		for _, s := range [][]string{
			inServerNS("unshare", "--mount", "sh", "-c", "mount -t nfsd nfsd /proc/fs/nfsd && rpc.nfsd 0"),
			{"ip", "link", "del", nfsVethNode},
			{"umount", nfsNetNSFile},
			{"umount", nfsNetNSDir},
		} {
			if out, err := run(cmdTimeout, s[0], s[1:]...); err != nil {
				t.Logf("stop the NFS server: %v %s", err, out)
			}
		}
	}
	for _, s := range steps {
		if out, err := run(cmdTimeout, s[0], s[1:]...); err != nil {
			stop()
			t.Fatalf("set up the NFS server's network: %v %s", err, out)
		}
	}
	// A mount namespace of its own (unshare --mount: private
	// propagation) for the namespace's nfsd file system.
	srv := inServerNS("unshare", "--mount", "sh", "-c", nfsServerScript)
	out, err := run(cmdTimeout, srv[0], srv[1:]...)
	if err != nil {
		mountd, _ := os.ReadFile("/run/nfs-lane-mountd.log")
		stop()
		t.Fatalf("start the NFS server in %s: %v %s; rpc.mountd: %s", nfsNetNSFile, err, out, mountd)
	}
	t.Logf("NFS server in netns %s at %s, exporting %s; nfsd versions %s", nfsNetNSFile, nfsServerAddr, nfsExport, strings.TrimSpace(out))
	return stop
}

// inServerNS is the command line that runs args in the server's network
// namespace.
func inServerNS(args ...string) []string {
	return append([]string{"nsenter", "--net=" + nfsNetNSFile, "--"}, args...)
}

// ensureAgent starts nodeguard with the node's values unless it runs, once
// a reload or restart under way has ended (the NFS check may run alone:
// make test-node NODE_FLAGS='-run TestNode/nfs').
func (n *node) ensureAgent(t *testing.T) {
	t.Helper()
	if active, sub, pid, _, err := settledAgent(settleBound); err == nil && active == "active" && sub == "running" && pid != 0 {
		if n.current == nil {
			n.current, _ = os.ReadFile(ConfigPath)
		}
		return
	}
	if err := n.writeConfig(Node()); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(ManifestDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := systemctl(startCmdBound, "start", "nodeguard"); err != nil {
		t.Fatalf("systemctl start nodeguard: %v %s; journal:\n%s", err, out, journalText("nodeguard", 30))
	}
	requireAgent(t)
}

// nfsMount is the NFS mount of a pod's volume, if there is one.
func nfsMount(rootDir, uid, volume string) (*mountinfo.Info, error) {
	p := filepath.Join(rootDir, "pods", uid, "volumes", "kubernetes.io~nfs", volume)
	ms, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p))
	if err != nil || len(ms) == 0 {
		return nil, err
	}
	return ms[len(ms)-1], nil
}

// waitPodRunning waits for p Running with its containers ready and
// returns it.
func waitPodRunning(t *testing.T, p podRef, bound time.Duration) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	if _, err := waitFor(p.String()+" Running", bound, func() (bool, string, error) {
		l, err := listPods()
		if err != nil {
			return false, err.Error(), nil
		}
		pod = findPod(l, p.Namespace, p.Name)
		return pod != nil && pod.Status.Phase == corev1.PodRunning && allReady(pod), describePods(l), nil
	}); err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
	}
	return pod
}

// waitUnmounted waits until the pod directory of uid has no mount and is
// gone.
func waitUnmounted(t *testing.T, rootDir, uid string, bound time.Duration) time.Duration {
	t.Helper()
	dir := filepath.Join(rootDir, "pods", uid)
	d, err := waitFor("the pod's volumes unmounted and its directory removed", bound, func() (bool, string, error) {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return false, "", err
		}
		ms, err := MountsBelow(b, dir)
		if err != nil {
			return false, "", err
		}
		_, err = os.Lstat(dir)
		gone := errors.Is(err, os.ErrNotExist)
		return len(ms) == 0 && gone, fmt.Sprintf("mounts %q, directory removed %v", ms, gone), nil
	})
	if err != nil {
		t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 20))
	}
	return d
}

func (n *node) nfs(t *testing.T) {
	if n.runtime != nodevm.ContainerdDebian {
		// Three minutes of TCG for what the kernel's NFS client and server
		// do, which no containerd changes: checked on the lane of the root
		// filesystem's containerd.
		t.Skipf("NFS is checked on the %s containerd lane; this one runs %s", nodevm.ContainerdDebian, n.runtime)
	}
	n.ensureAgent(t)
	stop := nfsServer(t)
	defer stop()
	rootDir := n.rootDir()

	t.Run("a pod writes into its nfs volume and the export has the file", func(t *testing.T) {
		if out, err := applyPods(nfsWriterPod.File); err != nil {
			t.Fatalf("nodeguard pod apply -f %s: %v %s", nfsWriterPod.File, err, out)
		}
		t0 := time.Now()
		pod := waitPodRunning(t, nfsWriterPod, nfsMountBound)
		uid := string(pod.UID)
		mi, err := nfsMount(rootDir, uid, "data")
		if err != nil || mi == nil {
			t.Fatalf("no NFS mount at %s/pods/%s/volumes/kubernetes.io~nfs/data (%v)", rootDir, uid, err)
		}
		if !strings.HasPrefix(mi.FSType, "nfs") || mi.Source != "10.251.0.2:"+nfsExport {
			t.Errorf("the volume is %s from %s, want nfs from 10.251.0.2:%s", mi.FSType, mi.Source, nfsExport)
		}
		ro, err := nfsMount(rootDir, uid, "ro")
		if err != nil || ro == nil || !strings.Contains(","+ro.Options+",", ",ro,") {
			t.Errorf("the readOnly volume is not mounted ro: %+v (%v)", ro, err)
		}
		var hello, roCheck []byte
		if _, err := waitFor("the container's files on the export", podsBound, func() (bool, string, error) {
			hello, _ = os.ReadFile(filepath.Join(nfsExport, "hello"))
			roCheck, _ = os.ReadFile(filepath.Join(nfsExport, "ro-check"))
			return len(hello) > 0 && len(roCheck) > 0, fmt.Sprintf("hello %q ro-check %q", hello, roCheck), nil
		}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(hello), "nfs-writer") {
			t.Errorf("%s/hello is %q, want the pod's hostname in it", nfsExport, hello)
		}
		if got := strings.TrimSpace(string(roCheck)); got != "read-only" {
			t.Errorf("the container found its readOnly nfs volume %s", got)
		}
		if _, err := os.Lstat(filepath.Join(nfsExport, "ro", "probe")); err == nil {
			t.Errorf("a write through the readOnly volume reached the export")
		}
		t.Logf("Running %s after the apply; %s mounted %s from %s (%s); the export has hello=%q",
			time.Since(t0).Round(time.Millisecond), mi.Mountpoint, mi.FSType, mi.Source, mi.Options, strings.TrimSpace(string(hello)))

		t.Run("deleting it unmounts the volumes and removes the directory", func(t *testing.T) {
			deletePod(t, nfsWriterPod)
			d := waitUnmounted(t, rootDir, uid, leftoverBound)
			if b, err := os.ReadFile(filepath.Join(nfsExport, "hello")); err != nil || len(b) == 0 {
				t.Errorf("the export lost the pod's file: %v", err)
			}
			t.Logf("unmounted and removed %s after the pod was gone", d.Round(time.Millisecond))
		})
	})

	t.Run("after kill -9 with an nfs pod running and its manifest removed, the next agent unmounts it", func(t *testing.T) {
		b, err := os.ReadFile(nfsStaticPod.File)
		if err != nil {
			t.Fatal(err)
		}
		manifest := filepath.Join(ManifestDir, filepath.Base(nfsStaticPod.File))
		if err := os.WriteFile(manifest, b, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(manifest)
		pod := waitPodRunning(t, nfsStaticPod, nfsMountBound)
		uid := string(pod.UID)
		if mi, err := nfsMount(rootDir, uid, "data"); err != nil || mi == nil {
			t.Fatalf("no NFS mount for the static pod (%v)", err)
		}
		pid := requireAgent(t)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill -9 %d: %v", pid, err)
		}
		// Removed while no agent runs (systemd restarts it 2 s later).
		if err := os.Remove(manifest); err != nil {
			t.Fatal(err)
		}
		if _, err := waitFor("systemd to restart the agent", restartBound, func() (bool, string, error) {
			active, sub, p, err := agent()
			if err != nil {
				return false, "", err
			}
			return p != pid && p != 0 && active == "active" && sub == "running", fmt.Sprintf("%s/%s main pid %d", active, sub, p), nil
		}); err != nil {
			t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 30))
		}
		d := waitUnmounted(t, rootDir, uid, deleteBound)
		if sbs, err := criPods(); err == nil {
			for _, s := range sbs {
				if s.Metadata.Name == nfsStaticPod.Name {
					t.Errorf("the undesired pod's sandbox %s is left", s.ID)
				}
			}
		}
		t.Logf("the restarted agent unmounted the undesired pod's nfs volume and removed %s/pods/%s %s after it was up", rootDir, uid, d.Round(time.Millisecond))
	})

	t.Run("a pod whose NFS server does not answer stays ContainerCreating with FailedMount", func(t *testing.T) {
		if out, err := applyPods(nfsUnreachablePod.File); err != nil {
			t.Fatalf("nodeguard pod apply -f %s: %v %s", nfsUnreachablePod.File, err, out)
		}
		var pod *corev1.Pod
		if _, err := waitFor("FailedMount in the pod's status", nfsUnreachableBound, func() (bool, string, error) {
			l, err := listPods()
			if err != nil {
				return false, err.Error(), nil
			}
			pod = findPod(l, nfsUnreachablePod.Namespace, nfsUnreachablePod.Name)
			return pod != nil && pod.Status.Reason == "FailedMount", describePods(l), nil
		}); err != nil {
			t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 20))
		}
		if pod.Status.Phase != corev1.PodPending {
			t.Errorf("phase %s, want Pending", pod.Status.Phase)
		}
		for _, c := range pod.Status.ContainerStatuses {
			if c.State.Waiting == nil || c.State.Waiting.Reason != "ContainerCreating" {
				t.Errorf("container %s: %+v, want waiting ContainerCreating", c.Name, c.State)
			}
		}
		if sbs, err := criPods(); err == nil {
			for _, s := range sbs {
				if s.Metadata.Name == nfsUnreachablePod.Name {
					t.Errorf("a sandbox %s was made though the volume is not mounted", s.ID)
				}
			}
		}
		if !strings.Contains(pod.Status.Message, "10.251.0.3") {
			t.Errorf("the message %q does not name the server", pod.Status.Message)
		}
		requireAgent(t)
		t.Logf("%s: %s %q", nfsUnreachablePod, pod.Status.Reason, pod.Status.Message)
		// Deleted, the pod stays listed (VolumeTeardownFailed, naming the
		// mount still running) while a mount(8) for it has not returned:
		// its directory is kept for it, as the kubelet's volume manager
		// runs no unmount of a volume whose mount has not returned.
		uid := string(pod.UID)
		t0 := time.Now()
		if out, err := nodeguard(cmdTimeout, "pod", "rm", "-n", nfsUnreachablePod.Namespace, nfsUnreachablePod.Name); err != nil {
			t.Fatalf("nodeguard pod rm %s: %v %s", nfsUnreachablePod, err, out)
		}
		var last string
		if _, err := waitFor(nfsUnreachablePod.String()+" gone", nfsGiveUpBound, func() (bool, string, error) {
			l, err := listPods()
			if err != nil {
				return false, err.Error(), nil
			}
			if p := findPod(l, nfsUnreachablePod.Namespace, nfsUnreachablePod.Name); p != nil {
				last = p.Status.Reason + " " + p.Status.Message
				return false, describePods(l), nil
			}
			return true, "", nil
		}); err != nil {
			t.Fatal(err)
		}
		waitUnmounted(t, rootDir, uid, leftoverBound)
		requireAgent(t)
		t.Logf("deleted: gone with its directory %s after pod rm (once no mount(8) ran for it); meanwhile %q", time.Since(t0).Round(time.Millisecond), last)
	})

	t.Run("a pod whose server stopped answering is deleted: the unmount is forced or detached, bounded", func(t *testing.T) {
		if out, err := applyPods(nfsWriterPod.File); err != nil {
			t.Fatalf("nodeguard pod apply -f %s: %v %s", nfsWriterPod.File, err, out)
		}
		pod := waitPodRunning(t, nfsWriterPod, nfsMountBound)
		uid := string(pod.UID)
		if mi, err := nfsMount(rootDir, uid, "data"); err != nil || mi == nil {
			t.Fatalf("no NFS mount for the pod (%v)", err)
		}
		// The server's link goes down: every RPC of the hard mount now
		// waits for it, as with a server that crashed.
		down, up := inServerNS("ip", "link", "set", nfsVethServer, "down"), inServerNS("ip", "link", "set", nfsVethServer, "up")
		if out, err := run(cmdTimeout, down[0], down[1:]...); err != nil {
			t.Fatalf("cut the server off: %v %s", err, out)
		}
		defer run(cmdTimeout, up[0], up[1:]...)
		cursor, _ := journalCursor()
		t0 := time.Now()
		if out, err := nodeguard(cmdTimeout, "pod", "rm", "-n", nfsWriterPod.Namespace, nfsWriterPod.Name); err != nil {
			t.Fatalf("nodeguard pod rm %s: %v %s", nfsWriterPod, err, out)
		}
		if _, err := waitFor(nfsWriterPod.String()+" gone", nfsHungBound, func() (bool, string, error) {
			l, err := listPods()
			if err != nil {
				return false, err.Error(), nil
			}
			return findPod(l, nfsWriterPod.Namespace, nfsWriterPod.Name) == nil, describePods(l), nil
		}); err != nil {
			t.Fatalf("%v; journal:\n%s", err, journalText("nodeguard", 20))
		}
		d := waitUnmounted(t, rootDir, uid, leftoverBound)
		requireAgent(t)
		how := "unmounted"
		if es, err := journal("nodeguard", cursor); err == nil {
			for _, e := range agentEntries(es) {
				if strings.Contains(e["MESSAGE"], "detached nfs mount") {
					how = "detached (MNT_DETACH) after umount and umount -f did not return"
				}
			}
		}
		t.Logf("the pod and its volume went %s after pod rm (%s after the pod), %s", time.Since(t0).Round(time.Millisecond), d.Round(time.Millisecond), how)
	})
}
