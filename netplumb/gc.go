package netplumb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// GCConfig says where GC looks.
type GCConfig struct {
	// Config is the network whose leases and bridge are collected.
	Config Config
	// NodeNetNS is the path of the namespace holding the bridge (where the
	// plugins run); "" is this process's own.
	NodeNetNS string
	// NetNSDirs hold sandbox netns files, e.g. containerd's <state>/netns
	// or a Direct's netnsDir. Only files in them are ever removed.
	NetNSDirs []string
	// Owned, when set, says which file names in NetNSDirs a sandbox's
	// netns can have (RuntimeNetNSName for a runtime's); other files are
	// never removed. A shared directory such as /var/run/netns also holds
	// `ip netns add`'s namespaces and other programs': they are not ours
	// to collect. nil: every file, for a directory nothing else uses (a
	// Direct's).
	Owned func(name string) bool
	// MinAge protects what a concurrent ADD is creating: leases and netns
	// files younger than this are left alone even if no live sandbox
	// claims them, and so are veths into such a netns. 0 protects
	// nothing, which is right only when no ADD can run during GC.
	MinAge time.Duration
	// Now is the clock MinAge is measured against; nil is time.Now.
	Now func() time.Time
	// Logger gets one line per thing removed; nil discards.
	Logger *slog.Logger
}

// Live is a sandbox the runtime still has.
type Live struct {
	ID    string // sandbox id, the CNI container id
	NetNS string // its netns path; "" for host-network sandboxes
}

// GCReport counts what GC released. Errors holds the failures GC went on
// after; what they concern is left for the next round.
type GCReport struct {
	IPsReleased, VethsRemoved, NetNSRemoved int
	Errors                                  []error
}

// GC releases, in the node namespace, what sandboxes that no longer exist
// left behind:
//
//  1. veths enslaved to the bridge whose peer is in no live sandbox's
//     namespace (their IFLA_LINK_NETNSID is compared with the node
//     namespace's id of each live netns). A veth whose namespace is gone
//     has gone with it; this catches namespaces something still holds.
//  2. host-local leases in IPAMDir/<Name> whose container id is not live,
//     released by a DEL of the network list with no netns (bridge then
//     only releases the address; portmap drops the sandbox's rules and
//     bandwidth its IFB device), with the runtime arguments cached at ADD
//     if libcni's cache has them. If DEL fails, the lease files are
//     removed directly and the error is reported.
//  3. files in NetNSDirs that are not a live sandbox's netns: unmounted
//     (MNT_DETACH) and removed. Only nsfs bind mounts and empty regular
//     files (a netns file whose mount is gone) are touched, and with
//     Owned set only the names it owns.
//
// live must list every sandbox the runtime knows, ready or not. GC must
// not run concurrently with itself. The error is non-nil only when GC
// could not run at all (bad Config, unreadable node netns, cancelled
// context); the report says what it did until then.
func GC(ctx context.Context, g GCConfig, live []Live) (GCReport, error) {
	var rep GCReport
	cfg := g.Config.WithDefaults()
	list, err := loadList(cfg)
	if err != nil {
		return rep, err
	}
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := time.Now
	if g.Now != nil {
		now = g.Now
	}
	gc := &collector{cfg: cfg, g: g, list: list, log: log, rep: &rep, cutoff: now().Add(-g.MinAge),
		cni: newCNI(cfg)}

	gc.liveIDs = make(map[string]bool, len(live))
	var protected []string // netns paths whose veths stay
	for _, l := range live {
		gc.liveIDs[l.ID] = true
		if l.NetNS != "" {
			protected = append(protected, l.NetNS)
		}
	}
	liveIno := inodes(protected)
	stale, young, err := gc.scanNetNSDirs(liveIno)
	if err != nil {
		return rep, err
	}
	protected = append(protected, young...)

	if err := gc.veths(ctx, protected); err != nil {
		return rep, err
	}
	if err := gc.leases(ctx); err != nil {
		return rep, err
	}
	for _, f := range stale {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := RemoveNetNS(f); err != nil {
			rep.Errors = append(rep.Errors, err)
			continue
		}
		rep.NetNSRemoved++
		log.Info("removed stale netns file", "netns", f)
	}
	return rep, nil
}

type collector struct {
	cfg     Config
	g       GCConfig
	list    *libcni.NetworkConfigList
	cni     *libcni.CNIConfig
	log     *slog.Logger
	rep     *GCReport
	cutoff  time.Time
	liveIDs map[string]bool
}

type fileID struct{ dev, ino uint64 }

// inodes returns the identities of the files at paths that exist: two
// bind mounts of one namespace are the same nsfs inode.
func inodes(paths []string) map[fileID]bool {
	m := make(map[fileID]bool, len(paths))
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			m[fileID{st.Dev, st.Ino}] = true
		}
	}
	return m
}

