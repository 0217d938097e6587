package lifecycle_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/lifecycle"
)

const gcVolumePod = `
apiVersion: v1
kind: Pod
metadata: {name: gcvol}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: BUSYBOX
    command: [sh, -c, "echo kept > /data/f; exec sleep 3600"]
    volumeMounts:
    - {name: data, mountPath: /data}
  volumes:
  - {name: data, emptyDir: {}}
`

// A nodeguard killed with a pod running, the pod deleted before the next
// one starts: the next one's volume collection must leave the pod's
// volumes to the teardown of its orphaned sandbox, which removes them once
// the containers are gone (as the kubelet unmounts only the volumes of
// pods whose containers have terminated). It did not: the collection's
// first pass removed the emptyDir, and unmounted an nfs volume, under
// the running container.
func TestVolumeGCLeavesTheVolumesOfARunningOrphan(t *testing.T) {
	r := newRig(t)
	m, stop := r.manager(t)
	ctx := t.Context()
	pods := r.pods(t, gcVolumePod)
	if _, err := m.Apply(ctx, pods, lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "gcvol", "ran", running)
	dir := filepath.Join(r.root, "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", "data")
	file := filepath.Join(dir, "f")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(file); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the container never wrote %s", file)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	r.forgetPersisted(t, p)

	// The next nodeguard finds the orphaned sandbox and holds in its
	// container's stop: the sandbox, and its container, still run.
	var held *heldStops
	r.runtime = func(rt lifecycle.Runtime) lifecycle.Runtime { held = holdStops(rt); return held }
	m2, _ := r.manager(t)
	t.Cleanup(held.let) // before the manager stops
	held.waitEntered(t, 1)
	m2.GC(ctx)
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("volume collection removed the volume of a pod whose container still runs: %v", err)
	}

	held.let()
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, err := os.Lstat(filepath.Join(r.root, "pods", string(p.UID)))
		if os.IsNotExist(err) && r.sandboxes(t) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the orphan's teardown, its pod directory (%v) or a sandbox (%d) is left", err, r.sandboxes(t))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
