package vmtest

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// KernelSeries are the kernel series accepted in NODEGUARD_VM_KERNEL, oldest
// first: Debian 12's own kernel and the newer one it also ships.
func KernelSeries() []string { return []string{"6.1", "6.12"} }

// ErrUnknownKernel reports a kernel series with no package.
var ErrUnknownKernel = errors.New("unknown kernel series")

// Kernel is a Debian kernel unpacked into the cache.
type Kernel struct {
	// Series is what was asked for, e.g. "6.1".
	Series string
	// Package is the kernel image package, e.g. linux-image-6.1.0-57-amd64.
	Package string
	// Version is its Debian version, e.g. 6.1.192-3.
	Version string
	// Release is the kernel release (uname -r), e.g. 6.1.0-57-amd64.
	Release string
	// Vmlinux is the cached uncompressed ELF kernel.
	Vmlinux string
}

// String returns "<release> (<package> <version>)".
func (k *Kernel) String() string {
	return fmt.Sprintf("%s (%s %s)", k.Release, k.Package, k.Version)
}

// metaPackage returns the package to resolve for series: Debian 12's
// metapackage that depends on the newest kernel of that series. A value
// starting with "linux-image-" is used as the package name itself.
func metaPackage(series string) (string, error) {
	switch {
	case strings.HasPrefix(series, "linux-image-"):
		return series, nil
	case series == "6.1":
		return "linux-image-amd64", nil
	case series == "6.12":
		return "linux-image-6.12-amd64", nil
	}
	return "", fmt.Errorf("kernel %q: %w (known: %s, or a linux-image-* package name)",
		series, ErrUnknownKernel, strings.Join(KernelSeries(), ", "))
}

// resolveKernel finds the kernel image package and version that the
// candidate of series' metapackage depends on. A package that is itself a
// kernel image (it ships /boot/vmlinuz, which apt-cache cannot tell) is
// recognised by its name: linux-image-<release>, with a digit first.
func (a *apt) resolveKernel(ctx context.Context, series string) (*Kernel, error) {
	meta, err := metaPackage(series)
	if err != nil {
		return nil, err
	}
	f, err := a.candidate(ctx, meta)
	if err != nil {
		return nil, err
	}
	pkg, version := f["Package"], f["Version"]
	if !isImagePackage(pkg) {
		dep, dv, ok := imageDependency(f["Depends"])
		if !ok {
			return nil, fmt.Errorf("resolve kernel %s: %s %s depends on no linux-image package (Depends: %q)", series, pkg, version, f["Depends"])
		}
		pkg, version = dep, dv
		if version == "" {
			g, err := a.candidate(ctx, pkg)
			if err != nil {
				return nil, err
			}
			version = g["Version"]
		}
	}
	return &Kernel{Series: series, Package: pkg, Version: version, Release: strings.TrimPrefix(pkg, "linux-image-")}, nil
}

// isImagePackage reports whether pkg names a kernel image package
// (linux-image-6.1.0-57-amd64) rather than a metapackage
// (linux-image-amd64, linux-image-6.12-amd64).
func isImagePackage(pkg string) bool {
	rel, ok := strings.CutPrefix(pkg, "linux-image-")
	if !ok || rel == "" || rel[0] < '0' || rel[0] > '9' {
		return false
	}
	// A release has at least three parts before the flavour:
	// 6.1.0-57-amd64, 6.12.117+deb12-amd64. A series metapackage
	// (6.12-amd64) has two.
	ver, _, _ := strings.Cut(rel, "-")
	ver, _, _ = strings.Cut(ver, "+")
	return strings.Count(ver, ".") >= 2
}

// imageDependency picks the first linux-image-* package from a Depends
// field, with its version when pinned with "(= v)".
func imageDependency(depends string) (pkg, version string, ok bool) {
	for _, d := range strings.Split(depends, ",") {
		for _, alt := range strings.Split(d, "|") {
			alt = strings.TrimSpace(alt)
			name, rest, _ := strings.Cut(alt, " ")
			if !isImagePackage(name) {
				continue
			}
			rest = strings.TrimSpace(rest)
			if v, found := strings.CutPrefix(rest, "(="); found {
				version = strings.TrimSpace(strings.TrimSuffix(v, ")"))
			}
			return name, version, true
		}
	}
	return "", "", false
}