// scanNetNSDirs sorts the files of NetNSDirs that no live sandbox uses
// into stale ones (to remove) and young ones (younger than MinAge: kept,
// and their veths with them).
func (gc *collector) scanNetNSDirs(live map[fileID]bool) (stale, young []string, _ error) {
	for _, dir := range gc.g.NetNSDirs {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("netplumb: gc: list %s: %w", dir, err)
		}
		for _, e := range ents {
			if e.IsDir() || (gc.g.Owned != nil && !gc.g.Owned(e.Name())) {
				continue
			}
			p := filepath.Join(dir, e.Name())
			var st unix.Stat_t
			var sfs unix.Statfs_t
			if err := unix.Stat(p, &st); err != nil {
				gc.rep.Errors = append(gc.rep.Errors, fmt.Errorf("netplumb: gc: stat %s: %w", p, err))
				continue
			}
			if live[fileID{st.Dev, st.Ino}] {
				continue
			}
			if err := unix.Statfs(p, &sfs); err != nil {
				gc.rep.Errors = append(gc.rep.Errors, fmt.Errorf("netplumb: gc: statfs %s: %w", p, err))
				continue
			}
			isNS := sfs.Type == unix.NSFS_MAGIC
			if !isNS && !(st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size == 0) {
				gc.log.Debug("left a file that is not a netns", "path", p)
				continue
			}
			// An nsfs inode's times are set when the namespace is first
			// bound or opened, right after it is created.
			if time.Unix(st.Mtim.Unix()).After(gc.cutoff) {
				young = append(young, p)
				continue
			}
			stale = append(stale, p)
		}
	}
	return stale, young, nil
}

// veths deletes the bridge's veths whose peer namespace is not protected.
func (gc *collector) veths(ctx context.Context, protected []string) error {
	node, err := openNS(gc.g.NodeNetNS)
	if err != nil {
		return fmt.Errorf("netplumb: gc: %w", err)
	}
	defer node.Close()
	br, err := node.LinkByName(gc.cfg.Bridge)
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return nil // no bridge, no veths on it
	}
	if err != nil {
		return fmt.Errorf("netplumb: gc: find bridge %s: %w", gc.cfg.Bridge, err)
	}
	keep := make(map[int]bool, len(protected))
	for _, p := range protected {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue // a namespace that is gone has no veths
		}
		if err != nil {
			// Without this sandbox's id its veth cannot be told from a
			// stale one: touch no veth this round.
			gc.rep.Errors = append(gc.rep.Errors, fmt.Errorf("netplumb: gc: open netns %s: %w; no veth collected", p, err))
			return nil
		}
		id, err := node.GetNetNsIdByFd(fd)
		unix.Close(fd)
		if err != nil {
			gc.rep.Errors = append(gc.rep.Errors, fmt.Errorf("netplumb: gc: netns id of %s: %w; no veth collected", p, err))
			return nil
		}
		if id >= 0 {
			keep[id] = true
		}
	}
	links, err := retryDump(node.LinkList)
	if err != nil {
		return fmt.Errorf("netplumb: gc: list links: %w", err)
	}
	for _, l := range links {
		a := l.Attrs()
		if _, ok := l.(*netlink.Veth); !ok || a.MasterIndex != br.Attrs().Index || a.NetNsID < 0 || keep[a.NetNsID] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := node.LinkDel(l); err != nil {
			var nf netlink.LinkNotFoundError
			if !errors.As(err, &nf) && !errors.Is(err, unix.ENODEV) {
				gc.rep.Errors = append(gc.rep.Errors, fmt.Errorf("netplumb: gc: delete veth %s: %w", a.Name, err))
			}
			continue
		}
		gc.rep.VethsRemoved++
		gc.log.Info("removed veth of a dead sandbox", "veth", a.Name, "peer_netns_id", a.NetNsID)
	}
	return nil
}

// lease is one host-local reservation: a file named by the address,
// holding the container id and interface name.
type lease struct {
	path       string
	id, ifName string
}

