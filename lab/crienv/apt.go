package crienv

import (
	"github.com/nodeguard/nodeguard/internal/flock"

	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodeguard/nodeguard/lab/images"
)

// aptTimeout bounds the whole package installation: an apt-get update and
// an install of four small packages take well under a minute from Debian's
// mirror; the rest is room for a slow mirror or a dpkg lock held by a
// parallel test binary.
const aptTimeout = 10 * time.Minute

// aptLockWait is how long apt-get waits for the dpkg lock that another
// process holds (DPkg::Lock::Timeout), in seconds.
const aptLockWait = "300"

// searchPath is the PATH that tools are looked up in and that containerd
// runs with: runc is in /usr/sbin, which a non-login PATH may lack.
const searchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// cniBinDir is where Debian's containernetworking-plugins installs the
// plugins.
const cniBinDir = "/usr/lib/cni"

// hostTool is a file the environment needs on the host and the Debian
// package that brings it.
type hostTool struct {
	path string // absolute, or a command name looked up in searchPath
	pkg  string
	// ok reports whether the installed file is usable; nil means "exists".
	ok func(path string) bool
}

// hostTools are what Start needs: containerd with its shim and ctr, runc,
// the CNI plugins of the env's network, and a static busybox for the
// busybox image.
var hostTools = []hostTool{
	{path: "containerd", pkg: "containerd"},
	{path: "containerd-shim-runc-v2", pkg: "containerd"},
	{path: "ctr", pkg: "containerd"},
	{path: "runc", pkg: "runc"},
	{path: filepath.Join(cniBinDir, "bridge"), pkg: "containernetworking-plugins"},
	{path: filepath.Join(cniBinDir, "host-local"), pkg: "containernetworking-plugins"},
	{path: filepath.Join(cniBinDir, "loopback"), pkg: "containernetworking-plugins"},
	{path: filepath.Join(cniBinDir, "portmap"), pkg: "containernetworking-plugins"},
	{path: filepath.Join(cniBinDir, "bandwidth"), pkg: "containernetworking-plugins"},
	// portmap programs hostPort DNAT with iptables (in the env's netns).
	{path: "iptables", pkg: "iptables"},
	// busybox (dynamic) and busybox-static both install /bin/busybox; only
	// the static one runs alone in an image.
	{path: images.BusyboxBinary, pkg: "busybox-static", ok: func(p string) bool { return images.CheckStatic(p) == nil }},
	{path: "nsenter", pkg: "util-linux"},
	// The CNCF distribution registry that lab/registry runs in the
	// env's namespace for the image pull tests.
	{path: "docker-registry", pkg: "docker-registry"},
}

// lookTool returns the absolute path of a tool, looked up in searchPath
// when it is a bare name.
func lookTool(name string) (string, error) {
	if filepath.IsAbs(name) {
		if _, err := os.Stat(name); err != nil {
			return "", err
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(searchPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w in %s", name, exec.ErrNotFound, searchPath)
}

// missingPackages returns the packages of the host tools that are absent
// or unusable, without duplicates, in hostTools order.
func missingPackages(tools []hostTool, look func(string) (string, error)) []string {
	var need []string
	seen := map[string]bool{}
	for _, t := range tools {
		p, err := look(t.path)
		if err == nil && (t.ok == nil || t.ok(p)) {
			continue
		}
		if !seen[t.pkg] {
			seen[t.pkg] = true
			need = append(need, t.pkg)
		}
	}
	return need
}

// EnsurePackages installs, through apt-get, the Debian packages of the host
// tools that are missing: containerd, runc, containernetworking-plugins,
// busybox-static and docker-registry. (Debian's docker-registry enables a
// service on :5000; on a machine where services start on install, which
// a container with policy-rc.d or without systemd is not, stop it:
// lab/registry runs its own, in the env's namespace.) When something must be installed it runs apt-get update
// once first. It logs one line before and one after; with nothing missing
// it runs nothing. Parallel callers are serialized by an flock in lockDir
// and by dpkg's own lock. Errors for a host without apt-get or a caller
// without root match ErrUnsupported.
func EnsurePackages(ctx context.Context, log *slog.Logger, lockDir string) error {
	need := missingPackages(hostTools, lookTool)
	if len(need) == 0 {
		return nil
	}
	pkgs := strings.Join(need, " ")
	if os.Geteuid() != 0 {
		return fmt.Errorf("install %s: %w: not root; install them with apt-get", pkgs, ErrUnsupported)
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		if _, err2 := os.Stat("/usr/bin/apt-get"); err2 != nil {
			return fmt.Errorf("install %s: %w: no apt-get", pkgs, ErrUnsupported)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, aptTimeout)
	defer cancel()

	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return fmt.Errorf("install %s: %w", pkgs, err)
	}
	unlock, err := flock.Lock(ctx, filepath.Join(lockDir, ".apt.lock"))
	if err != nil {
		return fmt.Errorf("install %s: %w", pkgs, err)
	}
	defer unlock()
	// Another process may have installed them while we waited.
	need = missingPackages(hostTools, lookTool)
	if len(need) == 0 {
		return nil
	}
	pkgs = strings.Join(need, " ")

	start := time.Now()
	log.Info("crienv: installing packages through apt (first use on this machine)", "packages", pkgs)
	if out, err := aptGet(ctx, "update", "-qq"); err != nil {
		return fmt.Errorf("apt-get update: %w: %s", err, out)
	}
	log.Info("crienv: apt package lists updated", "seconds", round(time.Since(start)))
	args := append([]string{"install", "-y", "-qq", "--no-install-recommends"}, need...)
	if out, err := aptGet(ctx, args...); err != nil {
		return fmt.Errorf("apt-get install %s: %w: %s", pkgs, err, out)
	}
	if still := missingPackages(hostTools, lookTool); len(still) > 0 {
		return fmt.Errorf("apt-get install %s: still missing tools of %s", pkgs, strings.Join(still, " "))
	}
	log.Info("crienv: packages installed", "packages", pkgs, "seconds", round(time.Since(start)))
	return nil
}

// aptGet runs apt-get non-interactively and returns its combined output.
func aptGet(ctx context.Context, args ...string) ([]byte, error) {
	args = append([]string{"-o", "DPkg::Lock::Timeout=" + aptLockWait}, args...)
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "PATH="+searchPath)
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

// round returns d in seconds with millisecond precision, for log lines.
func round(d time.Duration) float64 { return d.Round(time.Millisecond).Seconds() }
