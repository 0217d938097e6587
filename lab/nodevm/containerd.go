package nodevm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodeguard/nodeguard/internal/flock"
	"github.com/nodeguard/nodeguard/lab/vmtest"
)

// The node lane's containerd, chosen on the host with EnvContainerd (the
// guest gets the same variable): Debian's of the root filesystem
// (ContainerdDebian, the default: 1.6.20, whose CRI has no RuntimeConfig),
// or containerd 2.x (ContainerdV2), built from the Go module proxy into the
// cache once, put on the payload disk, and installed by the lane script
// over Debian's (binaries in /usr/local/bin, a drop-in for
// containerd.service's ExecStart, a version 3 config) before the images
// are imported. The cached root filesystem is the same for both.
const (
	// EnvContainerd names the containerd of a run: "" or "debian", or
	// "v2.4.2" (also "2", "v2", "2.4.2").
	EnvContainerd = "NODEGUARD_NODE_CONTAINERD"
	// ContainerdDebian is the root filesystem's containerd package.
	ContainerdDebian = "debian"
	// ContainerdV2 is the containerd 2.x the lane builds: the newest
	// release measured to build with this Go from the module proxy (no
	// replace directives) and to run with Debian 12's runc 1.1.5.
	ContainerdV2 = "v2.4.2"
	// DefaultContainerd is the runtime when EnvContainerd is empty.
	DefaultContainerd = ContainerdDebian
)

// ParseContainerd returns the containerd named by v ("" is
// DefaultContainerd).
func ParseContainerd(v string) (string, error) {
	switch v {
	case "", ContainerdDebian:
		return ContainerdDebian, nil
	case ContainerdV2, strings.TrimPrefix(ContainerdV2, "v"), "2", "v2":
		return ContainerdV2, nil
	}
	return "", fmt.Errorf("%s=%q: want %s (the root filesystem's containerd 1.6) or %s (built from the Go module proxy; 2 for short)",
		EnvContainerd, v, ContainerdDebian, ContainerdV2)
}

// ContainerdRecipe is how the lane builds containerd 2.x: `go install` of
// Commands of Module at Version, outside any module, with CGO_ENABLED=0
// (static: the guest runs them next to Debian's dynamic binaries, and
// needs none of cgo's features: btrfs, the one snapshotter that needs
// cgo, is left out by the tag as well) and these tags and linker flags.
// Its Key names the cache entry, so a change to any field builds anew.
type ContainerdRecipe struct {
	Module, Version string
	Commands        []string
	Tags            []string
	Ldflags         string
}

// containerdRecipe is the lane's containerd 2.x. The version is linked in
// as containerd's own (its default says "+unknown"), so that the CRI's
// RuntimeVersion and `containerd --version` name it.
var containerdRecipe = ContainerdRecipe{
	Module:   "github.com/containerd/containerd/v2",
	Version:  ContainerdV2,
	Commands: []string{"cmd/containerd", "cmd/containerd-shim-runc-v2", "cmd/ctr"},
	Tags:     []string{"no_btrfs"},
	Ldflags:  "-s -w -X github.com/containerd/containerd/v2/version.Version=" + ContainerdV2,
}

// Key is the recipe's cache key: the version, then a hash of the rest.
func (r ContainerdRecipe) Key() string {
	h := sha256.New()
	fmt.Fprintf(h, "module %s\nversion %s\ncommands %q\ntags %q\nldflags %q\ncgo 0\n", r.Module, r.Version, r.Commands, r.Tags, r.Ldflags)
	return r.Version + "-" + hex.EncodeToString(h.Sum(nil))[:12]
}

// Binaries are the names of the built commands (go install names a
// binary after its package directory).
func (r ContainerdRecipe) Binaries() []string {
	b := make([]string, len(r.Commands))
	for i, c := range r.Commands {
		b[i] = filepath.Base(c)
	}
	return b
}

// InstallArgs are go install's arguments.
func (r ContainerdRecipe) InstallArgs() []string {
	args := []string{"install", "-tags", strings.Join(r.Tags, ","), "-ldflags=" + r.Ldflags}
	for _, c := range r.Commands {
		args = append(args, r.Module+"/"+c+"@"+r.Version)
	}
	return args
}

// containerdTimeout bounds the build: about 6 minutes measured with empty
// Go caches (downloads included), 1.5 minutes with the modules and part of
// the build cache warm; a loaded CI machine may take twice as long.
const containerdTimeout = 30 * time.Minute

// ContainerdBuild is a built containerd in the cache.
type ContainerdBuild struct {
	// Version is the release; Dir holds the binaries (Binaries of the
	// recipe), each static.
	Version, Dir string
	Binaries     []string
	// Built reports that this run built it, in BuildTime.
	Built     bool
	BuildTime time.Duration
}

// containerdDir is where the cache keeps the recipe's binaries.
func containerdDir(cache string, r ContainerdRecipe) string {
	return filepath.Join(cache, "containerd", r.Key())
}

