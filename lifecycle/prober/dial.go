package prober

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// ErrDialerClosed is returned by a NetNSDialer's dial after its close.
var ErrDialerClosed = errors.New("probe dialer closed")

// NetNSDialer returns a DialFunc whose sockets are made in the network
// namespace at path: the node's, where the pod network's bridge routes
// the pod IPs. A socket keeps the namespace it was made in, so only the
// socket(2) call needs a thread in path: one goroutine, locked to its
// thread and moved into path once, makes every socket, and the connect,
// the wait for it and everything after happen on the caller's goroutine,
// wherever it runs. (Moving a thread in and out per dial, as ns.Do does,
// cost two setns calls, four opens and closes of namespace files and a
// locked goroutine parked across the connect, which was most of a
// probe's CPU.) The maker keeps a few unconnected sockets of each kind a
// dial has asked for ready (socketPool), so that a dial takes one without
// waking its thread: a hand-off per socket cost as much CPU as the
// probe's own connect (BenchmarkNetNSProbes), and the probes of a grid
// instant now cost the maker one wake-up for dozens of sockets. Host
// names are resolved by a resolver whose DNS sockets are made there too.
// The namespace is entered at once (a wrong path fails here, not at the
// first probe); close stops the goroutine, whose thread then exits: it
// never runs anything else, and closes the sockets still pooled.
func NetNSDialer(path string) (dial DialFunc, close func() error, err error) {
	d, err := newNSDialer(path)
	if err != nil {
		return nil, nil, err
	}
	return d.dial, d.close, nil
}

func newNSDialer(path string) (*nsDialer, error) {
	n, err := ns.GetNS(path)
	if err != nil {
		return nil, fmt.Errorf("open the node's network namespace %s for probes: %w", path, err)
	}
	d := &nsDialer{path: path, reqs: make(chan socketRequest), done: make(chan struct{}), exited: make(chan struct{}), refill: make(chan struct{}, 1)}
	for i := range d.pools {
		d.pools[i] = make(chan int, socketPool)
	}
	ready := make(chan error, 1)
	go d.makeSockets(n, ready)
	if err := <-ready; err != nil {
		n.Close()
		return nil, fmt.Errorf("enter the node's network namespace %s for probes: %w", path, err)
	}
	// The thread is in the namespace now and keeps it: the handle can go.
	if err := n.Close(); err != nil {
		d.close()
		return nil, fmt.Errorf("close the node's network namespace %s: %w", path, err)
	}
	d.resolver = &net.Resolver{PreferGo: true, Dial: d.dial}
	return d, nil
}

// nsDialer dials from a network namespace through its socket maker.
type nsDialer struct {
	path     string
	resolver *net.Resolver
	reqs     chan socketRequest
	// done is closed by close; exited when the maker has returned.
	done, exited chan struct{}
	closeOnce    sync.Once
	// pools hold unconnected sockets made ahead, by kind (poolIndex);
	// wanted marks the kinds a dial has asked for, which the maker keeps
	// filled; refill wakes it when a pool runs low.
	pools  [4]chan int
	wanted [4]atomic.Bool
	refill chan struct{}
}

// socketPool is how many sockets of a kind the maker keeps ready: more
// than the TCP, HTTP and gRPC probes of 250 pods due at one grid instant
// (about 40), so that each instant costs at most a wake-up or two. A
// pool below half is refilled.
const socketPool = 64

// poolIndex is the pool of a socket kind: IPv4 or IPv6, stream or
// datagram; -1 for another.
func poolIndex(family, typ int) int {
	i := 0
	switch family {
	case unix.AF_INET:
	case unix.AF_INET6:
		i = 2
	default:
		return -1
	}
	switch typ {
	case unix.SOCK_STREAM:
	case unix.SOCK_DGRAM:
		i++
	default:
		return -1
	}
	return i
}

// poolKind is poolIndex's inverse.
func poolKind(i int) (family, typ int) {
	family, typ = unix.AF_INET, unix.SOCK_STREAM
	if i >= 2 {
		family = unix.AF_INET6
	}
	if i%2 == 1 {
		typ = unix.SOCK_DGRAM
	}
	return family, typ
}

type socketRequest struct {
	family, typ int
	reply       chan socketReply
}

type socketReply struct {
	fd  int
	err error
}

