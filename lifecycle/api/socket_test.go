package api

import (
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestAllowedPeer(t *testing.T) {
	cases := []struct {
		name       string
		uid        uint32
		serverEUID int
		want       bool
	}{
		{"root is admitted by a root server", 0, 0, true},
		{"root is admitted by an unprivileged server", 0, 1000, true},
		{"the server's own user is admitted", 1000, 1000, true},
		{"nobody is refused by a root server", 65534, 0, false},
		{"another user is refused by a root server", 1000, 0, false},
		{"another user is refused by an unprivileged server", 1001, 1000, false},
		{"a uid that wraps to the server's as int32 is refused", 1<<32 - 1, -1, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := allowedPeer(tc.uid, tc.serverEUID); got != tc.want {
				t.Fatalf("allowedPeer(%d, %d) = %v", tc.uid, tc.serverEUID, got)
			}
		})
	}
}

func TestPeerCredOfASocketpairIsThisProcess(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	f := os.NewFile(uintptr(fds[0]), "socketpair")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cred, err := peerCred(c)
	if err != nil {
		t.Fatal(err)
	}
	if int(cred.Uid) != os.Geteuid() || int(cred.Pid) != os.Getpid() || int(cred.Gid) != os.Getegid() {
		t.Fatalf("got uid %d gid %d pid %d, want %d %d %d", cred.Uid, cred.Gid, cred.Pid, os.Geteuid(), os.Getegid(), os.Getpid())
	}
}

func TestPeerCredOfANonSocketIsAnError(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := peerCred(a); err == nil {
		t.Fatal("no error for a net.Pipe")
	}
}

// TestCredListenerClosesRefusedPeers checks the accept loop: a refused
// connection is counted and closed before the server reads from it, and
// Accept goes on to the next connection instead of failing.
func TestCredListenerClosesRefusedPeers(t *testing.T) {
	dir, err := os.MkdirTemp("", "ngapi")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var refused atomic.Uint64
	var calls atomic.Int32
	cl := &credListener{
		Listener: ln,
		allow:    func(uint32) bool { return calls.Add(1) > 1 }, // refuse the first peer only
		refused:  &refused,
		log:      slog.New(slog.DiscardHandler),
	}
	first, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()

	got, err := cl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	pc, ok := got.(*peerConn)
	if !ok || int(pc.cred.Pid) != os.Getpid() {
		t.Fatalf("accepted %T %+v", got, pc)
	}
	if refused.Load() != 1 {
		t.Errorf("refused %d, want 1", refused.Load())
	}
	first.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := first.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("the refused peer read %d bytes, %v; want EOF", n, err)
	}
	// The admitted connection is the second one: it carries bytes.
	go second.Write([]byte("x"))
	got.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(got, make([]byte, 1)); err != nil {
		t.Errorf("read from the admitted peer: %v", err)
	}
}