// haveBinaries reports whether dir has every binary, each static.
func haveBinaries(dir string, names []string) bool {
	for _, n := range names {
		if vmtest.CheckStatic(filepath.Join(dir, n)) != nil {
			return false
		}
	}
	return true
}

// CachedContainerd returns containerd 2.x (ContainerdV2) from the cache,
// building it first with `CGO_ENABLED=0 go install` into a temporary
// directory beneath the cache (never into the clone) under an flock and
// publishing the directory of binaries by rename. Modules and build
// artefacts go to the go command's own caches, so a rebuild after the
// cache directory is emptied costs about a minute, not six.
func CachedContainerd(ctx context.Context, cache, goCmd string, log *slog.Logger) (*ContainerdBuild, error) {
	return cachedContainerd(ctx, cache, goCmd, containerdRecipe, log)
}

func cachedContainerd(ctx context.Context, cache, goCmd string, r ContainerdRecipe, log *slog.Logger) (*ContainerdBuild, error) {
	dir := containerdDir(cache, r)
	b := &ContainerdBuild{Version: r.Version, Dir: dir, Binaries: r.Binaries()}
	if haveBinaries(dir, b.Binaries) {
		return b, nil
	}
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("build containerd %s: %w", r.Version, err)
	}
	unlock, err := flock.Lock(ctx, filepath.Join(parent, "lock"))
	if err != nil {
		return nil, fmt.Errorf("build containerd %s: %w", r.Version, err)
	}
	defer unlock()
	if haveBinaries(dir, b.Binaries) {
		return b, nil
	}
	// Incomplete (a binary removed by hand): built again as a whole.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("build containerd %s: %w", r.Version, err)
	}
	vmtest.SweepStaleRuns(parent, buildDirPrefix)
	tmp, err := os.MkdirTemp(parent, fmt.Sprintf("%s%d-", buildDirPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("build containerd %s: %w", r.Version, err)
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "bin")
	start := time.Now()
	log.Info("building containerd (first use of this version; cached afterwards, about 6 minutes with empty Go caches)",
		"module", r.Module, "version", r.Version, "commands", strings.Join(r.Commands, ","), "cache", dir)
	// Outside any module (Dir is the temporary directory, GOWORK off), so
	// that the clone's go.mod and GOFLAGS play no part; GOTOOLCHAIN=local:
	// this go builds it or the build fails, nothing else is downloaded.
	env := []string{"CGO_ENABLED=0", "GOBIN=" + bin, "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-trimpath -buildvcs=false"}
	if err := runLogged(ctx, containerdTimeout, log, "go install containerd", tmp, env, goCmd, r.InstallArgs()...); err != nil {
		return nil, fmt.Errorf("build containerd %s: %w", r.Version, err)
	}
	for _, n := range b.Binaries {
		if err := vmtest.CheckStatic(filepath.Join(bin, n)); err != nil {
			return nil, fmt.Errorf("build containerd %s: %w", r.Version, err)
		}
	}
	if err := os.Rename(bin, dir); err != nil {
		return nil, fmt.Errorf("build containerd %s: %w", r.Version, err)
	}
	b.Built, b.BuildTime = true, time.Since(start).Round(time.Millisecond)
	log.Info("containerd cached", "version", r.Version, "dir", dir, "duration", b.BuildTime)
	return b, nil
}

// DpkgVersion returns the Version of package pkg in a dpkg status file
// (/var/lib/dpkg/status), and whether it is there.
func DpkgVersion(status []byte, pkg string) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	in := false
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "":
			in = false
		case strings.HasPrefix(l, "Package: "):
			in = strings.TrimSpace(strings.TrimPrefix(l, "Package: ")) == pkg
		case in && strings.HasPrefix(l, "Version: "):
			return strings.TrimSpace(strings.TrimPrefix(l, "Version: ")), true
		}
	}
	return "", false
}

// imagePackageVersion reads pkg's version from the root filesystem image's
// dpkg status with debugfs (nothing is mounted); "" when it cannot.
func imagePackageVersion(ctx context.Context, image, pkg string) string {
	out, err := commandOutput(ctx, "debugfs", "-R", "cat /var/lib/dpkg/status", image)
	if err != nil {
		return ""
	}
	v, _ := DpkgVersion([]byte(out), pkg)
	return v
}

// Guest paths of an installed containerd 2.x.
const (
	// ContainerdBinDir holds the installed binaries: before Debian's
	// /usr/bin in every PATH the guest has (systemd's units', the lane
	// script's), so ctr and the shim are 2.x's too; the shim is also
	// named in the config (runtime_path), whatever PATH says.
	ContainerdBinDir = "/usr/local/bin"
	// ContainerdDropIn points containerd.service's ExecStart at it; the
	// rest of Debian's unit (Type=notify, Delegate=yes, KillMode=process)
	// stays.
	ContainerdDropIn = "/etc/systemd/system/containerd.service.d/nodelane-containerd.conf"
	// ContainerdConfigPath is containerd's configuration, both versions'.
	ContainerdConfigPath = "/etc/containerd/config.toml"
)

