package netplumb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgtest"
)

// testNode is a node network namespace of the test's own, with a Direct
// running the default chain in it; every pod namespace lives in netnsDir.
// Everything (pod namespaces, then the node namespace, whose bridge, IFB
// devices and iptables rules die with it, then the files) is removed in
// cleanup.
type testNode struct {
	dir, nodeNS, netnsDir string
	d                     *Direct
}

func newTestNode(t testing.TB, mod func(*Config)) *testNode {
	t.Helper()
	cgtest.RequirePrivileged(t)
	needPlugins(t)
	dir := t.TempDir()
	n := &testNode{dir: dir, nodeNS: filepath.Join(dir, "node"), netnsDir: filepath.Join(dir, "netns")}
	if err := NewNetNS(n.nodeNS); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := RemoveNetNS(n.nodeNS); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() {
		ents, _ := os.ReadDir(n.netnsDir)
		for _, e := range ents {
			if err := RemoveNetNS(filepath.Join(n.netnsDir, e.Name())); err != nil {
				t.Error(err)
			}
		}
	})
	c := DefaultConfig()
	c.ConfDir, c.IPAMDir, c.CacheDir = filepath.Join(dir, "net.d"), filepath.Join(dir, "ipam"), filepath.Join(dir, "cache")
	if mod != nil {
		mod(&c)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	d, err := NewDirect(ctx, c, n.nodeNS, n.netnsDir)
	if err != nil {
		t.Fatal(err)
	}
	n.d = d
	return n
}

// links returns the names of the node namespace's links.
func (n *testNode) links(t testing.TB) []string {
	t.Helper()
	h, err := openNS(n.nodeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ls, err := retryDump(h.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		names = append(names, l.Attrs().Name)
	}
	return names
}

// vethsOnBridge returns the host veths enslaved to the bridge.
func (n *testNode) vethsOnBridge(t testing.TB) []string {
	t.Helper()
	h, err := openNS(n.nodeNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	br, err := h.LinkByName(n.d.cfg.Bridge)
	if err != nil {
		return nil
	}
	ls, err := retryDump(h.LinkList)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range ls {
		if _, ok := l.(*netlink.Veth); ok && l.Attrs().MasterIndex == br.Attrs().Index {
			names = append(names, l.Attrs().Name)
		}
	}
	return names
}

// leases returns the lease files (addresses) of the network.
func (n *testNode) leases(t testing.TB) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(n.d.cfg.IPAMDir, n.d.cfg.Name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var ips []string
	for _, e := range ents {
		if net.ParseIP(e.Name()) != nil {
			ips = append(ips, e.Name())
		}
	}
	return ips
}

// serve listens on addr inside the namespace at nsPath and answers each
// connection with one line, greeting, until the test ends.
func serve(t testing.TB, nsPath, addr, greeting string) {
	t.Helper()
	var l net.Listener
	err := inNetNS(nsPath, func() error {
		var err error
		l, err = net.Listen("tcp", addr)
		return err
	})
	if err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, nsPath, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintln(c, greeting)
			c.Close()
		}
	}()
}

// dial connects to addr from inside the namespace at nsPath and returns
// the line the server sent.
func dial(ctx context.Context, nsPath, addr string) (string, error) {
	var line string
	err := inNetNS(nsPath, func() error {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var d net.Dialer
		c, err := d.DialContext(dctx, "tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		line, err = bufio.NewReader(c).ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		return nil
	})
	return strings.TrimSpace(line), err
}

func TestNewNetNSIsPersistentAndRemovable(t *testing.T) {
	cgtest.RequirePrivileged(t)
	f := filepath.Join(t.TempDir(), "ns")
	if err := NewNetNS(f); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { RemoveNetNS(f) })
	if err := NewNetNS(f); err == nil {
		t.Fatal("NewNetNS over an existing file succeeded")
	}
	h, err := openNS(f)
	if err != nil {
		t.Fatal(err)
	}
	lo, err := h.LinkByName("lo")
	h.Close()
	if err != nil || lo.Attrs().Flags&net.FlagUp == 0 {
		t.Fatalf("lo in the new netns: %v, %v", lo, err)
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(f, &st); err != nil {
		t.Fatal(err)
	}
	if self == fmt.Sprintf("net:[%d]", st.Ino) {
		t.Fatal("the new netns is this process's own")
	}
	if err := RemoveNetNS(f); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("netns file still there: %v", err)
	}
	if err := RemoveNetNS(f); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
}
