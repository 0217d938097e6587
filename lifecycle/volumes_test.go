package lifecycle_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
)

// writeSource writes one key of a configMap or secret source atomically
// (temp file and rename), so that what nodeguard reads is never half a
// file: the test is about nodeguard's own atomicity.
func writeSource(t *testing.T, dir, kind, name, key, value string) {
	t.Helper()
	d := filepath.Join(dir, kind, "default", name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(d, "."+key+".tmp")
	if err := os.WriteFile(tmp, []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d, key)); err != nil {
		t.Fatal(err)
	}
}

// blob is a secret value of many identical lines: a reader that sees more
// than one distinct line, or none, saw a torn update.
func blob(version int) string {
	return strings.Repeat(fmt.Sprintf("version-%04d\n", version), 20000)
}

const volumesPod = `
apiVersion: v1
kind: Pod
metadata: {name: vols, labels: {app: vols}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - {name: disk, emptyDir: {}}
  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 1Mi}}
  - {name: host, hostPath: {path: HOSTDIR/data, type: DirectoryOrCreate}}
  - {name: cfg, configMap: {name: app-config}}
  - {name: sec, secret: {secretName: app-secret, defaultMode: 0400}}
  - {name: info, downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}}
  initContainers:
  - name: init
    image: BUSYBOX
    command: [sh, -c, "echo from-init > /disk/init.txt && mkdir -p /disk/sub && echo sub > /disk/sub/f"]
    volumeMounts: [{name: disk, mountPath: /disk}]
  containers:
  - name: main
    image: BUSYBOX
    command: [sleep, "3600"]
    volumeMounts:
    - {name: disk, mountPath: /disk}
    - {name: disk, mountPath: /sub, subPath: sub, readOnly: true}
    - {name: mem, mountPath: /mem}
    - {name: host, mountPath: /host}
    - {name: cfg, mountPath: /cfg}
    - {name: sec, mountPath: /sec, readOnly: true}
    - {name: info, mountPath: /info}
  - name: reader
    image: BUSYBOX
    command: [sh, -c, "while true; do n=$(sort -u /sec/blob | wc -l); [ \"$n\" = 1 ] || echo torn $n >> /disk/torn; usleep 2000; done"]
    volumeMounts:
    - {name: disk, mountPath: /disk}
    - {name: sec, mountPath: /sec, readOnly: true}
`

func (r *rig) exec(t *testing.T, m *lifecycle.Manager, pod, ctr string, cmd ...string) (string, string, int) {
	t.Helper()
	res, err := m.Exec(context.Background(), "default", pod, ctr, cmd, 10*time.Second)
	if err != nil {
		t.Fatalf("exec %v in %s/%s: %v", cmd, pod, ctr, err)
	}
	return string(res.Stdout), string(res.Stderr), int(res.ExitCode)
}