// ContainerdV2Config renders /etc/containerd/config.toml for containerd
// 2.x: what ContainerdConfig says for 1.6, in the version 3 layout, whose
// CRI settings live in the io.containerd.cri.v1.runtime plugin (runtimes,
// CNI) and io.containerd.cri.v1.images (snapshotter, the pinned sandbox
// image, registries) while the gRPC CRI plugin keeps only its server
// settings. runc's SystemdCgroup = true sits on a line of its own, as in
// the 1.6 config, so the checks that switch it (SystemdCgroup = false and
// back) edit either file the same way. runc's shim is named by path
// (runtime_path: the installed 2.x's, not Debian's 1.6 shim in /usr/bin).
// NRI is disabled: nodeguard does not use it, and the guest need not
// serve its socket. containerd 2.4 migrates a version 3 file to its
// version 4 at start (one warning in its log): version 3 is what 2.0-2.4
// all read.
func ContainerdV2Config(sandboxImage string) (string, error) {
	q, err := quoteConfigValues(map[string]string{"sandbox_image": sandboxImage, "bin_dir": CNIBinDir, "conf_dir": CNIConfDir,
		"runtime_path": ContainerdBinDir + "/containerd-shim-runc-v2"})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Written by nodeguard lab/nodevm for the node lane's guest (containerd %s).", ContainerdV2)
	w("version = 3")
	w(`disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]`)
	w(`required_plugins = ["io.containerd.grpc.v1.cri"]`)
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri"]`)
	w("  disable_tcp_service = true")
	w(`  stream_server_address = "127.0.0.1"`)
	w(`  stream_server_port = "0"`)
	w("")
	w(`[plugins."io.containerd.cri.v1.images"]`)
	w(`  snapshotter = "overlayfs"`)
	w("")
	w(`[plugins."io.containerd.cri.v1.images".pinned_images]`)
	w("  sandbox = %s", q["sandbox_image"])
	w("")
	w(`[plugins."io.containerd.cri.v1.images".registry]`)
	w(`  config_path = ""`)
	w("")
	w(`[plugins."io.containerd.cri.v1.runtime".containerd]`)
	w(`  default_runtime_name = "runc"`)
	w("")
	w(`[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]`)
	w(`  runtime_type = "io.containerd.runc.v2"`)
	w("  runtime_path = %s", q["runtime_path"])
	w("")
	w(`[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]`)
	w("  SystemdCgroup = true")
	w("")
	w(`[plugins."io.containerd.cri.v1.runtime".cni]`)
	w("  bin_dirs = [%s]", q["bin_dir"])
	w("  conf_dir = %s", q["conf_dir"])
	w("  max_conf_num = 1")
	w("")
	w(`[plugins."io.containerd.nri.v1.nri"]`)
	w("  disable = true")
	return b.String(), nil
}

// containerdDropIn is ContainerdDropIn's text: ExecStart emptied, then
// the installed binary.
const containerdDropIn = `# nodeguard node lane: containerd from the payload disk (see lab/nodevm).
[Service]
ExecStart=
ExecStart=` + ContainerdBinDir + `/containerd
`

// The payload's containerd directory, relative to PayloadMount.
const (
	payloadContainerd        = "containerd"
	payloadContainerdInstall = payloadContainerd + "/install"
)

// ContainerdInstallScript is the guest's installer of containerd 2.x (the
// payload's containerd/install), which the lane script runs, when the
// payload has it, before it imports the images: it stops Debian's
// containerd, which started with the boot and has run nothing yet, removes
// that one's state (the new one starts on an empty root, no 1.6 metadata
// to migrate), installs the binaries, the config and the drop-in, and
// starts containerd again: 2.x now. The root filesystem is a throwaway
// snapshot: the cached image keeps Debian's.
func ContainerdInstallScript(version string, binaries []string) string {
	src := vmtest.ShellQuote(PayloadMount + "/" + payloadContainerd)
	var bins []string
	for _, n := range binaries {
		bins = append(bins, `"$src/bin/`+n+`"`)
	}
	return `#!/bin/sh
# generated by nodevm: installs containerd ` + version + ` from the payload (see lab/nodevm).
set -eu
src=` + src + `
systemctl stop containerd
rm -rf /var/lib/containerd /run/containerd
install -m 0755 ` + strings.Join(bins, " ") + ` ` + ContainerdBinDir + `/
install -m 0644 "$src/config.toml" ` + ContainerdConfigPath + `
install -D -m 0644 "$src/containerd.service.conf" ` + ContainerdDropIn + `
systemctl daemon-reload
systemctl start containerd || { journalctl -u containerd -n 30 --no-pager -o cat; exit 1; }
`
}
