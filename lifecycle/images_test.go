package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
)

// pullRuntime answers EnsureImage with err and counts the calls; the rest
// of Runtime is not used by ensureImage.
type pullRuntime struct {
	Runtime
	err   error
	calls int
}

func (r *pullRuntime) EnsureImage(context.Context, string, corev1.PullPolicy, *runtimeapi.PodSandboxConfig) (string, error) {
	r.calls++
	if r.err != nil {
		return "", r.err
	}
	return "sha256:ok", nil
}

// TestEnsureImageBacksOffFailedPulls: a failed pull is ErrImagePull, the
// syncs within its back-off are ImagePullBackOff without asking the
// runtime, and the back-off doubles up to BackoffMax, as the kubelet's.
func TestEnsureImageBacksOffFailedPulls(t *testing.T) {
	now := time.Unix(1000, 0)
	rt := &pullRuntime{err: fmt.Errorf("%w: registry unreachable", cri.ErrImagePull)}
	m := &Manager{cfg: Config{Runtime: rt, BackoffInitial: 10 * time.Second, BackoffMax: 40 * time.Second},
		log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: func() time.Time { return now }}
	st := &podState{pod: &corev1.Pod{}}
	c := &corev1.Container{Name: "app", Image: "registry.test/app:1", ImagePullPolicy: corev1.PullIfNotPresent}

	reason := func(err error) string {
		t.Helper()
		ie, ok := errors.AsType[*imageError](err)
		if !ok {
			t.Fatalf("err = %v, want an *imageError", err)
		}
		return ie.reason
	}
	steps := []struct {
		name       string
		advance    time.Duration
		wantReason string
		wantCalls  int
	}{
		{"the first failed pull is ErrImagePull", 0, ReasonErrImagePull, 1},
		{"a sync within the first back-off (10s) does not pull", 9 * time.Second, ReasonImagePullBackOff, 1},
		{"after it the pull is tried again", 1 * time.Second, ReasonErrImagePull, 2},
		{"the second back-off is 20s", 19 * time.Second, ReasonImagePullBackOff, 2},
		{"after 20s it is tried again", 1 * time.Second, ReasonErrImagePull, 3},
		{"the third back-off is 40s", 39 * time.Second, ReasonImagePullBackOff, 3},
		{"after 40s it is tried again", 1 * time.Second, ReasonErrImagePull, 4},
		{"the back-off stays at BackoffMax (40s)", 39 * time.Second, ReasonImagePullBackOff, 4},
		{"and after it the pull is tried again", 1 * time.Second, ReasonErrImagePull, 5},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		_, err := m.ensureImage(t.Context(), st, c)
		if got := reason(err); got != s.wantReason || rt.calls != s.wantCalls {
			t.Fatalf("%s: reason %s after %d runtime calls, want %s after %d (err %v)", s.name, got, rt.calls, s.wantReason, s.wantCalls, err)
		}
	}
	t.Run("a successful pull ends the back-off", func(t *testing.T) {
		now = now.Add(time.Minute)
		rt.err = nil
		if id, err := m.ensureImage(t.Context(), st, c); err != nil || id != "sha256:ok" {
			t.Fatalf("ensureImage = %q, %v", id, err)
		}
		if _, ok := st.pulls[c.Name]; ok {
			t.Errorf("the back-off is kept after a successful pull: %+v", st.pulls[c.Name])
		}
	})
	t.Run("a missing image under Never is ErrImageNeverPull, without back-off", func(t *testing.T) {
		rt.err = fmt.Errorf("container image %q is not present with pull policy of Never: %w", c.Image, cri.ErrImageNeverPull)
		for range 2 {
			_, err := m.ensureImage(t.Context(), st, c)
			if got := reason(err); got != ReasonErrImageNeverPull {
				t.Fatalf("reason %s, want %s", got, ReasonErrImageNeverPull)
			}
		}
		if _, ok := st.pulls[c.Name]; ok {
			t.Error("a Never image that is missing got a pull back-off")
		}
	})
}
