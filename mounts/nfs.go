package mounts

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/mount-utils"
)

// PluginNFS is the kubelet's nfs volume plugin directory name.
const PluginNFS = "kubernetes.io~nfs"

// Bounds of the NFS client calls. One attempt of mount.nfs (nfsRetry) can
// still outlast a pod worker's patience (a server whose packets are
// dropped: the kernel's RPC timeouts) and an unmount of a mount whose
// server is gone blocks until it answers, so nodeguard never waits for
// either: a pod worker waits at most these, then the call goes on in the
// background (mount) or is forced and detached (unmount).
const (
	// DefaultNFSMountTimeout is how long Setup waits for one mount(8):
	// a reachable server answers in well under a second; TCG guests take
	// a few.
	DefaultNFSMountTimeout = 30 * time.Second
	// DefaultNFSUnmountTimeout is how long Teardown waits for umount(8)
	// before umount -f (mount-utils' UnmountWithForce), as long again
	// for that before it detaches the mount (MNT_DETACH), and as long
	// again for the detach.
	DefaultNFSUnmountTimeout = 10 * time.Second
)

// nfsFSType is what the kubelet's nfs plugin passes to mount(8): mount.nfs
// picks the protocol version (4.2 down to 3) unless mountOptions say.
const nfsFSType = "nfs"

// NFSMounter mounts and unmounts NFS exports. k8s.io/mount-utils' Mounter
// is the production one (it runs mount(8), which needs mount.nfs from
// nfs-common, as the kubelet's nfs plugin does); its FakeMounter tests.
type NFSMounter interface {
	Mount(source, target, fstype string, options []string) error
	UnmountWithForce(target string, timeout time.Duration) error
}

// ErrMountInProgress is wrapped by Setup while an earlier mount(8) of the
// same volume has not returned (its server does not answer): no second
// one is started, and the pod waits for the next sync.
var ErrMountInProgress = errors.New("NFS mount still in progress")

// nfsClient runs the NFS mounts of one Volumes: in the node's network
// namespace, bounded, one at a time per target.
type nfsClient struct {
	mounter         NFSMounter
	netns           string // "" for the agent's own
	mountTimeout    time.Duration
	unmountTimeout  time.Duration
	detach          func(target string) error
	mu              sync.Mutex
	inflight        map[string]chan error // target -> result of its running mount
	unmountInflight map[string]bool
}

func newNFSClient(cfg Config) (*nfsClient, error) {
	c := &nfsClient{
		mounter:         cfg.NFSMounter,
		netns:           cfg.NodeNetNS,
		mountTimeout:    cfg.NFSMountTimeout,
		unmountTimeout:  cfg.NFSUnmountTimeout,
		detach:          func(p string) error { return unix.Unmount(p, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH) },
		inflight:        map[string]chan error{},
		unmountInflight: map[string]bool{},
	}
	if c.mounter == nil {
		// Without systemd-run: the kubelet's nfs plugin mounts with
		// MountSensitiveWithoutSystemd too; an NFS mount has no daemon to
		// keep alive in a scope of its own.
		m, ok := mount.NewWithoutSystemd("").(NFSMounter)
		if !ok {
			return nil, errors.New("mount-utils' mounter cannot force unmounts")
		}
		c.mounter = m
	}
	if c.netns != "" && !filepath.IsAbs(c.netns) {
		return nil, fmt.Errorf("NodeNetNS %q must be absolute", c.netns)
	}
	if c.mountTimeout < 0 || c.unmountTimeout < 0 {
		return nil, fmt.Errorf("NFS timeouts must not be negative (mount %s, unmount %s)", c.mountTimeout, c.unmountTimeout)
	}
	if c.mountTimeout == 0 {
		c.mountTimeout = DefaultNFSMountTimeout
	}
	if c.unmountTimeout == 0 {
		c.unmountTimeout = DefaultNFSUnmountTimeout
	}
	return c, nil
}

// nfsSource is the kubelet's mount source for an export: server:path,
// with an IPv6 address in brackets.
func nfsSource(s *corev1.NFSVolumeSource) string {
	server := s.Server
	if a, err := netip.ParseAddr(server); err == nil && a.Is6() {
		server = "[" + server + "]"
	}
	return server + ":" + s.Path
}

