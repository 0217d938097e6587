package cri

import (
	"strings"
	"testing"
)

func TestSandboxImageOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		info    map[string]string
		want    string
		ok      bool
		wantErr string
	}{
		// The shape of containerd 1.6's verbose Status: info["config"] is
		// the CRI plugin's configuration as a JSON string.
		{name: "containerd 1.6 names its sandbox image",
			info: map[string]string{"config": `{"containerd":{"snapshotter":"overlayfs"},"sandboxImage":"registry.local/nodeguard/pause:3.9","maxConcurrentDownloads":3}`},
			want: "registry.local/nodeguard/pause:3.9", ok: true},
		{name: "a config without one (containerd 2 pins it instead)", info: map[string]string{"config": `{"containerd":{}}`}},
		{name: "no config at all", info: map[string]string{"golang": "go1.22"}},
		{name: "a config that is not JSON", info: map[string]string{"config": `sandbox_image = "pause"`}, wantErr: "info[config]: invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := sandboxImageOf(tc.info)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || ok != tc.ok {
				t.Errorf("sandboxImageOf = %q, %v, %v; want %q, %v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
}

func TestImageGCCallsNameWhatFailed(t *testing.T) {
	_, c := dialFake(t) // the fake implements none of these
	ctx := t.Context()
	_, err1 := c.ListImages(ctx)
	err2 := c.RemoveImage(ctx, "sha256:old")
	_, err3 := c.ImageFsInfo(ctx)
	_, err4 := c.ListAllContainers(ctx)
	_, _, err5 := c.SandboxImage(ctx)
	for i, tc := range []struct {
		err  error
		want string
	}{{err1, "list images all: "}, {err2, "remove image sha256:old: "}, {err3, "image fs info all: "},
		{err4, "list containers all: "}, {err5, "runtime status verbose: "}} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) {
			t.Errorf("call %d: err = %v, want it to start with %q", i, tc.err, tc.want)
		}
	}
}
