package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxSocketPath is the longest path bind(2) takes: sun_path is 108 bytes
// with the terminating NUL.
const maxSocketPath = 107

// staleProbeTimeout bounds the dial that tells a live socket from a stale
// one. The kernel completes a unix connect without the server's help while
// its backlog has room, so a live socket answers at once; a full backlog
// (EAGAIN) or a slow answer also means alive. One second only keeps a
// strange file system from hanging startup.
const staleProbeTimeout = time.Second

// fileID identifies the socket inode that Listen created, so that Serve
// removes the path on exit only while it still names that socket.
type fileID struct{ dev, ino uint64 }

func statID(path string) (fileID, bool) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return fileID{}, false
	}
	return fileID{dev: st.Dev, ino: st.Ino}, true
}

// listenUnix creates the API socket at path, mode 0600 whatever the umask:
//
//  1. a file already at path must be a socket nobody answers on (a stale
//     socket left by a crash); a live one is ErrAlreadyRunning, anything
//     that is not a socket is refused and left alone;
//  2. the socket is bound inside a fresh private directory (0700) next to
//     path, chmod-ed to 0600 there, and renamed onto path. The rename is
//     atomic and keeps the inode, so no other user can connect during the
//     window between bind (which creates the file 0777 &^ umask) and chmod,
//     and the process umask, which other goroutines depend on, is never
//     changed.
//
// The socket's own address (getsockname, and what peers see in errors) stays
// the temporary name; only the path to connect to is path.
//
// Two servers started at the same instant on one stale path may both pass
// step 1; the later rename wins and the other serves an unreachable socket.
// The systemd unit runs one agent; this is not a lock.
func listenUnix(ctx context.Context, path string) (*net.UnixListener, fileID, error) {
	if len(path) > maxSocketPath {
		return nil, fileID{}, fmt.Errorf("listen on %s: path longer than %d bytes", path, maxSocketPath)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fileID{}, fmt.Errorf("create socket directory: %w", err)
	}
	if err := checkStale(ctx, path); err != nil {
		return nil, fileID{}, err
	}
	tmp, err := os.MkdirTemp(dir, ".ng")
	if err != nil {
		return nil, fileID{}, fmt.Errorf("create private directory for %s: %w", path, err)
	}
	defer os.RemoveAll(tmp)
	tmpSock := filepath.Join(tmp, "s")
	if len(tmpSock) > maxSocketPath {
		return nil, fileID{}, fmt.Errorf("listen on %s: the directory name is too long to bind privately (%s is longer than %d bytes)", path, tmpSock, maxSocketPath)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmpSock, Net: "unix"})
	if err != nil {
		return nil, fileID{}, fmt.Errorf("listen on %s: %w", path, err)
	}
	// The listener's name is the temporary path: Serve removes path itself.
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmpSock, 0o600); err != nil {
		ln.Close()
		return nil, fileID{}, fmt.Errorf("chmod socket %s: %w", path, err)
	}
	if err := os.Rename(tmpSock, path); err != nil {
		ln.Close()
		return nil, fileID{}, fmt.Errorf("move socket into place at %s: %w", path, err)
	}
	id, ok := statID(path)
	if !ok {
		ln.Close()
		return nil, fileID{}, fmt.Errorf("stat socket %s: it vanished after creation", path)
	}
	return ln, id, nil
}

// checkStale returns nil when path is free to take: absent, or a socket
// that refuses connections.
func checkStale(ctx context.Context, path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("listen on %s: the path exists and is not a socket (%s); not removing it", path, fi.Mode().Type())
	}
	pctx, cancel := context.WithTimeout(ctx, staleProbeTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(pctx, "unix", path)
	switch {
	case err == nil:
		c.Close()
		return fmt.Errorf("%w on %s", ErrAlreadyRunning, path)
	case ctx.Err() != nil:
		return fmt.Errorf("probe socket %s: %w", path, ctx.Err())
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, fs.ErrNotExist):
		return nil // stale (or gone meanwhile): the rename replaces it
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w on %s (its backlog is full: %v)", ErrAlreadyRunning, path, err)
	default:
		return fmt.Errorf("probe socket %s: %w", path, err)
	}
}

// peerCred returns the credentials of the process that connected c, as the
// kernel recorded them at connect(2) (SO_PEERCRED).
func peerCred(c net.Conn) (unix.Ucred, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return unix.Ucred{}, fmt.Errorf("peer credentials: %T is not a socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return unix.Ucred{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return unix.Ucred{}, fmt.Errorf("peer credentials: %w", err)
	}
	if serr != nil {
		return unix.Ucred{}, fmt.Errorf("peer credentials: getsockopt SO_PEERCRED: %w", serr)
	}
	return *cred, nil
}

// allowedPeer is the API's whole access policy: root, or the user the
// server runs as (an unprivileged development agent and its own CLI). The
// uid is the peer's effective uid at connect, mapped into the server's user
// namespace (unmapped uids read as the overflow uid 65534).
func allowedPeer(uid uint32, serverEUID int) bool {
	return uid == 0 || int64(uid) == int64(serverEUID)
}

// credListener admits only connections whose peer passes allowedPeer. A
// refused connection is closed before a byte is read, counted, and never
// reaches the HTTP server; Accept goes on with the next one.
type credListener struct {
	net.Listener
	allow   func(uid uint32) bool // allowedPeer with the server's euid
	refused *atomic.Uint64
	log     *slog.Logger
}

func (l *credListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cred, err := peerCred(c)
		if err != nil {
			l.refused.Add(1)
			l.log.Warn("API connection refused: no peer credentials", "err", err)
			c.Close()
			continue
		}
		if !l.allow(cred.Uid) {
			l.refused.Add(1)
			l.log.Warn("API connection refused: peer is neither root nor the agent's user",
				"peer_uid", cred.Uid, "peer_pid", cred.Pid)
			c.Close()
			continue
		}
		return &peerConn{Conn: c, cred: cred}, nil
	}
}

// peerConn carries the admitted peer's credentials to ConnContext.
type peerConn struct {
	net.Conn
	cred unix.Ucred
}

type peerKey struct{}

// peerFrom returns the credentials of the request's peer, when known.
func peerFrom(ctx context.Context) (unix.Ucred, bool) {
	c, ok := ctx.Value(peerKey{}).(unix.Ucred)
	return c, ok
}
