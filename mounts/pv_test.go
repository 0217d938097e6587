package mounts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/lab/looptest"
)

// mountedDevice returns the mount at exactly p, or nil.
func mountedDevice(p string) (*mountinfo.Info, error) {
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p))
	if err != nil {
		return nil, fmt.Errorf("read mountinfo for %s: %w", p, err)
	}
	if len(infos) == 0 {
		return nil, nil
	}
	return infos[len(infos)-1], nil // the last mount on p is the one seen
}

const testClaim = `apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: local
  resources: {requests: {storage: 32Mi}}
`

// testPV is a local PersistentVolume bound to default/data by its
// claimRef; PATH is replaced by the test.
const testPV = `apiVersion: v1
kind: PersistentVolume
metadata: {name: disk1, labels: {speed: fast}}
spec:
  capacity: {storage: 64Mi}
  accessModes: [ReadWriteOnce, ReadOnlyMany]
  storageClassName: local
  claimRef: {namespace: default, name: data}
  local: {path: PATH}
`

func (e *testEnv) writeClaim(t *testing.T, name, yaml string) {
	t.Helper()
	mustWrite(t, filepath.Join(e.source, sourceClaims, "default", name+manifestExt), yaml)
}

func (e *testEnv) writePV(t *testing.T, name, yaml string) {
	t.Helper()
	mustWrite(t, filepath.Join(e.source, sourceVolumes, name+manifestExt), yaml)
}

func claimVol(name, claim string, readOnly bool) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: readOnly}}}
}

