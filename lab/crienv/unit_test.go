package crienv

import (
	"slices"
	"strings"
	"testing"
)

func TestMountsUnder(t *testing.T) {
	mi := strings.Join([]string{
		`22 1 254:0 / / rw,relatime - ext4 /dev/vda rw`,
		`40 22 0:4 net:[4026532177] /tmp/env/netns rw - nsfs nsfs rw`,
		`41 22 0:50 / /tmp/env/state/task/abc/rootfs rw - overlay overlay rw,lowerdir=/x`,
		`42 22 0:51 / /tmp/env/state/cri/sandboxes/abc/shm rw - tmpfs shm rw`,
		`43 22 0:52 / /tmp/envelope rw - tmpfs tmpfs rw`,
		`44 22 0:53 / /tmp/env/with\040space rw - tmpfs tmpfs rw`,
		`45 41 0:54 / /tmp/env/state/task/abc/rootfs rw - tmpfs over rw`,
		`46 22 0:55 / /tmp/env rw - tmpfs self rw`,
	}, "\n") + "\n"
	got, err := mountsUnder([]byte(mi), "/tmp/env")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		// deepest first; of two mounts on one point, the newer first
		"/tmp/env/state/cri/sandboxes/abc/shm",
		"/tmp/env/state/task/abc/rootfs",
		"/tmp/env/state/task/abc/rootfs",
		"/tmp/env/with space",
		"/tmp/env/netns",
		"/tmp/env",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("mountsUnder = %q\nwant %q (not /tmp/envelope, which only shares a prefix)", got, want)
	}
	if _, err := mountsUnder([]byte("1 2 3\n"), "/tmp/env"); err == nil {
		t.Error("mountsUnder accepted a line with 3 fields")
	}
	if _, err := mountsUnder([]byte(`1 2 0:1 / /tmp/x rw shared:1 tmpfs t rw`+"\n"), "/tmp/env"); err == nil {
		t.Error(`mountsUnder accepted a line without the "-" separator`)
	}
}

func TestArgvMatch(t *testing.T) {
	const dir, sock = "/tmp/env", "/tmp/env/containerd.sock"
	tests := []struct {
		name  string
		argv  []string
		match bool
	}{
		{"containerd with its config", []string{"containerd", "--config", "/tmp/env/config.toml"}, true},
		{"a shim of the env", []string{"/usr/bin/containerd-shim-runc-v2", "-namespace", "k8s.io", "-id", "abc", "-address", sock}, true},
		{"a flag=value naming the dir", []string{"x", "--root=/tmp/env/runc"}, true},
		{"a shim of another env", []string{"/usr/bin/containerd-shim-runc-v2", "-address", "/tmp/other/containerd.sock"}, false},
		{"a path that only shares a prefix", []string{"cat", "/tmp/envelope/x"}, false},
		{"-address as the last argument", []string{"x", "-address"}, false},
		{"a kernel thread", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := argvMatch(tt.argv, dir, sock) != ""; got != tt.match {
				t.Fatalf("argvMatch(%q) matched %v, want %v", tt.argv, got, tt.match)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		in    string
		comm  string
		state byte
		ok    bool
	}{
		{"1 (containerd) S 0 1", "containerd", 'S', true},
		{"2 (a) b) (c) Z 1 2", "a) b) (c", 'Z', true},
		{"3 (x y) R 1", "x y", 'R', true},
		{"4 (broken", "", 0, false},
		{"5 (x)", "", 0, false},
	}
	for _, tt := range tests {
		comm, state, ok := parseStat([]byte(tt.in))
		if comm != tt.comm || state != tt.state || ok != tt.ok {
			t.Errorf("parseStat(%q) = %q %q %v, want %q %q %v", tt.in, comm, state, ok, tt.comm, tt.state, tt.ok)
		}
	}
}

func TestShimSocket(t *testing.T) {
	// sha256("/run/containerd/containerd.sock/k8s.io/abc"), as containerd
	// 1.6's shim.SocketAddress computes it; TestCRISmoke checks the
	// formula against a real shim.
	got := shimSocket("/run/containerd/containerd.sock", "k8s.io", "abc")
	if !strings.HasPrefix(got, "/run/containerd/s/") || len(got) != len("/run/containerd/s/")+64 {
		t.Fatalf("shimSocket = %q, want /run/containerd/s/<64 hex>", got)
	}
}
