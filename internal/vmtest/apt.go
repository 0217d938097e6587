package vmtest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Busybox is where busybox-static installs its binary.
const Busybox = "/bin/busybox"

// hostTool is a program the runner needs on the host and the Debian package
// that brings it.
type hostTool struct {
	path, pkg string
	// ok reports whether the installed file is usable, nil for "exists".
	ok func(path string) bool
}

// hostTools are what the runner needs: qemu for the guest, a static busybox
// for its userland, the decompressors for the kernel image, and dpkg-deb to
// unpack the kernel package without installing it.
var hostTools = []hostTool{
	{path: "qemu-system-x86_64", pkg: "qemu-system-x86"},
	// busybox (dynamic) and busybox-static both install /bin/busybox; only
	// the static one runs in the guest.
	{path: Busybox, pkg: "busybox-static", ok: func(p string) bool { return CheckStatic(p) == nil }},
	{path: "xz", pkg: "xz-utils"},
	{path: "zstd", pkg: "zstd"},
	{path: "dpkg-deb", pkg: "dpkg"},
	{path: "timeout", pkg: "coreutils"},
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
	if out, err := run(ctx, "", "apt-get", "update", "-qq"); err != nil {
		return fmt.Errorf("apt-get update: %w: %s", err, out)
	}
	return nil
}

// ensureTools installs the packages of missing host tools.
func (a *apt) ensureTools(ctx context.Context) error {
	var need []string
	for _, t := range hostTools {
		p := t.path
		if !filepath.IsAbs(p) {
			lp, err := exec.LookPath(p)
			if err != nil {
				need = append(need, t.pkg)
				continue
			}
			p = lp
		}
		if _, err := os.Stat(p); err != nil || (t.ok != nil && !t.ok(p)) {
			need = append(need, t.pkg)
		}
	}
	if len(need) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("install %s: not root: install them with apt-get", strings.Join(need, " "))
	}
	if !listsPresent() {
		if err := a.update(ctx); err != nil {
			return err
		}
	}
	a.log.Info("installing host tools through apt", "packages", strings.Join(need, " "))
	args := append([]string{"install", "-y", "-qq", "--no-install-recommends"}, need...)
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
