package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/internal/syncbuf"
	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/mounts"
)

// pullRuntime resolves every image as one to pull (or with resolveErr),
// answers PullImage with err unless the credential's user is in accept,
// and records the pulls' users ("" for anonymous); the rest of Runtime is
// not used by ensureImage.
type pullRuntime struct {
	Runtime
	resolveErr error
	err        error
	accept     map[string]bool
	calls      int
	users      []string
}

func (r *pullRuntime) ResolveImage(context.Context, string, corev1.PullPolicy) (string, bool, error) {
	if r.resolveErr != nil {
		return "", false, r.resolveErr
	}
	return "", true, nil
}

func (r *pullRuntime) PullImage(_ context.Context, _ string, auth *runtimeapi.AuthConfig, _ *runtimeapi.PodSandboxConfig) (string, error) {
	r.calls++
	r.users = append(r.users, auth.GetUsername())
	if r.err != nil && !r.accept[auth.GetUsername()] {
		return "", r.err
	}
	return "sha256:ok", nil
}

func (r *pullRuntime) ImageStatus(context.Context, string) (*runtimeapi.Image, error) {
	return &runtimeapi.Image{Id: "sha256:ok", Size: 1234}, nil
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
		rt.resolveErr = fmt.Errorf("container image %q is not present with pull policy of Never: %w", c.Image, cri.ErrImageNeverPull)
		for range 2 {
			_, err := m.ensureImage(t.Context(), st, c)
			if got := reason(err); got != ReasonErrImageNeverPull {
				t.Fatalf("reason %s, want %s", got, ReasonErrImageNeverPull)
			}
		}
		if b := st.pulls[c.Name]; b != nil && !b.until.IsZero() {
			t.Errorf("a Never image that is missing got a pull back-off: %+v", b)
		}
	})
}