// leases releases the leases of sandboxes that are not live.
func (gc *collector) leases(ctx context.Context) error {
	dir := filepath.Join(gc.cfg.IPAMDir, gc.cfg.Name)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("netplumb: gc: list leases in %s: %w", dir, err)
	}
	type key struct{ id, ifName string }
	var order []key
	dead := map[key][]string{}
	for _, e := range ents {
		if _, err := netip.ParseAddr(e.Name()); err != nil || !e.Type().IsRegular() {
			continue // lock, last_reserved_ip.N
		}
		l, err := readLease(filepath.Join(dir, e.Name()))
		if err != nil {
			gc.rep.Errors = append(gc.rep.Errors, err)
			continue
		}
		if gc.liveIDs[l.id] {
			continue
		}
		if fi, err := e.Info(); err != nil || fi.ModTime().After(gc.cutoff) {
			continue // young, or gone meanwhile
		}
		k := key{l.id, l.ifName}
		if dead[k] == nil {
			order = append(order, k)
		}
		dead[k] = append(dead[k], l.path)
	}
	for _, k := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		files := dead[k]
		delErr := gc.del(ctx, k.id, k.ifName)
		released := 0
		for _, f := range files {
			if err := os.Remove(f); err == nil {
				if delErr == nil {
					// DEL succeeded and left the lease: release it anyway.
					gc.log.Warn("DEL left a lease; removed it", "container_id", k.id, "lease", f)
				}
			} else if !errors.Is(err, fs.ErrNotExist) {
				gc.rep.Errors = append(gc.rep.Errors, fmt.Errorf("netplumb: gc: remove lease %s: %w", f, err))
				continue
			}
			released++
		}
		if delErr != nil {
			gc.rep.Errors = append(gc.rep.Errors, fmt.Errorf("netplumb: gc: release %s: DEL failed, removed its lease files instead: %w", k.id, delErr))
			gc.log.Warn("DEL of a dead sandbox failed; removed its leases", "container_id", k.id, "err", delErr)
			// libcni removes its cache entry only after a DEL succeeds.
			os.Remove(filepath.Join(gc.cfg.CacheDir, "results", fmt.Sprintf("%s-%s-%s", gc.cfg.Name, k.id, k.ifName)))
		}
		gc.rep.IPsReleased += released
		gc.log.Info("released leases of a dead sandbox", "container_id", k.id, "if_name", k.ifName, "leases", released)
	}
	return nil
}

// del runs DEL without a netns for a dead sandbox, with the capability
// and CNI arguments of its ADD when libcni's cache still has them (portmap
// needs the mappings to find its rules).
func (gc *collector) del(ctx context.Context, id, ifName string) error {
	rt := runtimeConf(id, "", ifName, AddOptions{})
	if _, cached, err := gc.cni.GetNetworkListCachedConfig(gc.list, rt); err == nil && cached != nil {
		rt.Args, rt.CapabilityArgs = cached.Args, cached.CapabilityArgs
	}
	dctx, cancel := context.WithTimeout(ctx, undoTimeout)
	defer cancel()
	return inNetNS(gc.g.NodeNetNS, func() error { return gc.cni.DelNetworkList(dctx, gc.list, rt) })
}

// readLease parses a host-local reservation: "<id>\r\n<ifname>", or just
// "<id>" from plugins before v0.8 (whose interface was always eth0).
func readLease(path string) (lease, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return lease{}, fmt.Errorf("netplumb: gc: read lease %s: %w", path, err)
	}
	return parseLease(b, path)
}

// parseLease is readLease's parser: b is the content of the file at path.
// The container id and interface must be ones libcni would have passed to
// host-local (it refuses others before ADD): GC runs DEL with them and
// names libcni's cache file after them, so a foreign or corrupt lease
// must not reach beyond that directory.
func parseLease(b []byte, path string) (lease, error) {
	id, ifName, ok := bytes.Cut(b, []byte("\r\n"))
	l := lease{path: path, id: string(bytes.TrimSpace(id)), ifName: string(bytes.TrimSpace(ifName))}
	if !ok || l.ifName == "" {
		l.ifName = DefaultIfName
	}
	if l.id == "" {
		return lease{}, fmt.Errorf("netplumb: gc: lease %s names no container: %w", path, ErrInvalidConfig)
	}
	if !cniName.MatchString(l.id) {
		return lease{}, fmt.Errorf("netplumb: gc: lease %s: container id %.80q is not a CNI container id: %w", path, l.id, ErrInvalidConfig)
	}
	if err := validIfName(l.ifName); err != nil {
		return lease{}, fmt.Errorf("netplumb: gc: lease %s: interface %.80q: %v: %w", path, l.ifName, err, ErrInvalidConfig)
	}
	return l, nil
}

// RuntimeNetNSName reports whether name is one a CRI runtime gives the
// netns files it makes for its sandboxes: containerd's "cni-" and a
// random UUID (pkg/netns), CRI-O's bare UUID. A namespace someone made
// with `ip netns add NAME` in the same directory has another name.
func RuntimeNetNSName(name string) bool {
	name = strings.TrimPrefix(name, "cni-")
	// 8-4-4-4-12 hex digits.
	if len(name) != 36 {
		return false
	}
	for i, r := range name {
		switch i {
		case 8, 13, 18, 23:
			if r != '-' {
				return false
			}
		default:
			if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
				return false
			}
		}
	}
	return true
}
