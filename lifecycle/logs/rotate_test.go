package logs

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

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime has one running container whose live log is path; a reopen
// creates a new empty live file, as containerd does.
type fakeRuntime struct {
	path      string
	reopens   int
	reopenErr error
	// id is the running container's ID ("c1" when empty); statuses
	// counts ContainerStatus calls by ID.
	id       string
	statuses map[string]int
}

func (f *fakeRuntime) running() string {
	if f.id == "" {
		return "c1"
	}
	return f.id
}

func (f *fakeRuntime) ListContainers(context.Context, string, map[string]string) ([]*runtimeapi.Container, error) {
	return []*runtimeapi.Container{
		{Id: f.running(), State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		{Id: "exited", State: runtimeapi.ContainerState_CONTAINER_EXITED},
	}, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, id string) (*runtimeapi.ContainerStatus, error) {
	if f.statuses == nil {
		f.statuses = map[string]int{}
	}
	f.statuses[id]++
	if id != f.running() {
		return nil, fmt.Errorf("ContainerStatus of %s: only %s is running", id, f.running())
	}
	return &runtimeapi.ContainerStatus{Id: id, State: runtimeapi.ContainerState_CONTAINER_RUNNING, LogPath: f.path}, nil
}

// TestRotatorAsksEachContainersLogPathOnce: the runtime is asked for a
// running container's log path at the first pass that sees it, not at
// every pass; a container that replaced it is asked for in its turn, and
// the one gone is forgotten.
func TestRotatorAsksEachContainersLogPathOnce(t *testing.T) {
	live := filepath.Join(t.TempDir(), "0.log")
	rt := &fakeRuntime{path: live}
	r, err := NewRotator(RotatorConfig{Runtime: rt, Policy: Policy{MaxSize: 100, MaxFiles: 4}})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, live, rec(0, "stdout", "F", strings.Repeat("x", 200)))
	for range 3 {
		if err := r.RotateAll(t.Context()); err != nil {
			t.Fatal(err)
		}
		writeFile(t, live, rec(0, "stdout", "F", strings.Repeat("x", 200)))
	}
	if rt.statuses["c1"] != 1 || rt.reopens != 3 {
		t.Fatalf("three passes: ContainerStatus of c1 %d times, %d reopens; want 1 and 3 (a rotation each pass)", rt.statuses["c1"], rt.reopens)
	}
	rt.id = "c2"
	for range 2 {
		if err := r.RotateAll(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if rt.statuses["c2"] != 1 || rt.statuses["c1"] != 1 {
		t.Fatalf("after c1 was replaced by c2: ContainerStatus %v, want c1 and c2 once each", rt.statuses)
	}
	if _, ok := r.paths["c1"]; ok || len(r.paths) != 1 {
		t.Fatalf("paths remembered %v, want c2's alone", r.paths)
	}
	if rt.statuses["exited"] != 0 {
		t.Fatalf("an exited container's status was asked %d times", rt.statuses["exited"])
	}
}

func (f *fakeRuntime) ReopenContainerLog(_ context.Context, id string) error {
	f.reopens++
	if f.reopenErr != nil {
		return f.reopenErr
	}
	return os.WriteFile(f.path, nil, 0o640)
}

// TestRotatorBoundsTheFiles drives rotations with a fake clock and checks,
// after each pass, the kubelet's invariants: at most MaxFiles files, the
// older rotated ones gzipped, the lines kept in order, and a file below
// MaxSize left alone.
func TestRotatorBoundsTheFiles(t *testing.T) {
	live := filepath.Join(t.TempDir(), "0.log")
	rt := &fakeRuntime{path: live}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	r, err := NewRotator(RotatorConfig{Runtime: rt, Policy: Policy{MaxSize: 100, MaxFiles: 4}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, live, rec(0, "stdout", "F", "small"))
	if err := r.RotateAll(t.Context()); err != nil || rt.reopens != 0 {
		t.Fatalf("a log below MaxSize: RotateAll = %v after %d reopens, want no rotation", err, rt.reopens)
	}
	var wrote []string
	for pass := range 6 {
		// Each pass the container wrote more than MaxSize.
		f, err := os.OpenFile(live, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			line := fmt.Sprintf("pass %d line %d %s", pass, i, strings.Repeat("x", 40))
			wrote = append(wrote, line)
			f.WriteString(rec(pass, "stdout", "F", line))
		}
		f.Close()
		// Two passes within the same second get distinct names.
		now = now.Add(time.Duration(pass%2) * time.Second)
		if err := r.RotateAll(t.Context()); err != nil {
			t.Fatalf("pass %d: %v", pass, err)
		}
		files, err := rotated(live)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(files) + 1; n > 4 {
			t.Fatalf("pass %d: %d files, want at most MaxFiles 4: %v", pass, n, files)
		}
		// A rotation compresses what is older than the newest rotated
		// file before it renames the live one: only the two newest can
		// be plain, as the kubelet leaves them.
		for i, f := range files {
			if want := i < len(files)-2; f.compressed != want {
				t.Errorf("pass %d: %s compressed %v, want %v (all but the two newest)", pass, f.path, f.compressed, want)
			}
		}
		if fi, err := os.Stat(live); err != nil || fi.Size() != 0 {
			t.Fatalf("pass %d: live file after the reopen: %v, %v", pass, fi, err)
		}
	}
	if files, _ := rotated(live); len(files) != 3 || !files[0].compressed {
		t.Errorf("rotated files %v, want 3, the oldest compressed", files)
	}
	if rt.reopens != 6 {
		t.Errorf("%d reopens, want one per pass (6)", rt.reopens)
	}
	// What is kept is the last three passes' lines, in order.
	var b bytes.Buffer
	if err := Read(t.Context(), live, Options{Tail: -1}, &b); err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(wrote[len(wrote)-9:], "\n") + "\n"; b.String() != want {
		t.Errorf("kept\n%s\nwant\n%s", b.String(), want)
	}
	if tmps, _ := tmpFiles(live); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
}

func TestRotatorRenamesBackWhenTheReopenFails(t *testing.T) {
	live := filepath.Join(t.TempDir(), "0.log")
	rt := &fakeRuntime{path: live, reopenErr: errors.New("container is not running")}
	r, err := NewRotator(RotatorConfig{Runtime: rt, Policy: Policy{MaxSize: 10, MaxFiles: 2}})
	if err != nil {
		t.Fatal(err)
	}
	content := rec(0, "stdout", "F", "more than ten bytes")
	writeFile(t, live, content)
	err = r.Rotate(t.Context(), "c1", live)
	if err == nil || !strings.Contains(err.Error(), "renamed back") {
		t.Fatalf("Rotate = %v, want an error saying it renamed back", err)
	}
	if b, err := os.ReadFile(live); err != nil || string(b) != content {
		t.Errorf("live file %q, %v: want the original content back", b, err)
	}
	if files, _ := rotated(live); len(files) != 0 {
		t.Errorf("rotated files left: %v", files)
	}
}

func TestRotatorReopensAMissingLiveFile(t *testing.T) {
	live := filepath.Join(t.TempDir(), "0.log")
	rt := &fakeRuntime{path: live}
	r, err := NewRotator(RotatorConfig{Runtime: rt, Policy: Policy{MaxSize: 10, MaxFiles: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Rotate(t.Context(), "c1", live); err != nil || rt.reopens != 1 {
		t.Fatalf("Rotate = %v with %d reopens", err, rt.reopens)
	}
	if _, err := os.Stat(live); err != nil {
		t.Error(err)
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name   string
		policy Policy
		want   string // "" valid
	}{
		{"the kubelet's defaults are valid", Policy{MaxSize: DefaultMaxSize, MaxFiles: DefaultMaxFiles}, ""},
		{"two files are the minimum", Policy{MaxSize: 1, MaxFiles: 2}, ""},
		{"one file is refused naming containerLogMaxFiles", Policy{MaxSize: 1, MaxFiles: 1}, "containerLogMaxFiles 1"},
		{"a zero size is refused naming containerLogMaxSize", Policy{MaxFiles: 5}, "containerLogMaxSize 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (!errors.Is(err, ErrInvalidPolicy) || !strings.Contains(fmt.Sprint(err), tt.want)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestClean(t *testing.T) {
	live := rotatedLog(t)
	if err := Clean(live); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(live + "*")
	if len(left) != 1 || left[0] != live+".unrelated" {
		t.Errorf("left %v, want only the unrelated file", left)
	}
}