// nfsRetry is the retry= mount option nodeguard adds unless the volume's
// mountOptions give one: mount(8) makes a single attempt. Left to its
// default, mount.nfs retries a server that does not answer for 2 minutes
// inside one mount(8), hiding its error ("No route to host") behind
// nodeguard's NFSMountTimeout and keeping a deleted pod's directory that
// long. The pod worker retries a failed mount at its next syncs anyway,
// each failure in the pod's status, as the kubelet's volume manager
// retries: the server is still found once it answers. retry= concerns
// mount(8) alone, never the I/O of a mounted export (soft, timeo and
// retrans do, and stay the user's).
const nfsRetry = "retry=0"

// nfsOptions are the mount options of an export, as the kubelet's nfs
// plugin joins them: the PersistentVolume's mountOptions (none for an
// inline volume) and "ro" for a read-only volume, without duplicates;
// then nfsRetry unless they name a retry= of their own.
func nfsOptions(s *corev1.NFSVolumeSource, mountOptions []string) []string {
	var opts []string
	for _, o := range mountOptions {
		if !slices.Contains(opts, o) {
			opts = append(opts, o)
		}
	}
	if s.ReadOnly && !slices.Contains(opts, "ro") {
		opts = append(opts, "ro")
	}
	if !slices.ContainsFunc(opts, func(o string) bool { return strings.HasPrefix(o, "retry=") }) {
		opts = append(opts, nfsRetry)
	}
	return opts
}

// validateNFS checks an nfs volume source: a server (a host name or an
// address, as mount.nfs takes it) and an absolute export path.
func validateNFS(s *corev1.NFSVolumeSource, np *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch sp := np.Child("server"); {
	case s.Server == "":
		errs = append(errs, field.Required(sp, "the NFS server's host name or address"))
	case strings.ContainsAny(s.Server, " \t\n,:/") && !isIP6(s.Server):
		errs = append(errs, field.Invalid(sp, s.Server, "must be a host name or an IP address"))
	}
	switch pp := np.Child("path"); {
	case s.Path == "":
		errs = append(errs, field.Required(pp, "the exported path on the server"))
	case !path.IsAbs(s.Path):
		errs = append(errs, field.Invalid(pp, s.Path, "must be an absolute path"))
	case strings.ContainsAny(s.Path, "\n,"):
		errs = append(errs, field.Invalid(pp, s.Path, "must not contain a newline or a comma"))
	}
	return errs
}

func isIP6(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6()
}

// ensureNFS mounts the export of s on dir (the volume directory, made
// beneath the pod's directory and not yet handed to any container) unless
// an NFS file system is mounted there already. The mount runs in the
// node's network namespace, where the NFS client's socket is made, and
// Setup waits for it at most mountTimeout: a mount(8) still running then
// is left to finish (mount.nfs gives up by itself), and every Setup until
// it returns answers ErrMountInProgress instead of starting another.
func (c *nfsClient) ensureNFS(dir string, s *corev1.NFSVolumeSource, mountOptions []string) (mounted bool, err error) {
	c.mu.Lock()
	done, running := c.inflight[dir]
	c.mu.Unlock()
	if running {
		select {
		case err := <-done:
			c.finish(dir)
			if err != nil {
				return false, err
			}
		default:
			return false, fmt.Errorf("mount %s on %s: %w", nfsSource(s), dir, ErrMountInProgress)
		}
	}
	if fstype, ok, err := mountedFSType(dir); err != nil {
		return false, err
	} else if ok {
		if !isNFS(fstype) {
			return false, fmt.Errorf("%s: a file system other than NFS (%s) is mounted there", dir, fstype)
		}
		return false, nil
	}
	src, opts := nfsSource(s), nfsOptions(s, mountOptions)
	done = make(chan error, 1)
	c.mu.Lock()
	c.inflight[dir] = done
	c.mu.Unlock()
	go func() { done <- c.mount(src, dir, opts) }()
	t := time.NewTimer(c.mountTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		c.finish(dir)
		if err != nil {
			return false, err
		}
		return true, nil
	case <-t.C:
		return false, fmt.Errorf("mount %s on %s: no answer after %s (the server may be unreachable; mount.nfs keeps trying): %w", src, dir, c.mountTimeout, ErrMountInProgress)
	}
}