func TestClaimBinding(t *testing.T) {
	for _, tc := range []struct {
		name      string
		claim, pv string // manifests; "" writes none
		pvName    string // file name of pv, disk1 when empty
		wantPV    string
		wantErr   error
		wantMsg   string
	}{
		{name: "bound by claimRef", claim: testClaim, pv: testPV, wantPV: "disk1"},
		{name: "bound by volumeName", claim: testClaim + "  volumeName: disk1\n",
			pv: strings.Replace(testPV, "  claimRef: {namespace: default, name: data}\n", "", 1), wantPV: "disk1"},
		{name: "selector matches", claim: testClaim + "  selector: {matchLabels: {speed: fast}}\n", pv: testPV, wantPV: "disk1"},
		{name: "missing claim", pv: testPV, wantErr: ErrClaimNotFound, wantMsg: `persistentvolumeclaim "data" not found`},
		{name: "no volume names the claim", claim: testClaim,
			pv:      strings.Replace(testPV, "name: data}", "name: other}", 1),
			wantErr: ErrClaimUnbound, wantMsg: "pod has unbound immediate PersistentVolumeClaims"},
		{name: "volumeName of a missing volume", claim: testClaim + "  volumeName: nope\n", pv: testPV,
			wantErr: ErrClaimUnbound, wantMsg: `spec.volumeName "nope" names no persistentvolume`},
		{name: "volume bound to another claim", claim: testClaim + "  volumeName: disk1\n",
			pv:      strings.Replace(testPV, "name: data}", "name: other}", 1),
			wantErr: ErrVolumeMismatch, wantMsg: "its spec.claimRef is default/other"},
		{name: "capacity too small", claim: strings.Replace(testClaim, "32Mi", "1Gi", 1), pv: testPV,
			wantErr: ErrVolumeMismatch, wantMsg: "spec.capacity.storage 64Mi of the volume is less than the claim's request 1Gi"},
		{name: "storage class differs", claim: strings.Replace(testClaim, "storageClassName: local", "storageClassName: ssd", 1), pv: testPV,
			wantErr: ErrVolumeMismatch, wantMsg: `spec.storageClassName "ssd" of the claim differs from the volume's "local"`},
		{name: "volume mode differs", claim: testClaim + "  volumeMode: Block\n", pv: testPV,
			wantErr: ErrVolumeMismatch, wantMsg: "spec.volumeMode Block of the claim differs from the volume's Filesystem"},
		{name: "access mode missing", claim: strings.Replace(testClaim, "ReadWriteOnce", "ReadWriteMany", 1), pv: testPV,
			wantErr: ErrVolumeMismatch, wantMsg: "the claim asks for ReadWriteMany"},
		{name: "selector does not match", claim: testClaim + "  selector: {matchLabels: {speed: slow}}\n", pv: testPV,
			wantErr: ErrVolumeMismatch, wantMsg: "do not match the claim's spec.selector speed=slow"},
		{name: "no storage request", claim: strings.Replace(testClaim, "  resources: {requests: {storage: 32Mi}}\n", "", 1), pv: testPV,
			wantErr: ErrVolumeMismatch, wantMsg: "the claim has no spec.resources.requests.storage"},
		{name: "misspelt field", claim: strings.Replace(testClaim, "accessModes", "accesModes", 1), pv: testPV,
			wantErr: ErrBadObject, wantMsg: `unknown field "accesModes"`},
		{name: "wrong kind", claim: strings.Replace(testClaim, "kind: PersistentVolumeClaim", "kind: ConfigMap", 1), pv: testPV,
			wantErr: ErrBadObject, wantMsg: `kind "ConfigMap", want v1 PersistentVolumeClaim`},
		{name: "volume file of another name", claim: testClaim, pv: testPV, pvName: "disk2",
			wantErr: ErrBadObject, wantMsg: `the manifest is of "disk1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newEnv(t)
			if tc.claim != "" {
				env.writeClaim(t, "data", tc.claim)
			}
			if tc.pv != "" {
				name := tc.pvName
				if name == "" {
					name = "disk1"
				}
				env.writePV(t, name, strings.Replace(tc.pv, "PATH", "/dev/null", 1))
			}
			pv, pvc, err := env.m.Claim("default", "data")
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if pv.Name != tc.wantPV || pvc.Name != "data" || pvc.Namespace != "default" {
					t.Errorf("Claim = pv %s, claim %s/%s; want pv %s, claim default/data", pv.Name, pvc.Namespace, pvc.Name, tc.wantPV)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("Claim error = %v, want %v containing %q", err, tc.wantErr, tc.wantMsg)
			}
		})
	}
}

func TestClaimOfTwoVolumesIsAmbiguous(t *testing.T) {
	env := newEnv(t)
	env.writeClaim(t, "data", testClaim)
	env.writePV(t, "disk1", strings.Replace(testPV, "PATH", "/dev/null", 1))
	env.writePV(t, "disk2", strings.NewReplacer("PATH", "/dev/null", "name: disk1", "name: disk2").Replace(testPV))
	_, _, err := env.m.Claim("default", "data")
	if !errors.Is(err, ErrVolumeMismatch) || !strings.Contains(err.Error(), "disk1, disk2") {
		t.Fatalf("Claim error = %v, want both volumes named", err)
	}
}

func TestSetupOfAnUnboundClaimSaysWhy(t *testing.T) {
	env := newEnv(t)
	pod := newPod("unbound", []corev1.Volume{claimVol("data", "data", false)})
	_, err := env.m.Setup(testCtx(t), pod)
	var ce *ClaimError
	if !errors.As(err, &ce) || ce.Unbound || !strings.Contains(err.Error(), `persistentvolumeclaim "data" not found`) {
		t.Fatalf("Setup error = %v, want the missing claim's ClaimError", err)
	}
	env.writeClaim(t, "data", testClaim)
	if _, err := env.m.Setup(testCtx(t), pod); !errors.Is(err, ErrClaimUnbound) {
		t.Fatalf("Setup error = %v, want ErrClaimUnbound", err)
	}
}

// statfsType is the file system magic of p.
func statfsType(t *testing.T, p string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type
}

func TestLocalBlockDeviceIsFormattedOnceAndMounted(t *testing.T) {
	looptest.NeedTools(t, "mkfs.ext4", "blkid")
	dev := looptest.Attach(t, 64<<20)
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeClaim(t, "data", testClaim)
	env.writePV(t, "disk1", strings.Replace(testPV, "PATH", dev, 1)+"  mountOptions: [noatime]\n")

	pod := newPod("blk1", []corev1.Volume{claimVol("data", "data", false)},
		mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "data", MountPath: "/data"}))
	pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: ptr(int64(2345))}
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := env.m.VolumeDir("blk1", PluginLocalVolume, "disk1") // the PV's name, as the kubelet
	if got := statfsType(t, dir); got != unix.EXT4_SUPER_MAGIC {
		t.Fatalf("%s has file system magic %#x, want ext4 (%#x)", dir, got, unix.EXT4_SUPER_MAGIC)
	}
	mi, err := mountedDevice(dir)
	if err != nil || mi == nil {
		t.Fatalf("mount at %s: %v, %v", dir, mi, err)
	}
	if !strings.Contains(mi.Options, "noatime") {
		t.Errorf("mount options %q, want the PV's noatime", mi.Options)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || ms[0].HostPath != dir || ms[0].Readonly {
		t.Fatalf("Mounts = %v, want %s read-write", ms, dir)
	}
	var root unix.Stat_t
	if err := unix.Stat(dir, &root); err != nil {
		t.Fatal(err)
	}
	if root.Gid != 2345 || root.Mode&unix.S_ISGID == 0 {
		t.Errorf("the volume's root has gid %d mode %o, want the fsGroup 2345 and setgid", root.Gid, root.Mode)
	}
	mustWrite(t, filepath.Join(dir, "kept"), "written by pod 1")
	// A second Setup (every sync) leaves the mount as it is, and a volume
	// in use keeps its binding when the claim's file goes.
	claimFile := filepath.Join(env.source, sourceClaims, "default", "data"+manifestExt)
	claimYAML := mustRead(t, claimFile)
	if err := os.Remove(claimFile); err != nil {
		t.Fatal(err)
	}
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatalf("Setup of a mounted claim whose file is gone: %v", err)
	}
	mustWrite(t, claimFile, claimYAML)
	if n := len(mountsUnder(t, dir)); n != 1 {
		t.Errorf("%d mounts at %s after a second Setup, want 1", n, dir)
	}
	if err := env.m.Teardown(ctx, "blk1"); err != nil {
		t.Fatal(err)
	}
	if ms := mountsUnder(t, env.root); len(ms) != 0 {
		t.Fatalf("mounts after Teardown: %s", ms[0].Mountpoint)
	}

	// The next pod finds the file system, not a fresh one; read-only, it
	// cannot write.
	pod2 := newPod("blk2", []corev1.Volume{claimVol("data", "data", true)},
		mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "data", MountPath: "/data"}))
	pv2, err := env.m.Setup(ctx, pod2)
	if err != nil {
		t.Fatal(err)
	}
	dir2 := env.m.VolumeDir("blk2", PluginLocalVolume, "disk1")
	if got := mustRead(t, filepath.Join(dir2, "kept")); got != "written by pod 1" {
		t.Errorf("the second pod reads %q, want the first pod's file", got)
	}
	if err := os.WriteFile(filepath.Join(dir2, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write to the readOnly claim's volume: %v, want EROFS", err)
	}
	if ms, err := pv2.Mounts(&pod2.Spec.Containers[0]); err != nil || !ms[0].Readonly {
		t.Errorf("Mounts of the readOnly claim = %v, %v; want read-only", ms, err)
	}
	if err := env.m.Teardown(ctx, "blk2"); err != nil {
		t.Fatal(err)
	}
}

func TestLocalDirectoryAndHostPathVolumes(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	src := filepath.Join(env.allowed, "exported")
	mustWrite(t, filepath.Join(src, "f"), "from the node")
	env.writeClaim(t, "data", testClaim)
	env.writePV(t, "disk1", strings.Replace(testPV, "PATH", src, 1))
	env.writeClaim(t, "hp", strings.Replace(testClaim, "name: data", "name: hp", 1))
	env.writePV(t, "hostdir", strings.NewReplacer("name: disk1", "name: hostdir", "name: data}", "name: hp}",
		"local: {path: PATH}", "hostPath: {path: "+src+", type: Directory}").Replace(testPV))

	pod := newPod("dir1", []corev1.Volume{claimVol("data", "data", true), claimVol("hp", "hp", false)},
		mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "data", MountPath: "/data"}, corev1.VolumeMount{Name: "hp", MountPath: "/hp"}))
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	dir := env.m.VolumeDir("dir1", PluginLocalVolume, "disk1")
	if got := mustRead(t, filepath.Join(dir, "f")); got != "from the node" {
		t.Errorf("bind mount of the local directory reads %q", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "g"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("write through the readOnly claim: %v, want EROFS", err)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(env.m.PodDir("dir1"), volumesDirName, PluginHostPath, "hp"); ms[1].HostPath != want {
		t.Errorf("hostPath PV handed as %s, want the bind of %s at %s", ms[1].HostPath, src, want)
	}
	assertSameFile(t, ms[1].HostPath, src)
	if err := env.m.Teardown(ctx, "dir1"); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, filepath.Join(src, "f")); got != "from the node" {
		t.Errorf("the local directory after Teardown reads %q", got)
	}

	// A hostPath PV obeys the node's allowlist as an inline one does.
	env.writePV(t, "hostdir", strings.NewReplacer("name: disk1", "name: hostdir", "name: data}", "name: hp}",
		"local: {path: PATH}", "hostPath: {path: /etc}").Replace(testPV))
	_, err = env.m.Setup(ctx, newPod("dir2", []corev1.Volume{claimVol("hp", "hp", false)}))
	if !errors.Is(err, ErrHostPathNotAllowed) {
		t.Fatalf("Setup of a hostPath PV outside the allowlist: %v, want ErrHostPathNotAllowed", err)
	}
}

func TestRawBlockVolumeIsMappedAsADevice(t *testing.T) {
	dev := looptest.Attach(t, 16<<20)
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeClaim(t, "raw", strings.NewReplacer("name: data", "name: raw", "storageClassName: local", "storageClassName: local\n  volumeMode: Block").Replace(testClaim))
	env.writePV(t, "disk1", strings.NewReplacer("PATH", dev, "name: data}", "name: raw}", "storageClassName: local", "storageClassName: local\n  volumeMode: Block").Replace(testPV))

	c := corev1.Container{Name: "app", VolumeDevices: []corev1.VolumeDevice{{Name: "raw", DevicePath: "/dev/xvda"}}}
	pod := newPod("raw1", []corev1.Volume{claimVol("raw", "raw", false)}, c)
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	devs, err := pv.Devices(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(env.m.PodDir("raw1"), volumeDevicesDirName, PluginLocalVolume, "disk1")
	if len(devs) != 1 || devs[0].HostPath != want || devs[0].ContainerPath != "/dev/xvda" || devs[0].Permissions != "mrw" {
		t.Fatalf("Devices = %v, want %s at /dev/xvda mrw", devs, want)
	}
	var got, orig unix.Stat_t
	if err := unix.Stat(want, &got); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(dev, &orig); err != nil {
		t.Fatal(err)
	}
	if got.Mode&unix.S_IFMT != unix.S_IFBLK || got.Rdev != orig.Rdev {
		t.Errorf("%s is mode %o rdev %d, want the block device %s (rdev %d)", want, got.Mode, got.Rdev, dev, orig.Rdev)
	}
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	if n := len(mountsUnder(t, want)); n != 1 {
		t.Errorf("%d mounts at %s after a second Setup, want 1", n, want)
	}
	// The same volume in volumeMounts is refused: it has no file system.
	if _, err := pv.Mounts(&corev1.Container{Name: "b", VolumeMounts: []corev1.VolumeMount{{Name: "raw", MountPath: "/r"}}}); err == nil || !strings.Contains(err.Error(), "use it in volumeDevices") {
		t.Errorf("Mounts of a raw block volume: %v", err)
	}
	if err := env.m.Teardown(ctx, "raw1"); err != nil {
		t.Fatal(err)
	}
	if ms := mountsUnder(t, env.root); len(ms) != 0 {
		t.Fatalf("mounts after Teardown: %s", ms[0].Mountpoint)
	}
	if err := unix.Stat(dev, &orig); err != nil {
		t.Errorf("the device after Teardown: %v", err)
	}
}

func TestBlockVolumeErrorsNameTheProblem(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeClaim(t, "data", testClaim)
	for _, tc := range []struct{ path, want string }{
		{"/dev/nodeguard-no-such-disk", "spec.local.path /dev/nodeguard-no-such-disk: local volume path unusable: no such file or directory"},
		{"/dev/null", "spec.local.path /dev/null: local volume path unusable: not a block device nor a directory"},
	} {
		env.writePV(t, "disk1", strings.Replace(testPV, "PATH", tc.path, 1))
		_, err := env.m.Setup(ctx, newPod("bad", []corev1.Volume{claimVol("data", "data", false)}))
		if !errors.Is(err, ErrLocalPath) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Setup with local path %s: %v, want %q", tc.path, err, tc.want)
		}
	}
	// A Filesystem claim in volumeDevices is refused by Devices.
	src := filepath.Join(env.allowed, "d")
	mustMkdir(t, src)
	env.writePV(t, "disk1", strings.Replace(testPV, "PATH", src, 1))
	c := corev1.Container{Name: "app", VolumeDevices: []corev1.VolumeDevice{{Name: "data", DevicePath: "/dev/x"}}}
	pod := newPod("fsdev", []corev1.Volume{claimVol("data", "data", false)}, c)
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pv.Devices(&pod.Spec.Containers[0]); err == nil || !strings.Contains(err.Error(), "volumeMode Filesystem") {
		t.Errorf("Devices of a Filesystem volume: %v", err)
	}
	for _, uid := range []types.UID{"bad", "fsdev"} {
		if err := env.m.Teardown(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
}

// A Volumes killed without tearing down (a SIGKILLed nodeguard) leaves its
// mounts; the next one's GC unmounts those of pods nobody wants, and only
// beneath its root.
func TestGCUnmountsWhatAKilledManagerLeft(t *testing.T) {
	looptest.NeedTools(t, "mkfs.ext4", "blkid")
	dev := looptest.Attach(t, 64<<20)
	env := newTestEnv(t)
	ctx := testCtx(t)
	env.writeClaim(t, "data", testClaim)
	env.writePV(t, "disk1", strings.Replace(testPV, "PATH", dev, 1))
	pod := newPod("killed", []corev1.Volume{claimVol("data", "data", false)})
	if _, err := env.m.Setup(ctx, pod); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(env.m.VolumeDir("killed", PluginLocalVolume, "disk1"), "f"), "data")
	// A mount of the same device outside RootDir is not the agent's.
	elsewhere := t.TempDir()
	if err := unix.Mount(dev, elsewhere, "ext4", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(elsewhere, 0) })

	next, err := New(Config{RootDir: env.root, SourceDir: env.source, NodeMemory: 64 << 20, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	removed, err := next.GC(ctx, map[types.UID]bool{})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != "killed" {
		t.Errorf("GC removed %v, want [killed]", removed)
	}
	if ms := mountsUnder(t, env.root); len(ms) != 0 {
		t.Fatalf("mounts beneath the root after GC: %s", ms[0].Mountpoint)
	}
	if got := mustRead(t, filepath.Join(elsewhere, "f")); got != "data" {
		t.Errorf("the mount outside the root reads %q, want the pod's file", got)
	}
}

func TestPVSourcesWithoutAMounterAreRefusedByName(t *testing.T) {
	env := newEnv(t)
	ctx := testCtx(t)
	env.writeClaim(t, "data", testClaim)
	env.writePV(t, "disk1", strings.Replace(testPV, "local: {path: PATH}", "iscsi: {targetPortal: 10.0.0.1, iqn: iqn.x, lun: 0}", 1))
	_, err := env.m.Setup(ctx, newPod("iscsi", []corev1.Volume{claimVol("data", "data", false)}))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "its source (iscsi) has no mounter in nodeguard") {
		t.Errorf("Setup of an iscsi PV: %v", err)
	}

	block := func(s string) string {
		return strings.Replace(s, "storageClassName: local", "storageClassName: local\n  volumeMode: Block", 1)
	}
	env.writeClaim(t, "data", block(testClaim))
	env.writePV(t, "disk1", block(strings.Replace(testPV, "local: {path: PATH}", "hostPath: {path: /dev/null}", 1)))
	_, err = env.m.Setup(ctx, newPod("hpblock", []corev1.Volume{claimVol("data", "data", false)}))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "volumeMode Block needs a local volume") {
		t.Errorf("Setup of a hostPath PV in Block mode: %v", err)
	}
}

// A subPath of a claim's volume is resolved beneath the volume's directory,
// which is named after the PersistentVolume (volumes/<plugin>/<pv name>),
// not after the pod's volume: MySQL's StatefulSet of the documentation
// mounts subPath mysql of its claim "data" bound to a volume of another
// name.
func TestSubPathOfAClaimIsBeneathItsVolume(t *testing.T) {
	env := newTestEnv(t)
	ctx := testCtx(t)
	src := filepath.Join(env.allowed, "exported")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	env.writeClaim(t, "data", testClaim)
	env.writePV(t, "disk1", strings.Replace(testPV, "PATH", src, 1))

	pod := newPod("sub1", []corev1.Volume{claimVol("data", "data", false)},
		mountAll(corev1.Container{Name: "app"}, corev1.VolumeMount{Name: "data", MountPath: "/var/lib/mysql", SubPath: "mysql"}))
	pv, err := env.m.Setup(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := pv.Mounts(&pod.Spec.Containers[0])
	if err != nil {
		t.Fatalf("Mounts with a subPath of a claim: %v", err)
	}
	if err := os.WriteFile(filepath.Join(ms[0].HostPath, "ibdata1"), []byte("rows"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The subPath was made in the volume, and is the node's directory.
	if got := mustRead(t, filepath.Join(src, "mysql", "ibdata1")); got != "rows" {
		t.Errorf("the subPath's file in the local directory reads %q", got)
	}
	if err := env.m.Teardown(ctx, "sub1"); err != nil {
		t.Fatal(err)
	}
}
