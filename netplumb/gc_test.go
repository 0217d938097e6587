package netplumb

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGCCollectsWhatACrashedRuntimeLeft simulates a runtime that died
// with three sandboxes: "crashed" lost its netns without a DEL (its veth
// died with the namespace, its lease, IFB and portmap rules did not),
// "stale" still has its netns file but the runtime no longer knows it, and
// "live" is still running.
func TestGCCollectsWhatACrashedRuntimeLeft(t *testing.T) {
	n := newTestNode(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	bw := &Bandwidth{IngressRate: 1e6, IngressBurst: 1e6, EgressRate: 1e6, EgressBurst: 1e6}
	crashed, err := n.d.Add(ctx, "crashed", AddOptions{PodName: "a", Bandwidth: bw, PortMappings: []PortMapping{{HostPort: 18081, ContainerPort: 80}}})
	if err != nil {
		t.Fatal(err)
	}
	stale, err := n.d.Add(ctx, "stale", AddOptions{PodName: "b"})
	if err != nil {
		t.Fatal(err)
	}
	live, err := n.d.Add(ctx, "live", AddOptions{PodName: "c"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: crashed.NetNS})
	if err != nil {
		t.Fatal(err)
	}
	crashedIFB := p.IFB
	if crashedIFB == "" {
		t.Fatal("the crashed pod has no IFB")
	}

	// The crash: the netns goes without a DEL. The kernel deletes its veth
	// pair asynchronously (cleanup_net); wait for that.
	if err := RemoveNetNS(crashed.NetNS); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(n.vethsOnBridge(t)) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the crashed pod's veth outlived its netns by 10 s: %v", n.vethsOnBridge(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := n.leases(t); len(got) != 3 {
		t.Fatalf("leases before GC: %v", got)
	}
	crashedRule := `id: \"crashed\"` // portmap's comment on the sandbox's rules
	if !strings.Contains(natRules(t, n.nodeNS), crashedRule) {
		t.Fatalf("no portmap rule for the crashed pod before GC:\n%s", natRules(t, n.nodeNS))
	}

	g := GCConfig{Config: n.d.Config(), NodeNetNS: n.nodeNS, NetNSDirs: []string{n.netnsDir},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	liveOnly := []Live{{ID: live.ID, NetNS: live.NetNS}}

	t.Run("MinAge protects what may be an ADD in flight", func(t *testing.T) {
		g := g
		g.MinAge = time.Hour
		rep, err := GC(ctx, g, liveOnly)
		if err != nil {
			t.Fatal(err)
		}
		if rep.IPsReleased+rep.VethsRemoved+rep.NetNSRemoved != 0 || len(rep.Errors) != 0 {
			t.Fatalf("GC with MinAge 1h: %+v", rep)
		}
		g.MinAge, g.Now = time.Hour, func() time.Time { return time.Now().Add(2 * time.Hour) }
		if rep, err := GC(ctx, g, append(liveOnly, Live{ID: stale.ID, NetNS: stale.NetNS}, Live{ID: crashed.ID})); err != nil ||
			rep.IPsReleased+rep.VethsRemoved+rep.NetNSRemoved != 0 {
			t.Fatalf("GC with everything live: %+v, %v", rep, err)
		}
	})

	t.Run("GC releases the dead sandboxes' leases, veths and netns files", func(t *testing.T) {
		rep, err := GC(ctx, g, liveOnly)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Errors) != 0 {
			t.Errorf("errors: %v", rep.Errors)
		}
		if rep.IPsReleased != 2 || rep.VethsRemoved != 1 || rep.NetNSRemoved != 1 {
			t.Errorf("report %+v, want 2 IPs, 1 veth, 1 netns", rep)
		}
		if got := n.leases(t); len(got) != 1 || got[0] != live.IP.Addr().String() {
			t.Errorf("leases after GC: %v, want only the live pod's %s", got, live.IP.Addr())
		}
		if got := n.vethsOnBridge(t); len(got) != 1 {
			t.Errorf("veths after GC: %v", got)
		}
		if slices.Contains(n.links(t), crashedIFB) {
			t.Errorf("the crashed pod's IFB %s is left", crashedIFB)
		}
		if rules := natRules(t, n.nodeNS); strings.Contains(rules, crashedRule) {
			t.Errorf("the crashed pod's portmap rules are left:\n%s", rules)
		}
		if _, err := os.Stat(stale.NetNS); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the stale netns file is left: %v", err)
		}
		if _, err := Verify(ctx, VerifyRequest{NodeNetNS: n.nodeNS, PodNetNS: live.NetNS, IP: live.IP.Addr()}); err != nil {
			t.Errorf("the live pod after GC: %v", err)
		}
		if err := n.d.Check(ctx, live); err != nil {
			t.Errorf("the live pod after GC: %v", err)
		}
		ents, _ := os.ReadDir(filepath.Join(n.d.cfg.CacheDir, "results"))
		if len(ents) != 1 || !strings.Contains(ents[0].Name(), "-live-") {
			t.Errorf("libcni cache after GC: %v", ents)
		}
	})

	t.Run("a second GC finds nothing", func(t *testing.T) {
		rep, err := GC(ctx, g, liveOnly)
		if err != nil || rep.IPsReleased+rep.VethsRemoved+rep.NetNSRemoved != 0 || len(rep.Errors) != 0 {
			t.Fatalf("second GC: %+v, %v", rep, err)
		}
	})

	if err := n.d.Del(ctx, live); err != nil {
		t.Fatal(err)
	}
}