// TestPullTriesThePodsSecretsThenTheNodesFile: as the kubelet's puller,
// every matching credential is tried in order (the pod's imagePullSecrets
// in their order, then the node's file) until one pull succeeds; a
// missing or malformed Secret is skipped; with none matching the pull is
// anonymous; when all fail, the error names each credential's source.
func TestPullTriesThePodsSecretsThenTheNodesFile(t *testing.T) {
	src := t.TempDir()
	secret := func(name, key, content string) {
		dir := filepath.Join(src, "secrets", "default", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, key), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	secret("first", ".dockerconfigjson", `{"auths":{"registry.test":{"username":"first","password":"x"}}}`)
	secret("second", ".dockercfg", `{"registry.test/app":{"username":"second","password":"x"}}`)
	secret("broken", ".dockerconfigjson", `{"auths":`)
	secret("elsewhere", ".dockerconfigjson", `{"auths":{"other.test":{"username":"elsewhere","password":"x"}}}`)
	nodeFile := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(nodeFile, []byte(`{"auths":{"registry.test":{"username":"node","password":"x"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	vols, err := mounts.New(mounts.Config{RootDir: t.TempDir(), SourceDir: src, NodeMemory: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	refs := func(names ...string) (out []corev1.LocalObjectReference) {
		for _, n := range names {
			out = append(out, corev1.LocalObjectReference{Name: n})
		}
		return out
	}
	c := &corev1.Container{Name: "app", Image: "registry.test/app:1", ImagePullPolicy: corev1.PullAlways}
	for _, tt := range []struct {
		name    string
		secrets []corev1.LocalObjectReference
		node    string
		accept  string
		want    []string
		wantErr []string
	}{
		{"the first Secret that works is the last tried", refs("first", "second"), nodeFile, "first", []string{"first"}, nil},
		{"then the next matching Secret", refs("first", "second"), nodeFile, "second", []string{"first", "second"}, nil},
		{"the node's file comes after the pod's Secrets", refs("first", "second"), nodeFile, "node", []string{"first", "second", "node"}, nil},
		{"missing, malformed and unmatched Secrets are skipped", refs("absent", "broken", "elsewhere"), nodeFile, "node", []string{"node"}, nil},
		{"with no credential matching the pull is anonymous", refs("elsewhere"), "", "", []string{""}, nil},
		{"every credential failing is ErrImagePull naming each source", refs("second"), nodeFile, "nobody", []string{"second", "node"},
			[]string{"with credentials for registry.test/app from secret default/second", "with credentials for registry.test from node file " + nodeFile, "401 Unauthorized"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rt := &pullRuntime{err: errors.New("401 Unauthorized"), accept: map[string]bool{tt.accept: true}}
			m := &Manager{cfg: Config{Runtime: rt, Volumes: vols, ImageCredentialsFile: tt.node, BackoffInitial: time.Second, BackoffMax: time.Second},
				log: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now}
			st := &podState{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
				Spec: corev1.PodSpec{ImagePullSecrets: tt.secrets}}}
			id, err := m.ensureImage(t.Context(), st, c)
			if !slices.Equal(rt.users, tt.want) {
				t.Errorf("pulled as %q, want %q", rt.users, tt.want)
			}
			if tt.wantErr == nil {
				if err != nil || id != "sha256:ok" {
					t.Fatalf("ensureImage = %q, %v", id, err)
				}
				return
			}
			ie, ok := errors.AsType[*imageError](err)
			if !ok || ie.reason != ReasonErrImagePull || !errors.Is(err, cri.ErrImagePull) {
				t.Fatalf("err = %v, want ErrImagePull", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// blockingPull is a PullImage that blocks until release is closed.
type blockingPull struct {
	pullRuntime
	release chan struct{}
}

func (r *blockingPull) PullImage(ctx context.Context, ref string, auth *runtimeapi.AuthConfig, sc *runtimeapi.PodSandboxConfig) (string, error) {
	select {
	case <-r.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return r.pullRuntime.PullImage(ctx, ref, auth, sc)
}

// TestAPullInFlightIsLogged: containerd's CRI streams no progress, so a
// pull that lasts is logged with its elapsed time until it is done, then
// with its size and duration, and the kubelet's Pulling and Pulled events.
func TestAPullInFlightIsLogged(t *testing.T) {
	var logs syncbuf.Buffer
	rt := &blockingPull{release: make(chan struct{})}
	m := &Manager{cfg: Config{Runtime: rt, BackoffInitial: time.Second, BackoffMax: time.Second},
		log: slog.New(slog.NewTextHandler(&logs, nil)), now: time.Now, pullProgress: time.Millisecond}
	st := &podState{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}}
	c := &corev1.Container{Name: "app", Image: "registry.test/app:1", ImagePullPolicy: corev1.PullAlways}
	done := make(chan error, 1)
	go func() {
		_, err := m.ensureImage(t.Context(), st, c)
		done <- err
	}()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(logs.String(), `msg="image pull in progress" pod=default/p container=app image=registry.test/app:1 elapsed_seconds=`) {
		select {
		case <-deadline:
			t.Fatalf("no progress line while the pull is in flight; log:\n%s", logs.String())
		case <-time.After(time.Millisecond):
		}
	}
	close(rt.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`msg="pulling image" pod=default/p container=app image=registry.test/app:1 pull_policy=Always credentials=0`,
		`msg="pod event" pod=default/p container=app type=Normal reason=Pulling message="Pulling image \"registry.test/app:1\""`,
		`msg="pulled image" pod=default/p container=app image=registry.test/app:1 image_id=sha256:ok size_bytes=1234 duration_seconds=`,
		`reason=Pulled message="Successfully pulled image \"registry.test/app:1\" in `,
		`. Image size: 1234 bytes."`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	progress := strings.Count(logs.String(), "image pull in progress")
	time.Sleep(5 * time.Millisecond)
	if n := strings.Count(logs.String(), "image pull in progress"); n != progress {
		t.Errorf("progress is still logged after the pull: %d lines, then %d", progress, n)
	}
}