// kernelDir is the cache directory of one kernel build.
func kernelDir(cache string, k *Kernel) string {
	return filepath.Join(cache, "kernels", k.Release+"_"+strings.NewReplacer("/", "_", ":", "_").Replace(k.Version))
}

// fetchKernel makes sure k's vmlinux is in the cache and sets k.Vmlinux. It
// downloads the package with apt-get download (nothing is installed on the
// host), takes /boot/vmlinuz-<release> out of its data archive, and writes
// the uncompressed vmlinux. The caller holds the cache lock.
func (a *apt) fetchKernel(ctx context.Context, cache string, k *Kernel) error {
	dir := kernelDir(cache, k)
	k.Vmlinux = filepath.Join(dir, "vmlinux")
	if _, err := os.Stat(k.Vmlinux); err == nil {
		return nil
	}
	start := time.Now()
	tmp, err := os.MkdirTemp(cache, "download-")
	if err != nil {
		return fmt.Errorf("fetch kernel %s: %w", k.Package, err)
	}
	defer os.RemoveAll(tmp)

	a.log.Info("downloading kernel package (first use; cached afterwards)", "package", k.Package, "version", k.Version)
	deb, err := a.download(ctx, tmp, k.Package, k.Version)
	if err != nil {
		return fmt.Errorf("fetch kernel %s: %w", k.Package, err)
	}
	bz, err := vmlinuzFromDeb(ctx, deb, k.Release)
	if err != nil {
		return err
	}
	vmlinux, format, err := ExtractVmlinux(ctx, bz)
	if err != nil {
		return fmt.Errorf("fetch kernel %s: %w", k.Package, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("fetch kernel %s: %w", k.Package, err)
	}
	part := filepath.Join(tmp, "vmlinux")
	if err := os.WriteFile(part, vmlinux, 0o644); err != nil {
		return fmt.Errorf("fetch kernel %s: %w", k.Package, err)
	}
	if err := os.Rename(part, k.Vmlinux); err != nil {
		return fmt.Errorf("fetch kernel %s: %w", k.Package, err)
	}
	a.log.Info("kernel cached", "release", k.Release, "compression", format, "vmlinux_bytes", len(vmlinux),
		"path", k.Vmlinux, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// vmlinuzFromDeb returns ./boot/vmlinuz-<release> from a kernel package,
// streaming the package's data archive rather than unpacking its modules.
func vmlinuzFromDeb(ctx context.Context, deb, release string) ([]byte, error) {
	want := "boot/vmlinuz-" + release
	var found []byte
	err := WalkDebData(ctx, deb, func(h *tar.Header, r io.Reader) error {
		if h.Name != want || h.Typeflag != tar.TypeReg {
			return nil
		}
		var err error
		if found, err = io.ReadAll(r); err != nil {
			return fmt.Errorf("read %s from %s: %w", want, deb, err)
		}
		// The rest of the archive is modules: stop here.
		return ErrStopWalk
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("read data archive of %s: no %s", deb, want)
	}
	return found, nil
}

// ErrStopWalk, returned by a WalkDebData callback, ends the walk early
// without an error.
var ErrStopWalk = errors.New("stop walking the archive")

// WalkDebData calls fn for every entry of a Debian package's data archive,
// in archive order, streaming it through dpkg-deb --fsys-tarfile. Entry
// names are given without their leading "./" ("lib/modules/..."); r reads
// a regular file's contents. fn returning ErrStopWalk ends the walk with a
// nil error; another error ends it with that error.
func WalkDebData(ctx context.Context, deb string, fn func(h *tar.Header, r io.Reader) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	// dpkg-deb forks its decompressor: stop the whole group it leads, or
	// the decompressor keeps the stderr pipe (and Wait) open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", deb, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", deb, err)
	}
	stop := func() {
		cancel()
		_ = cmd.Wait()
	}
	tr := tar.NewReader(pipe)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			stop()
			return fmt.Errorf("read data archive of %s: %w", deb, err)
		}
		h.Name = strings.TrimPrefix(h.Name, "./")
		if err := fn(h, tr); err != nil {
			stop()
			if errors.Is(err, ErrStopWalk) {
				return nil
			}
			return err
		}
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, stderr.String())
	}
	return nil
}
