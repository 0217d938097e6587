package registry_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/registry"
)

// TestRegistryServesPushedImagesToContainerd: the registry answers only
// in the env's namespace, over TLS from its CA, with htpasswd; an image
// pushed from the env's containerd is pulled back by the env's CRI with
// the login (containerd trusts the CA through hosts.toml) and refused
// without it with the registry's 401; Close removes what it wrote.
func TestRegistryServesPushedImagesToContainerd(t *testing.T) {
	env := crienv.New(t)
	reg := registry.New(t, env)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	for _, tt := range []struct {
		auth bool
		want int
	}{{false, http.StatusUnauthorized}, {true, http.StatusOK}} {
		if code, err := reg.Get(ctx, "/v2/", tt.auth); err != nil || code != tt.want {
			t.Fatalf("GET /v2/ (login %v) = %d, %v; want %d", tt.auth, code, err, tt.want)
		}
	}
	if _, err := os.Stat(filepath.Join(env.RegistryHostsDir(), reg.Host(), "hosts.toml")); err != nil {
		t.Fatalf("no hosts.toml for containerd: %v", err)
	}

	remote := reg.Host() + "/nodeguard/busybox:pushed"
	if err := reg.Push(ctx, env.Socket(), env.BusyboxImage(), remote); err != nil {
		t.Fatal(err)
	}
	img := env.ImageClient()
	_, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: remote}})
	if err == nil || !strings.Contains(err.Error(), "401 Unauthorized") {
		t.Fatalf("an anonymous pull: err = %v, want the registry's 401 Unauthorized", err)
	}
	resp, err := img.PullImage(ctx, &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: remote},
		Auth: &runtimeapi.AuthConfig{Username: reg.Username(), Password: reg.Password()}})
	if err != nil {
		t.Fatalf("a pull with the login: %v", err)
	}
	local, err := img.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{Image: &runtimeapi.ImageSpec{Image: env.BusyboxImage()}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := resp.GetImageRef(), local.GetImage().GetId(); got != want {
		t.Errorf("pulled image %s, want the pushed busybox %s", got, want)
	}

	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(env.RegistryHostsDir(), reg.Host())); !os.IsNotExist(err) {
		t.Errorf("Close left the hosts.toml directory: %v", err)
	}
	if _, err := reg.Get(ctx, "/v2/", true); err == nil {
		t.Error("the registry still answers after Close")
	}
}
