package nodevm

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestGuestNetArgs(t *testing.T) {
	n := &GuestNet{APIServer: "127.0.0.1:36443", NodePort: 41000, Relay: "/work/bin/nodevm"}
	args, err := n.netArgs()
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 4 || args[0] != "-netdev" || args[2] != "-device" || args[3] != "virtio-net-device,netdev=net0" {
		t.Fatalf("net args %q", args)
	}
	opts := strings.Split(args[1], ",")
	for _, want := range []string{
		"user", "restrict=on", "ipv6=off",
		"guestfwd=tcp:10.0.2.100:443-cmd:/work/bin/nodevm -relay 127.0.0.1:36443",
		"hostfwd=tcp:127.0.0.1:41000-:41000",
	} {
		if !slices.Contains(opts, want) {
			t.Errorf("-netdev %s lacks %q", args[1], want)
		}
	}
	c := Config{Memory: "2G", CPUs: 2, TCG: "single"}
	line := strings.Join(QemuArgs(c, "/k/vmlinux", "/c/initrd", "/c/rootfs.img", Disks{Payload: "/t/p.img", Out: "/t/o.img"}, args, "/t/console.log", 1), " ")
	if strings.Contains(line, "-nic none") || !strings.Contains(line, "restrict=on") {
		t.Errorf("a cluster run's qemu args: %s", line)
	}

	for _, bad := range []*GuestNet{
		{APIServer: "10.1.2.3:443", NodePort: 1, Relay: "/r"},      // not loopback
		{APIServer: "localhost:443", NodePort: 1, Relay: "/r"},     // a name, not an IP
		{APIServer: "127.0.0.1:443", NodePort: 0, Relay: "/r"},     // no node port
		{APIServer: "127.0.0.1:443", NodePort: 1, Relay: "r"},      // relative relay
		{APIServer: "127.0.0.1:443", NodePort: 1, Relay: "/a,b/r"}, // a comma qemu would split at
		{APIServer: "127.0.0.1:0", NodePort: 1, Relay: "/r"},       // no port
	} {
		if _, err := bad.netArgs(); err == nil {
			t.Errorf("netArgs(%+v) accepted", *bad)
		}
	}
}

// TestRelay: the relay copies both ways to a server on loopback, and
// ends when the server closes; it dials nothing but loopback.
func TestRelay(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the relay half-closes
		c.Write(append([]byte("echo: "), b...))
	}()
	var out bytes.Buffer
	if err := Relay(l.Addr().String(), strings.NewReader("hello"), &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "echo: hello" {
		t.Errorf("relayed %q, want %q", out.String(), "echo: hello")
	}
	for _, addr := range []string{"192.0.2.1:443", "example.com:443", "127.0.0.1"} {
		if err := Relay(addr, strings.NewReader(""), io.Discard); err == nil || !strings.Contains(err.Error(), "not a loopback") {
			t.Errorf("Relay(%q) = %v, want a refusal", addr, err)
		}
	}
}

func TestGuestKubeconfig(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"ca.crt": "CA", "c.crt": "CERT", "c.key": "KEY"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kc, err := guestKubeconfig(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load([]byte(kc))
	if err != nil {
		t.Fatal(err)
	}
	cl, user := cfg.Clusters["default"], cfg.AuthInfos["default"]
	if cl == nil || user == nil || cfg.CurrentContext != "default" {
		t.Fatalf("kubeconfig %s", kc)
	}
	if cl.Server != "https://10.0.2.100:443" || cl.TLSServerName != "kubernetes" || string(cl.CertificateAuthorityData) != "CA" {
		t.Errorf("cluster %+v", cl)
	}
	// Everything inline: the host's paths mean nothing in the guest.
	if string(user.ClientCertificateData) != "CERT" || string(user.ClientKeyData) != "KEY" || user.ClientCertificate != "" || cl.CertificateAuthority != "" {
		t.Errorf("user %+v", user)
	}
	if _, err := guestKubeconfig(filepath.Join(dir, "missing"), "", ""); err == nil {
		t.Error("a missing CA file accepted")
	}
}

// TestCheckGuestBinaries: kubectl and the kubelet must both be executable
// files in the control plane's directory before the control plane starts.
func TestCheckGuestBinaries(t *testing.T) {
	write := func(dir, name string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		make func(dir string)
		ok   bool
	}{
		{"both executable", func(d string) { write(d, ClusterKubectl, 0o755); write(d, ClusterKubelet, 0o755) }, true},
		{"no kubelet", func(d string) { write(d, ClusterKubectl, 0o755) }, false},
		{"a kubelet that is not executable", func(d string) { write(d, ClusterKubectl, 0o755); write(d, ClusterKubelet, 0o644) }, false},
		{"a kubelet that is a directory", func(d string) {
			write(d, ClusterKubectl, 0o755)
			if err := os.Mkdir(filepath.Join(d, ClusterKubelet), 0o755); err != nil {
				t.Fatal(err)
			}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.make(dir)
			if err := checkGuestBinaries(dir); (err == nil) != tt.ok {
				t.Errorf("checkGuestBinaries = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
