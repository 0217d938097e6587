package nodevm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nodeguard/nodeguard/internal/flock"
	"github.com/nodeguard/nodeguard/lab/vmtest"
)

// Suite is the Debian release the root filesystem is built from: the
// production nodes' and this machine's.
const Suite = "bookworm"

// DefaultSources is the host's deb822 sources file. It is mmdebstrap's
// MIRROR: an existing file is copied into the chroot as its apt sources, so
// no archive host is named anywhere here.
const DefaultSources = "/etc/apt/sources.list.d/debian.sources"

// Packages are what mmdebstrap installs on top of the essential set: systemd
// as PID 1 (with udev, dbus for runc's systemd cgroup driver, kmod for the
// kernel's module requests), containerd with runc and the CNI plugins, and
// the tools the checks run (ip, mount, ps, iptables for the CNI plugins'
// rules), and NFS: nfs-common's mount.nfs, which nodeguard's nfs volumes
// run as the kubelet's do, and nfs-kernel-server's rpc.nfsd, exportfs and
// rpc.mountd for the server the NFS check starts in a network namespace of
// its own (the kernel's nfs and nfsd modules are in kernel/fs, sunrpc in
// kernel/net: moduleTrees has them). And AppArmor's userspace: Debian's
// kernel has AppArmor built in and enabled (its CONFIG_LSM list), but
// containerd applies a profile only where /sbin/apparmor_parser exists
// (its hostSupports; it loads its cri-containerd.apparmor.d default
// profile with it, from the package's abstractions), and the AppArmor
// check loads its Localhost profiles with it too. e2fsprogs: the mkfs.ext4 and
// fsck.ext4 that nodeguard's block volumes run (mount-utils'
// SafeFormatAndMount, the kubelet's), as on any Debian node, and the
// debugfs the block check reads the device with after the pod is gone;
// the essential set has none of them.
var Packages = []string{
	"systemd", "systemd-sysv", "udev", "dbus", "kmod",
	"containerd", "runc", "iproute2", "containernetworking-plugins",
	"util-linux", "mount", "procps", "iptables",
	"nfs-common", "nfs-kernel-server",
	"apparmor",
	"e2fsprogs",
}

// rootfsLayoutVersion changes whenever the build lays the image out
// differently for the same inputs, to invalidate cached images.
const rootfsLayoutVersion = 1

// rootfsSize is the image's apparent size (the file is sparse: about 450 MB
// are allocated): the packages and modules take ~330 MB, the rest is room
// for containerd's content and snapshots, pod logs and volumes. Writes go
// to qemu's snapshot, never to the cached image.
const rootfsSize = "2G"

// Bounds of the build's steps: the whole build takes 1-3 minutes.
const (
	mmdebstrapTimeout = 15 * time.Minute // ~20 s with a fast mirror, 2 min measured on CI
	depmodTimeout     = 2 * time.Minute  // ~2 s
	mkfsTimeout       = 5 * time.Minute  // 1-14 s
)

// cacheSubdir is the node lane's part of the VM cache directory.
const cacheSubdir = "node"

// keepImages is how many root filesystem images the cache keeps (the
// newest by use): two worktrees with different inputs do not rebuild each
// other's, and an old one is removed only after two newer ones exist.
const keepImages = 3

// Rootfs is everything that goes into the root filesystem image and its
// initrd; Key hashes it.
type Rootfs struct {
	// Kernel is the guest kernel, whose modules the image carries.
	Kernel *vmtest.Kernel
	// Sources is the content of the sources file given to mmdebstrap.
	Sources []byte
	// SandboxImage is containerd's sandbox_image, the local pause image.
	SandboxImage string
	// Mmdebstrap is `mmdebstrap --version`.
	Mmdebstrap string
	// BusyboxSum is the sha256 of the initrd's busybox.
	BusyboxSum string
}

