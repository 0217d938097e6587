package vmtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nodeguard/nodeguard/internal/flock"
)

// Busybox is where busybox-static installs its binary.
const Busybox = "/bin/busybox"

// HostTool is a program a runner needs on the host and the Debian package
// that brings it.
type HostTool struct {
	// Path is absolute, or a command name looked up in PATH.
	Path string
	// Package is the Debian package that installs it.
	Package string
	// OK reports whether the installed file is usable, nil for "exists".
	OK func(path string) bool
}

// hostTools are what the runner needs: qemu for the guest, a static busybox
// for its userland, the decompressors for the kernel image, and dpkg-deb to
// unpack the kernel package without installing it.
var hostTools = []HostTool{
	{Path: "qemu-system-x86_64", Package: "qemu-system-x86"},
	// busybox (dynamic) and busybox-static both install /bin/busybox; only
	// the static one runs in the guest.
	{Path: Busybox, Package: "busybox-static", OK: func(p string) bool { return CheckStatic(p) == nil }},
	{Path: "xz", Package: "xz-utils"},
	{Path: "zstd", Package: "zstd"},
	{Path: "dpkg-deb", Package: "dpkg"},
	{Path: "timeout", Package: "coreutils"},
}

// InstallTools installs, through apt-get, the packages of those tools that
// are missing or unusable, as Prepare does for the VM lane's own tools;
// apt-get update runs first only when there are no package lists, or once
// after a failed install.
func InstallTools(ctx context.Context, log *slog.Logger, tools []HostTool) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &apt{log: log}
	return a.ensureTools(ctx, tools)
}

// DownloadPackage downloads pkg=version into dir with apt-get download
// (nothing is installed) and returns the .deb's path.
func DownloadPackage(ctx context.Context, log *slog.Logger, dir, pkg, version string) (string, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &apt{log: log}
	return a.download(ctx, dir, pkg, version)
}

// download is DownloadPackage.
func (a *apt) download(ctx context.Context, dir, pkg, version string) (string, error) {
	// apt's download sandbox user cannot write to a root-owned temp dir.
	args := []string{"download", "-q", "-o", "APT::Sandbox::User=root", pkg + "=" + version}
	if out, err := run(ctx, dir, "apt-get", args...); err != nil {
		return "", fmt.Errorf("apt-get download %s=%s: %w: %s", pkg, version, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("download %s: apt-get download left %d .deb files in %s", pkg, len(debs), dir)
	}
	return debs[0], nil
}

// apt runs apt-get and apt-cache, updating the package lists at most once
// and only when they are missing or a look-up or install failed.
type apt struct {
	log     *slog.Logger
	updated bool
}

// listsPresent reports whether apt has package lists at all.
func listsPresent() bool {
	m, _ := filepath.Glob("/var/lib/apt/lists/*_Packages*")
	return len(m) > 0
}

// update runs apt-get update once.
func (a *apt) update(ctx context.Context) error {
	if a.updated {
		return nil
	}
	a.updated = true
	a.log.Info("updating apt package lists")
	if out, err := run(ctx, "", "apt-get", "update", "-qq", "-o", "DPkg::Lock::Timeout="+dpkgLockTimeout); err != nil {
		return fmt.Errorf("apt-get update: %w: %s", err, out)
	}
	return nil
}

// aptLock serialises the runners' apt-get runs: make test's two lanes
// chains prepare at the same time, and dpkg takes one frontend at a time
// (a second apt-get install fails at once on its lock). The wait for
// dpkg's own lock (dpkgLockTimeout) covers everything else that runs
// apt-get meanwhile (scripts/deps.sh, an unattended upgrade).
const aptLock = "/run/lock/nodeguard-apt.lock"

// dpkgLockTimeout is how long apt-get waits for dpkg's lock, in seconds.
const dpkgLockTimeout = "600"

// ensureTools installs the packages of missing host tools, under aptLock;
// what another runner installed meanwhile is not installed again.
func (a *apt) ensureTools(ctx context.Context, tools []HostTool) error {
	if len(missingPackages(tools)) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("install %s: not root: install them with apt-get", strings.Join(missingPackages(tools), " "))
	}
	if err := os.MkdirAll(filepath.Dir(aptLock), 0o755); err != nil {
		return fmt.Errorf("install host tools: %w", err)
	}
	unlock, err := flock.Lock(ctx, aptLock)
	if err != nil {
		return fmt.Errorf("install host tools: %w", err)
	}
	defer unlock()
	need := missingPackages(tools)
	if len(need) == 0 {
		return nil
	}
	if !listsPresent() {
		if err := a.update(ctx); err != nil {
			return err
		}
	}
	a.log.Info("installing host tools through apt", "packages", strings.Join(need, " "))
	args := append([]string{"install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=" + dpkgLockTimeout}, need...)
	out, err := run(ctx, "", "apt-get", args...)
	if err != nil && !a.updated {
		if uerr := a.update(ctx); uerr != nil {
			return uerr
		}
		out, err = run(ctx, "", "apt-get", args...)
	}
	if err != nil {
		return fmt.Errorf("apt-get install %s: %w: %s", strings.Join(need, " "), err, out)
	}
	return nil
}

// missingPackages are the packages of the tools that are missing or
// unusable.
func missingPackages(tools []HostTool) []string {
	var need []string
	for _, t := range tools {
		p := t.Path
		if !filepath.IsAbs(p) {
			lp, err := exec.LookPath(p)
			if err != nil {
				need = appendOnce(need, t.Package)
				continue
			}
			p = lp
		}
		if _, err := os.Stat(p); err != nil || (t.OK != nil && !t.OK(p)) {
			need = appendOnce(need, t.Package)
		}
	}
	return need
}

// appendOnce appends s to list unless it is there already.
func appendOnce(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// candidate returns the fields of the candidate version of pkg from
// apt-cache show, updating the lists once when pkg is unknown.
func (a *apt) candidate(ctx context.Context, pkg string) (map[string]string, error) {
	out, err := run(ctx, "", "apt-cache", "show", "--no-all-versions", pkg)
	if err != nil || len(bytes.TrimSpace(out)) == 0 {
		if uerr := a.update(ctx); uerr != nil {
			return nil, uerr
		}
		out, err = run(ctx, "", "apt-cache", "show", "--no-all-versions", pkg)
	}
	if err != nil {
		return nil, fmt.Errorf("apt-cache show %s: %w: %s", pkg, err, out)
	}
	f := parseControl(out)
	if f["Package"] == "" || f["Version"] == "" {
		return nil, fmt.Errorf("apt-cache show %s: no Package or Version field", pkg)
	}
	return f, nil
}

// parseControl parses the first stanza of a Debian control file; a
// continuation line is appended to its field.
func parseControl(b []byte) map[string]string {
	f := map[string]string{}
	last := ""
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" {
			if len(f) > 0 {
				break
			}
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			if last != "" {
				f[last] += "\n" + strings.TrimSpace(line)
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		last = k
		f[k] = strings.TrimSpace(v)
	}
	return f
}

// run runs name with args in dir with DEBIAN_FRONTEND=noninteractive and
// returns its combined output.
func run(ctx context.Context, dir, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	return bytes.TrimSpace(out), err
}
