package cri

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// pulls counts the PullImage calls the fake runtime was asked.
func (f *fakeRuntime) pulls() int {
	n := 0
	for _, c := range f.called() {
		if strings.HasPrefix(c, "PullImage ") {
			n++
		}
	}
	return n
}

// TestEnsureImageHonoursPullPolicy is the kubelet's shouldPullImage
// (pkg/kubelet/images/image_manager.go): Always pulls at every start even
// when the image is present, IfNotPresent only when it is absent, Never
// never, and a missing image under Never is ErrImageNeverPull.
func TestEnsureImageHonoursPullPolicy(t *testing.T) {
	const present, absent = "busybox:local", "registry.test/app:1"
	tests := []struct {
		name      string
		pull      bool // dialed WithImagePull
		image     string
		policy    corev1.PullPolicy
		wantID    string
		wantErr   error
		wantPulls int
	}{
		{"Always pulls a present image", true, present, corev1.PullAlways, "sha256:pulled", nil, 1},
		{"Always pulls a missing image", true, absent, corev1.PullAlways, "sha256:pulled", nil, 1},
		{"Always without pulls is ErrPullDisabled", false, present, corev1.PullAlways, "", ErrPullDisabled, 0},
		{"IfNotPresent uses a present image", true, present, corev1.PullIfNotPresent, "sha256:busybox", nil, 0},
		{"IfNotPresent pulls a missing image", true, absent, corev1.PullIfNotPresent, "sha256:pulled", nil, 1},
		{"IfNotPresent without pulls is ErrImageNotPresent for a missing image", false, absent, corev1.PullIfNotPresent, "", ErrImageNotPresent, 0},
		{"Never uses a present image", true, present, corev1.PullNever, "sha256:busybox", nil, 0},
		{"Never is ErrImageNeverPull for a missing image, pulls allowed or not", true, absent, corev1.PullNever, "", ErrImageNeverPull, 0},
		{"Never without pulls is ErrImageNeverPull for a missing image", false, absent, corev1.PullNever, "", ErrImageNeverPull, 0},
		{"an unknown policy is ErrInvalidOption", true, present, corev1.PullPolicy("Sometimes"), "", ErrInvalidOption, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var opts []Option
			if tt.pull {
				opts = append(opts, WithImagePull())
			}
			f, c := dialFake(t, opts...)
			id, err := c.EnsureImage(t.Context(), tt.image, tt.policy, nil)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("EnsureImage(%s, %s): err = %v, want %v", tt.image, tt.policy, err, tt.wantErr)
			}
			if id != tt.wantID {
				t.Errorf("EnsureImage(%s, %s) = %q, want %q", tt.image, tt.policy, id, tt.wantID)
			}
			if err != nil && !strings.Contains(err.Error(), tt.image) {
				t.Errorf("the error does not name the image %s: %v", tt.image, err)
			}
			if got := f.pulls(); got != tt.wantPulls {
				t.Errorf("PullImage called %d times, want %d (calls %q)", got, tt.wantPulls, f.called())
			}
		})
	}
	t.Run("Never's error says what the kubelet says", func(t *testing.T) {
		_, c := dialFake(t)
		_, err := c.EnsureImage(t.Context(), absent, corev1.PullNever, nil)
		if want := `container image "registry.test/app:1" is not present with pull policy of Never`; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %q", err, want)
		}
	})
	t.Run("a failed pull is ErrImagePull and keeps the runtime's reason", func(t *testing.T) {
		f, c := dialFake(t, WithImagePull())
		f.pullErr = status.Error(codes.Unknown, "failed to resolve reference: no such host")
		_, err := c.EnsureImage(t.Context(), absent, corev1.PullIfNotPresent, nil)
		if !errors.Is(err, ErrImagePull) || !strings.Contains(err.Error(), "no such host") {
			t.Errorf("err = %v, want ErrImagePull with the runtime's reason", err)
		}
	})
}

// TestPullImageSendsTheCredentials: the AuthConfig reaches the runtime's
// PullImageRequest as given (the Manager picks it from the keyring).
func TestPullImageSendsTheCredentials(t *testing.T) {
	f, c := dialFake(t, WithImagePull())
	auth := &runtimeapi.AuthConfig{Username: "u", Password: "p", ServerAddress: "registry.test"}
	if _, err := c.PullImage(t.Context(), "registry.test/app:1", auth, nil); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	got := f.pullAuth
	f.mu.Unlock()
	if got.GetUsername() != "u" || got.GetPassword() != "p" || got.GetServerAddress() != "registry.test" {
		t.Errorf("the runtime got auth %+v, want %+v", got, auth)
	}
}

// TestResolveImageSaysWhetherToPull: the policy decision alone, which the
// Manager takes before pulling with credentials.
func TestResolveImageSaysWhetherToPull(t *testing.T) {
	f, c := dialFake(t, WithImagePull())
	for _, tt := range []struct {
		image    string
		policy   corev1.PullPolicy
		wantPull bool
		wantID   string
	}{
		{"busybox:local", corev1.PullAlways, true, ""},
		{"busybox:local", corev1.PullIfNotPresent, false, "sha256:busybox"},
		{"registry.test/app:1", corev1.PullIfNotPresent, true, ""},
	} {
		id, pull, err := c.ResolveImage(t.Context(), tt.image, tt.policy)
		if err != nil || pull != tt.wantPull || id != tt.wantID {
			t.Errorf("ResolveImage(%s, %s) = %q, %v, %v; want %q, %v, nil", tt.image, tt.policy, id, pull, err, tt.wantID, tt.wantPull)
		}
	}
	if n := f.pulls(); n != 0 {
		t.Errorf("ResolveImage pulled %d times, want never", n)
	}
}