// makeSockets is the socket maker: it enters the namespace and makes
// sockets until close. The thread is never unlocked: when this goroutine
// returns, the runtime ends the thread instead of handing it, still in
// the namespace, to another goroutine.
func (d *nsDialer) makeSockets(n ns.NetNS, ready chan<- error) {
	defer close(d.exited)
	runtime.LockOSThread()
	if err := n.Set(); err != nil {
		ready <- err
		return
	}
	ready <- nil
	defer d.drainPools()
	for {
		select {
		case <-d.done:
			return
		case r := <-d.reqs:
			fd, err := newSocket(r.family, r.typ)
			r.reply <- socketReply{fd: fd, err: err} // buffered: never blocks
			if i := poolIndex(r.family, r.typ); i >= 0 {
				d.wanted[i].Store(true)
				d.fillPools()
			}
		case <-d.refill:
			d.fillPools()
		}
	}
}

// newSocket makes a non-blocking socket. A stream socket lingers 1 s
// at close, as the kubelet's probe dialer sets it (pkg/probe
// ProbeDialer, kubernetes#89898: probes' connections closed cleanly
// with a FIN, not reset).
func newSocket(family, typ int) (int, error) {
	fd, err := unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	if typ == unix.SOCK_STREAM {
		if err := unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 1}); err != nil {
			unix.Close(fd)
			return -1, os.NewSyscallError("setsockopt SO_LINGER", err)
		}
	}
	return fd, nil
}

// fillPools tops up the pools of the kinds asked for; on the maker's
// thread only. A socket that cannot be made now (out of descriptors)
// leaves the pool short: dials then ask the maker, and get its error.
func (d *nsDialer) fillPools() {
	for i := range d.pools {
		if !d.wanted[i].Load() {
			continue
		}
		family, typ := poolKind(i)
		for len(d.pools[i]) < cap(d.pools[i]) {
			fd, err := newSocket(family, typ)
			if err != nil {
				break
			}
			select {
			case d.pools[i] <- fd:
			default: // full: only the maker adds
				unix.Close(fd)
			}
		}
	}
}

// drainPools closes the pooled sockets once the maker stops: socket
// takes none after done is closed.
func (d *nsDialer) drainPools() {
	for _, p := range d.pools {
		for {
			select {
			case fd := <-p:
				unix.Close(fd)
				continue
			default:
			}
			break
		}
	}
}

func (d *nsDialer) close() error {
	d.closeOnce.Do(func() { close(d.done) })
	<-d.exited
	return nil
}

// socket returns a non-blocking socket made in the namespace: a pooled
// one when there is one, else one the maker makes now.
func (d *nsDialer) socket(ctx context.Context, family, typ int) (int, error) {
	select {
	case <-d.done:
		return -1, ErrDialerClosed
	default:
	}
	if i := poolIndex(family, typ); i >= 0 {
		select {
		case fd := <-d.pools[i]:
			if len(d.pools[i]) < cap(d.pools[i])/2 {
				select {
				case d.refill <- struct{}{}:
				default: // a refill is asked for already
				}
			}
			return fd, nil
		default:
		}
	}
	r := socketRequest{family: family, typ: typ, reply: make(chan socketReply, 1)}
	select {
	case d.reqs <- r:
	case <-d.done:
		return -1, ErrDialerClosed
	case <-ctx.Done():
		return -1, dialCtxErr(ctx)
	}
	// The maker answers every request it took, at once.
	rep := <-r.reply
	return rep.fd, rep.err
}

// dial is the DialFunc: network is tcp, tcp4, tcp6, udp, udp4 or udp6,
// address host:port with an IP or a name. As net.Dialer, the addresses
// of a name are tried in turn, each with its share of what is left of
// ctx's deadline, and the first error is the one returned.
func (d *nsDialer) dial(ctx context.Context, network, address string) (net.Conn, error) {
	typ, ipNet, err := socketType(network)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.AddrError{Err: "invalid port", Addr: address}}
	}
	var addrs []netip.Addr
	if host == "" {
		// No host is this namespace itself, as for net.Dialer: the
		// unspecified address, which connect(2) takes as a local one (a
		// probe of a pod without a pod IP, on the host's network).
		a := netip.IPv4Unspecified()
		if ipNet == "ip6" {
			a = netip.IPv6Unspecified()
		}
		addrs = []netip.Addr{a}
	} else if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip.Unmap()}
	} else if addrs, err = d.resolver.LookupNetIP(ctx, ipNet, host); err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: err}
	}
	var first error
	for i, a := range addrs {
		a = a.Unmap()
		if (ipNet == "ip4" && !a.Is4()) || (ipNet == "ip6" && !a.Is6()) {
			continue
		}
		actx, cancel := partialDeadline(ctx, len(addrs)-i)
		c, err := d.dialAddr(actx, network, typ, netip.AddrPortFrom(a, uint16(port)))
		cancel()
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if first == nil {
		first = &net.OpError{Op: "dial", Net: network, Err: &net.AddrError{Err: "no suitable address found", Addr: host}}
	}
	return nil, first
}