func TestGCLeavesFilesThatAreNotNetns(t *testing.T) {
	n := newTestNode(t, nil)
	if err := os.MkdirAll(n.netnsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(n.netnsDir, "notes")
	if err := os.WriteFile(keep, []byte("not a netns"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(n.netnsDir, "cni-leftover")
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	rep, err := GC(t.Context(), GCConfig{Config: n.d.Config(), NodeNetNS: n.nodeNS, NetNSDirs: []string{n.netnsDir, filepath.Join(n.dir, "missing")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.NetNSRemoved != 1 || rep.IPsReleased != 0 || rep.VethsRemoved != 0 || len(rep.Errors) != 0 {
		t.Errorf("report %+v, want only the empty leftover removed", rep)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("a file that is not a netns was removed: %v", err)
	}
	if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an empty leftover netns file is kept: %v", err)
	}
}

func TestReadLease(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, id, ifName string
	}{
		{"a current lease names container and interface", "abc\r\nnet1", "abc", "net1"},
		{"a legacy lease names only the container", "abc\n", "abc", "eth0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "10.88.0.2")
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := readLease(p)
			if err != nil || l.id != tc.id || l.ifName != tc.ifName {
				t.Fatalf("readLease = %+v, %v", l, err)
			}
		})
	}
	for _, tc := range []struct{ name, content string }{
		{"an empty lease is malformed", ""},
		{"a container id that climbs out of libcni's cache is malformed", "x/../../../../etc/passwd\r\neth0"},
		{"an interface that is a path is malformed", "abc\r\n../../x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, "10.88.0.3")
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if l, err := readLease(p); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("readLease = %+v, %v; want ErrInvalidConfig", l, err)
			}
		})
	}
}

// natRules returns iptables-save's nat table of the namespace at nsPath.
func natRules(t testing.TB, nsPath string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+nsPath, "iptables-save", "-t", "nat").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save in %s: %v: %s", nsPath, err, out)
	}
	return string(out)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// A shared netns directory (/var/run/netns) also holds namespaces other
// programs made (`ip netns add`): with Owned, GC removes only the names
// the runtime gives its sandboxes' namespaces.
func TestGCLeavesNetNSFilesItDoesNotOwn(t *testing.T) {
	n := newTestNode(t, nil)
	if err := os.MkdirAll(n.netnsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	theirs := filepath.Join(n.netnsDir, "ngnfs")
	ours := filepath.Join(n.netnsDir, "cni-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b")
	for _, p := range []string{theirs, ours} {
		if err := os.WriteFile(p, nil, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := GC(t.Context(), GCConfig{Config: n.d.Config(), NodeNetNS: n.nodeNS, NetNSDirs: []string{n.netnsDir}, Owned: RuntimeNetNSName}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.NetNSRemoved != 1 || len(rep.Errors) != 0 {
		t.Errorf("report %+v, want only the runtime's leftover removed", rep)
	}
	if _, err := os.Stat(theirs); err != nil {
		t.Errorf("another program's netns file was removed: %v", err)
	}
	if _, err := os.Stat(ours); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the runtime's leftover netns file is kept: %v", err)
	}
}

func TestRuntimeNetNSName(t *testing.T) {
	for name, want := range map[string]bool{
		"cni-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b": true, // containerd
		"0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b":     true, // CRI-O
		"ngnfs":                                    false,
		"cni-0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5":  false,
		"cni-0F1E2D3C-4B5A-6978-8A9B-0C1D2E3F4A5B": false,
		"cni-0f1e2d3c04b5a-6978-8a9b-0c1d2e3f4a5b": false,
		"": false,
	} {
		if got := RuntimeNetNSName(name); got != want {
			t.Errorf("RuntimeNetNSName(%q) = %v, want %v", name, got, want)
		}
	}
}