func (c *nfsClient) finish(dir string) {
	c.mu.Lock()
	delete(c.inflight, dir)
	c.mu.Unlock()
}

// busy reports whether a mount(8) on dir, or beneath it, has not
// returned: Teardown must not remove a directory a late mount would land
// on.
func (c *nfsClient) busy(dir string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for t, done := range c.inflight {
		if t != dir && !strings.HasPrefix(t, dir+"/") {
			continue
		}
		select {
		case <-done:
			// Returned since: its result no longer matters, the pod
			// goes.
			delete(c.inflight, t)
		default:
			return t, true
		}
	}
	return "", false
}

// mount runs the mounter, in the node's network namespace when one is set.
// ns.Do locks a goroutine to a thread moved into it: mount(8), forked
// from that thread, and the kernel's NFS client it starts open their
// sockets there.
func (c *nfsClient) mount(src, dir string, opts []string) error {
	run := func() error {
		if err := c.mounter.Mount(src, dir, nfsFSType, opts); err != nil {
			return fmt.Errorf("mount %s on %s (options %q): %w", src, dir, opts, err)
		}
		return nil
	}
	if c.netns == "" {
		return run()
	}
	n, err := ns.GetNS(c.netns)
	if err != nil {
		return fmt.Errorf("mount %s: open the node's network namespace %s: %w", src, c.netns, err)
	}
	defer n.Close()
	return n.Do(func(ns.NetNS) error { return run() })
}

// unmount unmounts the NFS mount p as the kubelet's mount cleanup does
// (mount-utils' UnmountWithForce: umount(8), after a timeout umount -f),
// and when even that has not returned after as long again, detaches it
// (MNT_DETACH): a mount whose server is gone never holds a pod worker.
// The umount still running is left to finish; one at a time per path.
func (c *nfsClient) unmount(p string) (detached bool, err error) {
	c.mu.Lock()
	if c.unmountInflight[p] {
		c.mu.Unlock()
		return true, c.detachErr(p)
	}
	c.unmountInflight[p] = true
	c.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		err := c.mounter.UnmountWithForce(p, c.unmountTimeout)
		c.mu.Lock()
		delete(c.unmountInflight, p)
		c.mu.Unlock()
		done <- err
	}()
	t := time.NewTimer(2 * c.unmountTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err == nil {
			return false, nil
		}
		if _, ok, merr := mountedFSType(p); merr == nil && !ok {
			return false, nil // unmounted meanwhile
		}
		return false, fmt.Errorf("%w: unmount NFS %s: %w", ErrMountsRemain, p, err)
	case <-t.C:
		return true, c.detachErr(p)
	}
}

// detachErr detaches p. MNT_DETACH itself returns at once, but the last
// reference it drops may tear the NFS superblock down in the calling
// thread, which waits for the server: it is bounded like the rest, and a
// detach still running is reported, never waited for.
func (c *nfsClient) detachErr(p string) error {
	done := make(chan error, 1)
	go func() { done <- c.detach(p) }()
	t := time.NewTimer(c.unmountTimeout)
	defer t.Stop()
	var err error
	select {
	case err = <-done:
	case <-t.C:
		if _, ok, merr := mountedFSType(p); merr == nil && !ok {
			return nil // detached; the superblock goes when the server answers
		}
		return fmt.Errorf("%w: detach NFS %s: no answer after %s", ErrMountsRemain, p, c.unmountTimeout)
	}
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return fmt.Errorf("%w: detach NFS %s whose unmount does not return: %w", ErrMountsRemain, p, err)
}

// mountedFSType reports the file system type mounted at exactly p, from
// /proc/self/mountinfo: it never stats p, which would wait for an NFS
// server that does not answer.
func mountedFSType(p string) (fstype string, ok bool, err error) {
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(p))
	if err != nil {
		return "", false, fmt.Errorf("read mountinfo for %s: %w", p, err)
	}
	if len(infos) == 0 {
		return "", false, nil
	}
	return infos[len(infos)-1].FSType, true, nil
}

// isNFS reports whether a mountinfo file system type is the NFS client's.
func isNFS(fstype string) bool {
	return fstype == "nfs" || fstype == "nfs4"
}