// minAttempt is the least time one address of several is given, as
// net.Dialer's (2 s), unless the whole deadline is shorter.
const minAttempt = 2 * time.Second

// partialDeadline gives one of left attempts its share of what remains of
// ctx's deadline.
func partialDeadline(ctx context.Context, left int) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok || left <= 1 {
		return ctx, func() {}
	}
	share := time.Until(dl) / time.Duration(left)
	if share < minAttempt {
		share = min(minAttempt, time.Until(dl))
	}
	return context.WithTimeout(ctx, share)
}

// socketType maps a Go network name to a socket type and the IP network
// names resolve to.
func socketType(network string) (typ int, ipNet string, err error) {
	switch network {
	case "tcp", "udp":
		ipNet = "ip"
	case "tcp4", "udp4":
		ipNet = "ip4"
	case "tcp6", "udp6":
		ipNet = "ip6"
	default:
		return 0, "", net.UnknownNetworkError(network)
	}
	typ = unix.SOCK_STREAM
	if network[0] == 'u' {
		typ = unix.SOCK_DGRAM
	}
	return typ, ipNet, nil
}

// dialAddr connects a socket made in the namespace to ap, waiting for the
// connection in the runtime's poller as net.Dialer does, and returns it
// as the net.Conn net.FileConn makes of it (a *net.TCPConn or
// *net.UDPConn with its addresses). Its errors are net.Dialer's: a
// *net.OpError "dial" carrying the connect error, or the timeout.
func (d *nsDialer) dialAddr(ctx context.Context, network string, typ int, ap netip.AddrPort) (net.Conn, error) {
	var raddr net.Addr = net.TCPAddrFromAddrPort(ap)
	if typ == unix.SOCK_DGRAM {
		raddr = net.UDPAddrFromAddrPort(ap)
	}
	opErr := func(err error) error { return &net.OpError{Op: "dial", Net: network, Addr: raddr, Err: err} }
	var family int
	var sa unix.Sockaddr
	if ip := ap.Addr(); ip.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ip.As4()}
	} else {
		zone, err := zoneID(ip.Zone())
		if err != nil {
			return nil, opErr(err)
		}
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ip.As16(), ZoneId: zone}
	}
	fd, err := d.socket(ctx, family, typ)
	if err != nil {
		return nil, opErr(err)
	}
	// A non-blocking descriptor: os.NewFile puts it in the poller, so
	// that waiting for the connection parks only this goroutine, bounded
	// by the write deadline.
	f := os.NewFile(uintptr(fd), "probe socket")
	if err := connect(ctx, f, sa); err != nil {
		f.Close()
		return nil, opErr(err)
	}
	if typ == unix.SOCK_STREAM {
		// Reads, writes and deadlines go through the poller as they
		// would on a net.TCPConn; f.SetWriteDeadline of connect is
		// undone for the caller.
		if err := f.SetWriteDeadline(time.Time{}); err != nil {
			f.Close()
			return nil, opErr(err)
		}
		return &streamConn{f: f, raddr: raddr}, nil
	}
	// A datagram socket must be a net.PacketConn (the resolver's DNS
	// exchange asks): net.FileConn's, on a duplicate.
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, opErr(err)
	}
	return c, nil
}

// streamConn is a connected stream socket as a net.Conn: the *os.File
// that connect waited on, its errors those net.TCPConn returns.
// net.FileConn would duplicate the descriptor and ask the kernel for its
// type and both its addresses, and the original be closed: seven system
// calls a probe, a twentieth of a probe's CPU at 50 probes a second.
type streamConn struct {
	f     *os.File
	raddr net.Addr

	laddrOnce sync.Once
	laddr     net.Addr
}

func (c *streamConn) Read(b []byte) (int, error) {
	n, err := c.f.Read(b)
	return n, c.opErr("read", err)
}

func (c *streamConn) Write(b []byte) (int, error) {
	n, err := c.f.Write(b)
	return n, c.opErr("write", err)
}