func TestVolumesInARealContainer(t *testing.T) {
	r := newRig(t)
	m, stop := r.manager(t)
	ctx := context.Background()
	writeSource(t, r.sources, "configmaps", "app-config", "greeting", "hello")
	writeSource(t, r.sources, "secrets", "app-secret", "token", "s3cret")
	writeSource(t, r.sources, "secrets", "app-secret", "blob", blob(0))

	yaml := strings.ReplaceAll(volumesPod, "HOSTDIR", r.hostDir)
	if _, err := m.Apply(ctx, r.pods(t, yaml), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "vols", "ran", func(p *corev1.Pod) bool {
		return running(p) && len(p.Status.ContainerStatuses) == 2 &&
			p.Status.ContainerStatuses[0].State.Running != nil && p.Status.ContainerStatuses[1].State.Running != nil
	})

	for _, c := range []struct {
		what string
		cmd  []string
		want string
	}{
		{"emptyDir written by the init container", []string{"cat", "/disk/init.txt"}, "from-init\n"},
		{"subPath of the emptyDir", []string{"cat", "/sub/f"}, "sub\n"},
		{"configMap key", []string{"cat", "/cfg/greeting"}, "hello"},
		{"secret key", []string{"cat", "/sec/token"}, "s3cret"},
		{"secret defaultMode", []string{"stat", "-L", "-c", "%a", "/sec/token"}, "400\n"},
		{"downward API labels", []string{"cat", "/info/labels"}, "app=\"vols\""},
	} {
		if out, errOut, code := r.exec(t, m, "vols", "main", c.cmd...); out != c.want || code != 0 {
			t.Errorf("%s: %v = %q (stderr %q, exit %d), want %q", c.what, c.cmd, out, errOut, code, c.want)
		}
	}
	// readOnly is enforced by the mount, not by convention.
	if _, errOut, code := r.exec(t, m, "vols", "main", "touch", "/sub/x"); code == 0 || !strings.Contains(errOut, "Read-only") {
		t.Errorf("write to a readOnly subPath: exit %d, stderr %q; want a read-only file system error", code, errOut)
	}
	// hostPath: what the container writes is on the host.
	if _, errOut, code := r.exec(t, m, "vols", "main", "sh", "-c", "echo from-pod > /host/h"); code != 0 {
		t.Fatalf("write to hostPath: exit %d: %s", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(r.hostDir, "data", "h")); err != nil || string(b) != "from-pod\n" {
		t.Errorf("hostPath file on the host: %q, %v", b, err)
	}
	// A memory emptyDir of 1Mi is a 1Mi tmpfs: the 2nd MiB gets ENOSPC.
	_, errOut, code := r.exec(t, m, "vols", "main", "dd", "if=/dev/zero", "of=/mem/f", "bs=1024", "count=2048")
	if code == 0 || !strings.Contains(errOut, "No space left on device") {
		t.Errorf("2 MiB into a 1Mi memory emptyDir: exit %d, stderr %q; want ENOSPC", code, errOut)
	}
	if out, _, _ := r.exec(t, m, "vols", "main", "sh", "-c", "grep ' /mem ' /proc/mounts"); !strings.Contains(out, "tmpfs") || !strings.Contains(out, "size=1024k") {
		t.Errorf("/mem is %q, want a tmpfs of size=1024k", out)
	}

	// Secret updates reach the running container in place, atomically: the
	// reader container checks every 2 ms that the blob has one version.
	for v := 1; v <= 8; v++ {
		writeSource(t, r.sources, "secrets", "app-secret", "blob", blob(v))
		want := fmt.Sprintf("version-%04d", v)
		deadline := time.Now().Add(15 * time.Second)
		for {
			out, _, _ := r.exec(t, m, "vols", "main", "head", "-n1", "/sec/blob")
			if strings.TrimSpace(out) == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("secret update %d never reached the container (it reads %q)", v, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if out, _, code := r.exec(t, m, "vols", "main", "cat", "/disk/torn"); code == 0 {
		// "torn N": N distinct lines; N = 0 is a read that found no file.
		t.Errorf("the reader saw torn or missing secret updates:\n%s", out)
	}

	// Storage usage: the emptyDirs are measured.
	st, err := m.Storage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range st {
		for _, v := range ps.Volumes {
			t.Logf("usage %s/%s: %d bytes, %d inodes (%s)", v.Plugin, v.Name, v.Bytes, v.Inodes, v.Medium)
			if v.Name == "mem" && v.Bytes < 512<<10 {
				t.Errorf("memory emptyDir holds ~1 MiB but usage says %d bytes", v.Bytes)
			}
		}
		if ps.EphemeralBytes() == 0 {
			t.Errorf("pod %s: no ephemeral storage counted", ps.Name)
		}
	}

	// nodeguard stops, and while it is down the pod is deleted (its
	// persisted file removed): the next nodeguard removes the sandbox and,
	// at its first collection, the volumes; nothing is left.
	stop()
	r.forgetPersisted(t, p)
	m2, _ := r.manager(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := r.leftovers(t)
		if len(left) == 0 && r.sandboxes(t) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart without the pod, still left: %v (sandboxes %d)", left, r.sandboxes(t))
		}
		m2.GC(ctx)
		time.Sleep(200 * time.Millisecond)
	}
}

func TestVolumeTraversalIsRefused(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	for _, c := range []struct{ name, volumes, mounts, want string }{
		{"hostPath outside the allowlist", `[{name: v, hostPath: {path: /etc}}]`, `[{name: v, mountPath: /v}]`, "spec.volumes[0].hostPath.path"},
		{"hostPath climbing out of the allowlist", `[{name: v, hostPath: {path: "HOSTDIR/../../etc"}}]`, `[{name: v, mountPath: /v}]`, "spec.volumes[0].hostPath.path"},
		{"subPath with ..", `[{name: v, emptyDir: {}}]`, `[{name: v, mountPath: /v, subPath: "a/../../x"}]`, "subPath"},
		{"absolute subPath", `[{name: v, emptyDir: {}}]`, `[{name: v, mountPath: /v, subPath: /etc}]`, "subPath"},
		{"configMap item path with ..", `[{name: v, configMap: {name: c, items: [{key: k, path: ../k}]}}]`, `[{name: v, mountPath: /v}]`, "items[0].path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			yaml := fmt.Sprintf(`
apiVersion: v1
kind: Pod
metadata: {name: bad}
spec:
  volumes: %s
  containers:
  - {name: c, image: BUSYBOX, volumeMounts: %s}
`, strings.ReplaceAll(c.volumes, "HOSTDIR", r.hostDir), c.mounts)
			_, err := m.Apply(ctx, r.pods(t, yaml), lifecycle.SourceAPI)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("apply: %v; want an error naming %s", err, c.want)
			}
			if _, ok := m.Get("default", "bad"); ok {
				t.Fatal("the refused pod is desired")
			}
		})
	}

	// A symlink planted in an emptyDir at run time cannot make a subPath
	// expose the host: the container is refused, never started.
	yaml := `
apiVersion: v1
kind: Pod
metadata: {name: escape}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: v, emptyDir: {}}]
  initContainers:
  - {name: plant, image: BUSYBOX, command: [ln, -s, /etc, /v/escape], volumeMounts: [{name: v, mountPath: /v}]}
  containers:
  - {name: c, image: BUSYBOX, command: [sleep, "3600"], volumeMounts: [{name: v, mountPath: /host-etc, subPath: escape}]}
`
	if _, err := m.Apply(ctx, r.pods(t, yaml), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "escape", "refused the subPath", func(p *corev1.Pod) bool {
		return strings.Contains(p.Status.Message, "escape")
	})
	t.Logf("refused: %s: %s", p.Status.Reason, p.Status.Message)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			t.Errorf("container %s runs with a subPath through a symlink", cs.Name)
		}
	}
	if err := m.Delete(ctx, "default", "escape"); err != nil {
		t.Fatal(err)
	}
	waitGone(t, m, "escape")
	if left := r.leftovers(t); len(left) > 0 {
		t.Errorf("left after removal: %v", left)
	}
}

// leftovers lists what removed pods may leak: mounts and directories under
// the root, network namespace files, IP leases and veths on the bridge.
func (r *rig) leftovers(t *testing.T) []string {
	t.Helper()
	var left []string
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], r.root+"/") {
			left = append(left, "mount "+fields[4])
		}
	}
	if ents, err := os.ReadDir(filepath.Join(r.root, "pods")); err == nil {
		for _, e := range ents {
			left = append(left, "pod dir "+e.Name())
		}
	}
	if ents, err := os.ReadDir(r.env.NetNSDir()); err == nil {
		for _, e := range ents {
			left = append(left, "netns "+e.Name())
		}
	}
	nc := r.env.NetworkConfig()
	if ents, err := os.ReadDir(filepath.Join(nc.IPAMDir, nc.Name)); err == nil {
		for _, e := range ents {
			if n := e.Name(); n != "lock" && !strings.HasPrefix(n, "last_reserved_ip") {
				left = append(left, "ip lease "+n)
			}
		}
	}
	veths, err := netplumbVeths(r.env.NetNS(), nc.Bridge)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range veths {
		left = append(left, "veth "+v)
	}
	return left
}