// nfsDirMode is the kubelet's for an nfs volume's directory: the agent's
// own until the export is mounted on it.
const nfsDirMode = 0o750

// setupNFS makes RootDir/pods/<uid>/volumes/kubernetes.io~nfs/<name> and
// mounts the export on it, as the kubelet's nfs plugin (mount -t nfs
// server:path with mountOptions, ro for a read-only volume). A volume
// already mounted is taken as it is: its directory is looked up in
// mountinfo, never stat'ed, so a server that stopped answering does not
// hold the pod's sync. mountOptions are a PersistentVolume's (nil inline).
func (m *Volumes) setupNFS(podsFd int, pod *corev1.Pod, name string, s *corev1.NFSVolumeSource, mountOptions []string) (*volume, error) {
	parentRel := filepath.Join(string(pod.UID), volumesDirName, PluginNFS)
	dir := filepath.Join(m.podsDir, parentRel, name)
	vol := &volume{name: name, plugin: PluginNFS, path: dir, readOnly: s.ReadOnly, createSubPaths: !s.ReadOnly}
	if fstype, ok, err := mountedFSType(dir); err != nil {
		return nil, volumeErr("set up", name, dir, err)
	} else if ok {
		if !isNFS(fstype) {
			return nil, volumeErr("set up", name, dir, fmt.Errorf("a file system other than NFS (%s) is mounted there", fstype))
		}
		return vol, nil
	}
	pfd, err := mkdirAllBeneath(podsFd, parentRel, podDirMode)
	if err != nil {
		return nil, volumeErr("set up", name, dir, err)
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, name, nfsDirMode); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, volumeErr("set up", name, dir, fmt.Errorf("mkdir: %w", err))
	}
	// mount(8) takes a path: the directory must be the one just made
	// beneath the pod root, not a symlink planted in its place.
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, volumeErr("set up", name, dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, volumeErr("set up", name, dir, fmt.Errorf("%w: not a directory", ErrUnsafePath))
	}
	mounted, err := m.nfs.ensureNFS(dir, s, mountOptions)
	if err != nil {
		return nil, volumeErr("mount", name, dir, err)
	}
	if mounted {
		m.log.Info("mounted nfs", "pod_uid", string(pod.UID), "volume", name, "path", dir, "source", nfsSource(s),
			"options", strings.Join(nfsOptions(s, mountOptions), ","), "netns", m.nfs.netns)
	}
	return vol, nil
}

// Plugin is the kubelet's plugin directory of nfs volumes: with a
// PersistentVolume of type nfs the volume is mounted at
// RootDir/pods/<uid>/volumes/kubernetes.io~nfs/<persistent volume name>,
// as the kubelet's nfs plugin mounts it.
func (c *nfsClient) Plugin() string { return PluginNFS }

// mountPV mounts a PersistentVolume of type nfs on dir, an existing
// directory beneath the pod's: the export with the volume's
// spec.mountOptions, read-only when the volume's source or the pod's
// claim (readOnly) says so. It leaves an NFS mount already there as it
// is, and is bounded as an inline volume's mount (ensureNFS). It is the
// body of MountPV.
func (c *nfsClient) mountPV(dir string, pv *corev1.PersistentVolume, readOnly bool) error {
	if pv.Spec.NFS == nil {
		return fmt.Errorf("mount persistentvolume %s on %s: not of type nfs", pv.Name, dir)
	}
	if errs := validateNFS(pv.Spec.NFS, field.NewPath("spec", "nfs")); len(errs) > 0 {
		return fmt.Errorf("mount persistentvolume %s: %w", pv.Name, errs.ToAggregate())
	}
	s := *pv.Spec.NFS
	s.ReadOnly = s.ReadOnly || readOnly
	if _, err := c.ensureNFS(dir, &s, pv.Spec.MountOptions); err != nil {
		return fmt.Errorf("mount persistentvolume %s: %w", pv.Name, err)
	}
	return nil
}

// MountPV implements PersistentVolumeMounter for PersistentVolumes of type
// nfs.
func (c *nfsClient) MountPV(_ context.Context, req PVMount) error {
	return c.mountPV(req.Dir, req.PV, req.ReadOnly)
}
