package lifecycle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/logs"
)

// chattyLines is how many numbered lines the chatty container writes, in
// batches of 100 with a pause between (so that the rotator, every 100 ms,
// sees the log grow past its limit many times).
const chattyLines = 4000

const chattyPod = `
apiVersion: v1
kind: Pod
metadata: {name: chatty}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: BUSYBOX
    env: [{name: PAD, value: "PADDING_PADDING_PADDING_PADDING_PADDING_PADDING_PADDING_PADDING_PADDING_PADDING"}]
    command: [sh, -c, 'i=0; while [ $i -lt LINES ]; do printf "line %06d %s\n" $i "$PAD"; i=$((i+1)); [ $((i%100)) = 0 ] && sleep 0.1; done; echo done; exec sleep 3600']
`

// logFiles lists a live log path and its rotated files with their sizes.
func logFiles(t *testing.T, live string) map[string]int64 {
	t.Helper()
	m, err := filepath.Glob(live + "*")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, p := range m {
		if fi, err := os.Stat(p); err == nil {
			out[filepath.Base(p)] = fi.Size()
		}
	}
	return out
}

func total(files map[string]int64) int64 {
	var n int64
	for _, s := range files {
		n += s
	}
	return n
}

// TestContainerLogRotationAgainstARealContainerd: a chatty container's log
// is rotated as the kubelet's is: never more than MaxFiles files, the live
// file back below MaxSize once the container is quiet, containerd writing
// to the new file after ReopenContainerLog, and the oldest lines dropped;
// `pod logs` reads the kept lines across the rotated files in order.
func TestContainerLogRotationAgainstARealContainerd(t *testing.T) {
	r := newRig(t)
	policy := logs.Policy{MaxSize: 32 << 10, MaxFiles: 4}
	r.containerLogs, r.logInterval = policy, 100*time.Millisecond
	m, _ := r.manager(t)
	ctx := context.Background()
	yaml := strings.Replace(chattyPod, "LINES", fmt.Sprint(chattyLines), 1)
	if _, err := m.Apply(ctx, r.pods(t, yaml), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	p := waitPod(t, m, "chatty", "ran", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != ""
	})
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	s, err := r.client.ContainerStatus(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	live := s.GetLogPath()

	// Until the container is done and quiet, the files are sampled: they
	// never number more than MaxFiles.
	deadline := time.Now().Add(60 * time.Second)
	var maxFiles int
	var maxTotal int64
	for {
		files := logFiles(t, live)
		maxFiles, maxTotal = max(maxFiles, len(files)), max(maxTotal, total(files))
		if len(files) > policy.MaxFiles {
			t.Fatalf("%d log files, want at most containerLogMaxFiles %d: %v", len(files), policy.MaxFiles, files)
		}
		size, ok := files[filepath.Base(live)]
		if ok && size < policy.MaxSize && logsEndWithDone(t, m) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the live log is %d bytes (containerLogMaxSize %d) and the container's last line not yet seen: files %v", size, policy.MaxSize, files)
		}
		time.Sleep(20 * time.Millisecond)
	}
	files := logFiles(t, live)
	t.Logf("files at the end %v; at most %d files and %d bytes on disk during the run", files, maxFiles, maxTotal)
	// Lines in two files or more: containerd wrote to the file its
	// reopen made (the rotator never writes a log).
	nonEmpty, gzipped := 0, 0
	for name, size := range files {
		if size > 0 {
			nonEmpty++
		}
		if strings.HasSuffix(name, ".gz") {
			gzipped++
		}
	}
	if gzipped == 0 {
		t.Errorf("no rotated file was compressed: %v", files)
	}
	if nonEmpty < 2 {
		t.Fatalf("lines in %d file(s), want the rotated ones and the file containerd reopened: %v", nonEmpty, files)
	}

	// pod logs: the kept lines, consecutive (in order across the rotated
	// files, none lost at a rotation), the oldest dropped, then "done".
	var out bytes.Buffer
	if err := m.Logs(ctx, "default", "chatty", lifecycle.LogOptions{Tail: -1}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if lines[len(lines)-1] != "done" {
		t.Fatalf("the last line is %q, want done", lines[len(lines)-1])
	}
	first := -1
	for i, l := range lines[:len(lines)-1] {
		var n int
		if _, err := fmt.Sscanf(l, "line %d", &n); err != nil {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
		if first < 0 {
			first = n
		} else if n != first+i {
			t.Fatalf("line %d is %q, want line %06d: lines lost or out of order across the rotated files", i, l, first+i)
		}
	}
	if first <= 0 {
		t.Errorf("the log starts at line %d: the oldest lines were never dropped", first)
	}
	if last := first + len(lines) - 2; last != chattyLines-1 {
		t.Errorf("the log ends at line %d, want %d", last, chattyLines-1)
	}
	if written := int64(chattyLines) * int64(len(lines[0])+1); int64(out.Len()) >= written {
		t.Errorf("kept %d bytes of the %d written: nothing was dropped", out.Len(), written)
	}

	// The tail and timestamps read across the files too.
	out.Reset()
	if err := m.Logs(ctx, "default", "chatty", lifecycle.LogOptions{Tail: 2, Timestamps: true}, &out); err != nil {
		t.Fatal(err)
	}
	if tl := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n"); len(tl) != 2 || !strings.HasSuffix(tl[1], " done") ||
		!strings.Contains(tl[0], fmt.Sprintf(" line %06d ", chattyLines-1)) {
		t.Errorf("tail 2 with timestamps: %q", out.String())
	}
}

// logsEndWithDone says whether the container's log (across its files)
// ends with its last line.
func logsEndWithDone(t *testing.T, m *lifecycle.Manager) bool {
	t.Helper()
	var b bytes.Buffer
	if err := m.Logs(context.Background(), "default", "chatty", lifecycle.LogOptions{Tail: 1}, &b); err != nil {
		t.Fatal(err)
	}
	return b.String() == "done\n"
}

const followPod = `
apiVersion: v1
kind: Pod
metadata: {name: follow}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: BUSYBOX
    env: [{name: PAD, value: "PADDING_PADDING_PADDING_PADDING_PADDING_PADDING_PADDING_PADDING_PADDING_PADDING"}]
    command: [sh, -c, 'sleep 0.5; i=0; while [ $i -lt 1500 ]; do printf "line %06d %s\n" $i "$PAD"; i=$((i+1)); [ $((i%100)) = 0 ] && sleep 0.1; done']
`

// TestPodLogsFollowAcrossRotationsAgainstARealContainerd: a follower
// started with the container sees every line once, in order, while the log
// is rotated under it, and returns when the container exits.
func TestPodLogsFollowAcrossRotationsAgainstARealContainerd(t *testing.T) {
	r := newRig(t)
	r.containerLogs, r.logInterval = logs.Policy{MaxSize: 32 << 10, MaxFiles: 2}, 100*time.Millisecond
	m, _ := r.manager(t)
	if _, err := m.Apply(context.Background(), r.pods(t, followPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "follow", "started", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].ContainerID != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := m.Logs(ctx, "default", "follow", lifecycle.LogOptions{Tail: -1, Follow: true}, &out); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("the follow did not end with the container: %v", ctx.Err())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for i, l := range lines {
		if want := fmt.Sprintf("line %06d ", i); !strings.HasPrefix(l, want) {
			t.Fatalf("line %d is %q, want it to start with %q (%d lines followed)", i, truncated(l), want, len(lines))
		}
	}
	if len(lines) != 1500 {
		t.Errorf("%d lines followed, want 1500", len(lines))
	}
	// The log was rotated meanwhile: its first lines are gone from disk.
	var all bytes.Buffer
	if err := m.Logs(context.Background(), "default", "follow", lifecycle.LogOptions{Tail: -1}, &all); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(all.String(), "line 000000 ") {
		t.Errorf("the log kept its first line: no rotation happened under the follower")
	}
}

func truncated(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

const restartingPod = `
apiVersion: v1
kind: Pod
metadata: {name: restarting}
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: BUSYBOX
    command: [sh, -c, 'echo "instance $(cat /proc/sys/kernel/random/uuid)"; sleep 0.2; exit 1']
`

// TestPodLogsPreviousAgainstARealContainerd: --previous is the instance
// before the newest, --since excludes what is older, and a container that
// never restarted has no previous instance.
func TestPodLogsPreviousAgainstARealContainerd(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, restartingPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "restarting", "restarted twice", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 2
	})
	read := func(opts lifecycle.LogOptions) string {
		t.Helper()
		var b bytes.Buffer
		if err := m.Logs(ctx, "default", "restarting", opts, &b); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	// Read previous first: a restart between the two reads makes the
	// newest newer still, never the previous one.
	// A newest instance that just started may not have written yet.
	var prev, cur string
	for deadline := time.Now().Add(10 * time.Second); cur == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		prev, cur = read(lifecycle.LogOptions{Previous: true, Tail: -1}), read(lifecycle.LogOptions{Tail: -1})
	}
	if !strings.HasPrefix(prev, "instance ") || !strings.HasPrefix(cur, "instance ") || prev == cur {
		t.Fatalf("previous %q, newest %q: want one line each, of two instances", prev, cur)
	}
	if got := read(lifecycle.LogOptions{Tail: -1, Since: time.Now().Add(time.Hour)}); got != "" {
		t.Errorf("since an hour from now: %q, want nothing", got)
	}
}

func TestPodLogsPreviousOfAFirstInstanceIsNotFound(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	ctx := context.Background()
	if _, err := m.Apply(ctx, r.pods(t, webPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "web", "ran", running)
	err := m.Logs(ctx, "default", "web", lifecycle.LogOptions{Container: "main", Previous: true, Tail: -1}, &bytes.Buffer{})
	if !errors.Is(err, lifecycle.ErrContainerNotFound) || !strings.Contains(err.Error(), "previous terminated container") {
		t.Errorf("err = %v, want ErrContainerNotFound for the previous terminated container", err)
	}
}

// TestRemovedAttemptsLeaveNoLogs: the attempts of a crash-looping
// container that are removed (all but the newest two) take their log
// files with them, as the kubelet's removeContainerLog does; containerd
// leaves them.
func TestRemovedAttemptsLeaveNoLogs(t *testing.T) {
	r := newRig(t)
	m, _ := r.manager(t)
	if _, err := m.Apply(context.Background(), r.pods(t, restartingPod), lifecycle.SourceAPI); err != nil {
		t.Fatal(err)
	}
	waitPod(t, m, "restarting", "restarted three times", func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 3
	})
	p := waitPod(t, m, "restarting", "restarted three times", func(*corev1.Pod) bool { return true })
	dir := filepath.Join(r.root, "logs", "default_restarting_"+string(p.UID))
	newest := filepath.Join(dir, cri.ContainerLogPath("app", uint32(p.Status.ContainerStatuses[0].RestartCount)))
	if _, err := os.Stat(newest); err != nil {
		t.Fatalf("the newest attempt's log: %v", err)
	}
	first := filepath.Join(dir, cri.ContainerLogPath("app", 0))
	deadline := time.Now().Add(20 * time.Second)
	for {
		left, err := filepath.Glob(first + "*")
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			all, _ := filepath.Glob(filepath.Join(dir, "app", "*"))
			t.Fatalf("the first attempt's log is left after it was removed: %v (all: %v)", left, all)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