// mmdebstrapArgs returns mmdebstrap's arguments. Documentation, manual
// pages and locales are left out of the image (they only cost mkfs time).
func mmdebstrapArgs(target, sources string) []string {
	return []string{
		"--mode=root", "--variant=essential",
		"--include=" + strings.Join(Packages, ","),
		"--dpkgopt=path-exclude=/usr/share/doc/*",
		"--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*",
		Suite, target, sources,
	}
}

// Key identifies the image: it changes with the package list, mmdebstrap's
// arguments and version, the sources, the kernel, the module selection,
// every baked-in file, the initrd's script, modules and busybox, and the
// layout.
func (r *Rootfs) Key() (string, error) {
	if r.Kernel == nil || r.Kernel.Release == "" || r.Kernel.Package == "" || r.Kernel.Version == "" {
		return "", errors.New("rootfs key: no kernel")
	}
	files, err := BakedFiles(r.SandboxImage)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	part := func(name string, values ...string) {
		fmt.Fprintf(h, "%s:%d\n", name, len(values))
		for _, v := range values {
			fmt.Fprintf(h, "%d:%s\n", len(v), v)
		}
	}
	part("layout", fmt.Sprint(rootfsLayoutVersion), rootfsSize, fmt.Sprint(initrdLayoutVersion))
	part("mmdebstrap", append(mmdebstrapArgs("TARGET", "SOURCES"), r.Mmdebstrap)...)
	part("sources", string(r.Sources))
	part("kernel", r.Kernel.Package, r.Kernel.Version, r.Kernel.Release)
	part("modules", moduleTrees...)
	for _, f := range files {
		part("file", f.Path, f.Mode.String(), f.Data, f.Link)
	}
	part("initrd", append([]string{initrdInit, r.BusyboxSum}, append(initrdApplets, initrdModulesWanted...)...)...)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Image is a built root filesystem and its initrd in the cache.
type Image struct {
	Key    string
	Rootfs string // ext4 image, booted with snapshot=on
	Initrd string // newc archive
	// Built reports whether this call built them.
	Built bool
	// BuildTime is how long the build took, by step.
	BuildTime map[string]time.Duration
}

// imagePaths returns the cache paths of key's image and initrd.
func imagePaths(cache, key string) (rootfs, initrd string) {
	dir := filepath.Join(cache, cacheSubdir)
	return filepath.Join(dir, "rootfs-"+key+".img"), filepath.Join(dir, "initrd-"+key+".cpio")
}

// CachedImage returns the image for r, building it first when the cache
// does not have it. Builds are serialised by an flock on the cache's node
// directory and published by renames, so concurrent runs build once and
// never see half an image.
func CachedImage(ctx context.Context, cache, sources string, r *Rootfs, log *slog.Logger) (*Image, error) {
	key, err := r.Key()
	if err != nil {
		return nil, err
	}
	img := &Image{Key: key}
	img.Rootfs, img.Initrd = imagePaths(cache, key)
	if complete(img) {
		touch(img)
		return img, nil
	}
	dir := filepath.Join(cache, cacheSubdir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("build root filesystem: %w", err)
	}
	unlock, err := flock.Lock(ctx, filepath.Join(dir, "lock"))
	if err != nil {
		return nil, fmt.Errorf("build root filesystem: %w", err)
	}
	defer unlock()
	if complete(img) {
		touch(img)
		return img, nil // another run built it while we waited
	}
	vmtest.SweepStaleRuns(dir, buildDirPrefix)
	if err := build(ctx, dir, sources, r, img, log); err != nil {
		return nil, err
	}
	img.Built = true
	prune(dir, keepImages)
	return img, nil
}

// buildDirPrefix starts a build's temporary directory, followed by the
// builder's pid (so a killed build's directory is swept).
const buildDirPrefix = "build-"

func complete(img *Image) bool {
	a, errA := os.Stat(img.Rootfs)
	b, errB := os.Stat(img.Initrd)
	return errA == nil && errB == nil && a.Mode().IsRegular() && b.Mode().IsRegular()
}

// touch marks img as used now, for prune.
func touch(img *Image) {
	now := time.Now()
	_ = os.Chtimes(img.Rootfs, now, now)
	_ = os.Chtimes(img.Initrd, now, now)
}

// prune removes all but the keep most recently used images with their
// initrds. A qemu booting a removed image keeps its open file.
func prune(dir string, keep int) {
	imgs, _ := filepath.Glob(filepath.Join(dir, "rootfs-*.img"))
	type used struct {
		path string
		t    time.Time
	}
	var all []used
	for _, p := range imgs {
		if st, err := os.Stat(p); err == nil {
			all = append(all, used{p, st.ModTime()})
		}
	}
	slices.SortFunc(all, func(a, b used) int { return b.t.Compare(a.t) })
	for i := keep; i < len(all); i++ {
		key := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(all[i].path), "rootfs-"), ".img")
		_ = os.Remove(all[i].path)
		_ = os.Remove(filepath.Join(dir, "initrd-"+key+".cpio"))
	}
}