func (c *streamConn) Close() error { return c.opErr("close", c.f.Close()) }

func (c *streamConn) SetDeadline(t time.Time) error {
	return c.opErr("set", c.f.SetDeadline(t))
}

func (c *streamConn) SetReadDeadline(t time.Time) error {
	return c.opErr("set", c.f.SetReadDeadline(t))
}

func (c *streamConn) SetWriteDeadline(t time.Time) error {
	return c.opErr("set", c.f.SetWriteDeadline(t))
}

func (c *streamConn) RemoteAddr() net.Addr { return c.raddr }

// SyscallConn is the socket's, as net.TCPConn's.
func (c *streamConn) SyscallConn() (syscall.RawConn, error) { return c.f.SyscallConn() }

// LocalAddr asks the kernel once, when someone wants it (nothing in a
// probe does).
func (c *streamConn) LocalAddr() net.Addr {
	c.laddrOnce.Do(func() {
		rc, err := c.f.SyscallConn()
		if err != nil {
			return
		}
		_ = rc.Control(func(fd uintptr) {
			switch sa, _ := unix.Getsockname(int(fd)); sa := sa.(type) {
			case *unix.SockaddrInet4:
				c.laddr = &net.TCPAddr{IP: net.IP(sa.Addr[:]).To16(), Port: sa.Port}
			case *unix.SockaddrInet6:
				c.laddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port)))
			}
		})
	})
	return c.laddr
}

// opErr is err as net.TCPConn would return it: io.EOF as it is, anything
// else a *net.OpError naming both ends, a closed socket net.ErrClosed, a
// system call's error an *os.SyscallError of op.
func (c *streamConn) opErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, os.ErrClosed) {
		err = net.ErrClosed
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		err = os.NewSyscallError(op, errno)
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.raddr, Err: err}
}

// connect connects f's socket to sa within ctx, as net's connect: a
// connection in progress is waited for, and the poller's wake-ups are
// checked with SO_ERROR and getpeername (it may wake spuriously).
func connect(ctx context.Context, f *os.File, sa unix.Sockaddr) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		if err := f.SetWriteDeadline(dl); err != nil {
			return err
		}
	}
	// Cancelling ctx wakes the wait with a deadline in the past, never
	// once connect has returned (the caller then clears the deadline,
	// and a late one would cut its first write short).
	var mu sync.Mutex
	finished := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			_ = f.SetWriteDeadline(time.Unix(1, 0))
		}
	})
	defer func() {
		stop()
		mu.Lock()
		finished = true
		mu.Unlock()
	}()
	var cerr error
	started := false
	werr := rc.Write(func(fd uintptr) bool {
		if !started {
			started = true
			switch err := unix.Connect(int(fd), sa); err {
			case nil, unix.EISCONN:
				return true
			case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
				// A peer on this host has usually answered before
				// connect returned (the SYN and its answer go through
				// the veths in the call's own softirq, and the answer
				// is taken at its release of the socket): checked now,
				// the goroutine parks, and the poller wakes a thread
				// for it, only when the handshake is really under way.
			default:
				cerr = os.NewSyscallError("connect", err)
				return true
			}
		}
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			cerr = os.NewSyscallError("getsockopt", err)
			return true
		}
		switch e := unix.Errno(v); e {
		case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
			return false
		case 0, unix.EISCONN:
			if _, err := unix.Getpeername(int(fd)); err != nil {
				return false // a spurious wake-up: not connected yet
			}
			return true
		default:
			cerr = os.NewSyscallError("connect", e)
			return true
		}
	})
	if werr != nil {
		if errors.Is(werr, os.ErrDeadlineExceeded) && ctx.Err() != nil {
			return dialCtxErr(ctx)
		}
		return werr
	}
	return cerr
}

// dialCtxErr is ctx's end as net.Dialer reports it: a deadline is its
// "i/o timeout" (os.ErrDeadlineExceeded, a net.Error whose Timeout is
// true), a cancellation the context's error.
func dialCtxErr(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return os.ErrDeadlineExceeded
	}
	return ctx.Err()
}

// zoneID is an IPv6 zone's interface index. Only a numeric zone is
// taken: a name would be looked up among this process's interfaces, not
// among those of the namespace the socket is in.
func zoneID(zone string) (uint32, error) {
	if zone == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(zone, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("IPv6 zone %q: want the interface's index, names are not resolved in the node's network namespace", zone)
	}
	return uint32(n), nil
}