// build makes the image in a temporary directory beneath dir and renames
// it into place. The caller holds the lock.
func build(ctx context.Context, dir, sources string, r *Rootfs, img *Image, log *slog.Logger) error {
	start := time.Now()
	img.BuildTime = map[string]time.Duration{}
	step := func(name string, t0 time.Time) { img.BuildTime[name] = time.Since(t0).Round(time.Millisecond) }
	tmp, err := os.MkdirTemp(dir, fmt.Sprintf("%s%d-", buildDirPrefix, os.Getpid()))
	if err != nil {
		return fmt.Errorf("build root filesystem: %w", err)
	}
	defer os.RemoveAll(tmp)
	root := filepath.Join(tmp, "root")

	t0 := time.Now()
	log.Info("building the node lane's root filesystem with mmdebstrap (first use of these inputs; cached afterwards)",
		"suite", Suite, "packages", strings.Join(Packages, ","), "key", img.Key)
	if err := runLogged(ctx, mmdebstrapTimeout, log, "mmdebstrap", "", nil, "mmdebstrap", mmdebstrapArgs(root, sources)...); err != nil {
		return fmt.Errorf("build root filesystem: %w", err)
	}
	step("mmdebstrap", t0)

	t0 = time.Now()
	log.Info("adding the kernel's modules", "package", r.Kernel.Package, "version", r.Kernel.Version)
	deb, err := vmtest.DownloadPackage(ctx, log, tmp, r.Kernel.Package, r.Kernel.Version)
	if err != nil {
		return fmt.Errorf("build root filesystem: %w", err)
	}
	modDir := filepath.Join(root, "usr/lib/modules", r.Kernel.Release)
	n, err := extractModules(ctx, deb, r.Kernel.Release, modDir)
	if err != nil {
		return fmt.Errorf("build root filesystem: %w", err)
	}
	_ = os.Remove(deb)
	if err := runLogged(ctx, depmodTimeout, log, "depmod", "", nil, "chroot", root, "depmod", "-a", r.Kernel.Release); err != nil {
		return fmt.Errorf("build root filesystem: %w", err)
	}
	step("modules", t0)
	log.Info("modules added", "files", n, "release", r.Kernel.Release, "duration", img.BuildTime["modules"])

	files, err := BakedFiles(r.SandboxImage)
	if err != nil {
		return err
	}
	if err := writeFiles(root, files); err != nil {
		return fmt.Errorf("build root filesystem: %w", err)
	}

	t0 = time.Now()
	initrd := filepath.Join(tmp, "initrd.cpio")
	if err := buildInitrd(ctx, initrd, modDir); err != nil {
		return fmt.Errorf("build initrd: %w", err)
	}
	step("initrd", t0)

	t0 = time.Now()
	image := filepath.Join(tmp, "rootfs.img")
	log.Info("making the root filesystem image (mkfs.ext4 -d)", "size", rootfsSize)
	if err := mkfs(ctx, log, root, image, RootLabel, rootfsSize); err != nil {
		return fmt.Errorf("build root filesystem: %w", err)
	}
	step("mkfs", t0)

	if err := os.Rename(initrd, img.Initrd); err != nil {
		return fmt.Errorf("publish initrd: %w", err)
	}
	if err := os.Rename(image, img.Rootfs); err != nil {
		return fmt.Errorf("publish root filesystem: %w", err)
	}
	step("total", start)
	log.Info("root filesystem cached", "path", img.Rootfs, "mmdebstrap", img.BuildTime["mmdebstrap"],
		"modules", img.BuildTime["modules"], "mkfs", img.BuildTime["mkfs"], "total", img.BuildTime["total"])
	return nil
}

// buildInitrd writes the initrd with the root disk's modules from modDir,
// ordered by its modules.dep.
func buildInitrd(ctx context.Context, name, modDir string) error {
	dep, err := os.ReadFile(filepath.Join(modDir, "modules.dep"))
	if err != nil {
		return err
	}
	md, err := ParseModulesDep(dep)
	if err != nil {
		return err
	}
	names, files, err := md.LoadOrder(initrdModulesWanted)
	if err != nil {
		return err
	}
	mods := make([]InitrdModule, len(names))
	for i := range names {
		b, err := readModule(ctx, filepath.Join(modDir, filepath.FromSlash(files[i])))
		if err != nil {
			return err
		}
		mods[i] = InitrdModule{Name: names[i], Data: b}
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	err = WriteInitrd(f, vmtest.Busybox, mods)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeFiles writes files beneath root, resolving every path inside it
// (os.Root): a symbolic link in the image never points the write at the
// host.
func writeFiles(root string, files []File) error {
	r, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, f := range files {
		rel := strings.TrimPrefix(filepath.Clean(f.Path), "/")
		if rel == "" || rel == "." || !filepath.IsAbs(f.Path) {
			return fmt.Errorf("write %q: not an absolute path below /", f.Path)
		}
		if err := r.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
		if err := r.Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
		if f.Link != "" {
			if err := r.Symlink(f.Link, rel); err != nil {
				return fmt.Errorf("write %s: %w", f.Path, err)
			}
			continue
		}
		if err := r.WriteFile(rel, []byte(f.Data), f.Mode.Perm()); err != nil {
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
		if err := r.Chmod(rel, f.Mode.Perm()); err != nil { // WriteFile's mode is masked by the umask
			return fmt.Errorf("write %s: %w", f.Path, err)
		}
	}
	return nil
}

// mkfs makes an ext4 image of size with label from the directory src
// (mkfs.ext4 -d), owned as the files are.
func mkfs(ctx context.Context, log *slog.Logger, src, image, label, size string) error {
	return runLogged(ctx, mkfsTimeout, log, "mkfs.ext4", "", nil, "mkfs.ext4", "-q", "-F", "-L", label,
		"-E", "lazy_itable_init=1,lazy_journal_init=1", "-d", src, image, size)
}

// runLogged runs name with args under a timeout, in its own process group
// (stopped as a group when the timeout or ctx ends), with env added to this
// process's environment, and logs each line of its output as it comes,
// prefixed with what.
func runLogged(ctx context.Context, timeout time.Duration, log *slog.Logger, what, dir string, env []string, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var tail lastLines
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if line == "" {
				continue
			}
			tail.add(line)
			log.Info(what + ": " + line)
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	<-done
	if ctx.Err() == context.DeadlineExceeded {
		return fmt.Errorf("%s: stopped after %s", what, timeout)
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %s", what, err, tail.String())
	}
	return nil
}

// lastLines keeps the last few lines of a command's output for its error.
type lastLines struct{ lines []string }

func (l *lastLines) add(s string) {
	l.lines = append(l.lines, s)
	if len(l.lines) > 8 {
		l.lines = l.lines[1:]
	}
}

func (l *lastLines) String() string { return strings.Join(l.lines, " | ") }

// sha256File returns the hex sha256 of a file.
func sha256File(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// commandOutput runs name and returns its trimmed output.
func commandOutput(ctx context.Context, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(bytes.TrimSpace(out)), nil
}
