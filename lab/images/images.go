package images

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	_ "embed" // the pause program's source
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/nodeguard/nodeguard/lab/hog"
)

// Image names. registry.local is answered by no registry, so a runtime can
// never pull these: they exist only where they were imported.
const (
	// PauseName is the full reference of the pause image; the test
	// environment's containerd uses it as its sandbox_image.
	PauseName = "registry.local/nodeguard/pause:3.9"
	// BusyboxName is the full reference of the busybox image. The tag is
	// Debian 12's busybox version.
	BusyboxName = "registry.local/nodeguard/busybox:1.35"
	// HogName is the full reference of the memory hog image of `nodeguard
	// bench eviction` (package lab/hog). Bump the tag when the hog's
	// output contract changes.
	HogName = "registry.local/nodeguard/hog:1"
)

// Archive file names that BuildPause, BuildBusybox and BuildHog write in
// their directory.
const (
	PauseArchive   = "pause.tar"
	BusyboxArchive = "busybox.tar"
	HogArchive     = "hog.tar"
)

// BusyboxBinary is where Debian's busybox-static installs its binary.
const BusyboxBinary = "/bin/busybox"

// BusyboxGroup is the busybox image's /etc/group: bytes a test can expect
// to read from the image (the node lane's image volume check).
const BusyboxGroup = "root:x:0:\nnogroup:x:65534:\n"

// fallbackGo is the Go toolchain of the development and CI machines, used
// when no "go" is on PATH (go test puts GOROOT/bin first on PATH).
const fallbackGo = "/usr/local/go/bin/go"

// RequiredApplets are the busybox applets that tests and the demo rely on.
// BuildBusybox fails when the binary lacks one of them.
var RequiredApplets = []string{
	"[", "awk", "cat", "cut", "date", "dd", "df", "echo", "env", "false",
	"free", "grep", "head", "hostname", "id", "ifconfig", "ip", "kill", "ls",
	"mkdir", "mount", "nc", "ping", "printf", "ps", "rm", "sed", "seq", "sh",
	"sleep", "sort", "stat", "tail", "tee", "test", "touch", "true", "uname",
	"wc", "wget", "yes",
}

// ErrNotStatic means an executable that must run inside an image on its
// own is dynamically linked.
var ErrNotStatic = errors.New("not a statically linked executable")

// ErrNoToolchain means no Go toolchain was found to build the pause or hog
// binary.
var ErrNoToolchain = errors.New("no Go toolchain")

//go:embed pause/main.go
var pauseSource []byte

//go:embed grpchealth/main.go
var grpchealthSource []byte

// GRPCHealthBinary is where the busybox image has the grpchealth program
// (grpchealth/main.go): a gRPC health server for the tests of gRPC probes,
// driven by files (`grpchealth -port 9090 =/tmp/ready live=!/tmp/sick`).
const GRPCHealthBinary = "/bin/grpchealth"

// goMod is the module file of the pause and hog builds (%s: the program's
// name): no dependencies, so the build never needs the module proxy.
const goMod = "module nodeguard.local/%s\n\ngo 1.22\n"

// Image is an OCI image-layout tarball on disk.
type Image struct {
	// Name is the full reference that `ctr images import` gives the image,
	// from the io.containerd.image.name annotation.
	Name string `json:"name"`
	// Archive is the path of the tarball.
	Archive string `json:"archive"`
	// Digest is the manifest digest, "sha256:<hex>": the image's id in
	// containerd after the import.
	Digest string `json:"digest"`
	// Size is the tarball's size in bytes.
	Size int64 `json:"size"`
}

// BuildPause builds the static pause binary from the embedded pause/main.go
// with the Go toolchain on PATH (or /usr/local/go/bin/go) and writes the
// pause image to dir/pause.tar.
func BuildPause(ctx context.Context, dir string) (Image, error) {
	goBin, err := goTool()
	if err != nil {
		return Image{}, fmt.Errorf("build pause image: %w", err)
	}
	return buildPause(ctx, dir, goBin, "")
}

// buildPause writes dir/pause.tar; the build's output goes to logPath (see
// compileGo).
func buildPause(ctx context.Context, dir, goBin, logPath string) (Image, error) {
	bin, err := compilePause(ctx, goBin, logPath)
	if err != nil {
		return Image{}, fmt.Errorf("build pause image: %w", err)
	}
	return writeLayout(filepath.Join(dir, PauseArchive), spec{
		name:       PauseName,
		arch:       runtime.GOARCH,
		entries:    []entry{{name: "pause", mode: 0o755, typ: tar.TypeReg, data: bin}},
		entrypoint: []string{"/pause"},
		createdBy:  "nodeguard lab/images: CGO_ENABLED=0 go build pause/main.go",
	})
}

// compilePause builds pause/main.go in a temporary module and returns the
// binary, checked to be static.
func compilePause(ctx context.Context, goBin, logPath string) ([]byte, error) {
	return compileGo(ctx, goBin, "pause", pauseSource, logPath)
}

// compileHog builds the hog program (lab/hog/cmd/hog/main.go) the same
// way.
func compileHog(ctx context.Context, goBin, logPath string) ([]byte, error) {
	return compileGo(ctx, goBin, "hog", hog.Source, logPath)
}

// BuildHog builds the static hog binary from the source embedded in
// package lab/hog with the Go toolchain on PATH (or /usr/local/go/bin/go)
// and writes the hog image to dir/hog.tar: /hog, entrypoint ["/hog"].
func BuildHog(ctx context.Context, dir string) (Image, error) {
	goBin, err := goTool()
	if err != nil {
		return Image{}, fmt.Errorf("build hog image: %w", err)
	}
	return buildHog(ctx, dir, goBin, "")
}

// buildHog writes dir/hog.tar; the build's output goes to logPath.
func buildHog(ctx context.Context, dir, goBin, logPath string) (Image, error) {
	bin, err := compileHog(ctx, goBin, logPath)
	if err != nil {
		return Image{}, fmt.Errorf("build hog image: %w", err)
	}
	return writeLayout(filepath.Join(dir, HogArchive), spec{
		name: HogName,
		arch: runtime.GOARCH,
		entries: []entry{
			{name: "hog", mode: 0o755, typ: tar.TypeReg, data: bin},
			{name: "tmp", mode: 0o1777, typ: tar.TypeDir},
		},
		entrypoint: []string{"/hog"},
		createdBy:  "nodeguard lab/images: CGO_ENABLED=0 go build lab/hog/cmd/hog/main.go",
	})
}

// goTool returns the go command to build with.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(fallbackGo); err == nil {
		return fallbackGo, nil
	}
	return "", fmt.Errorf("%w: no go on PATH and no %s", ErrNoToolchain, fallbackGo)
}

// goVersion returns the toolchain's version, e.g. "go1.26.8".
func goVersion(ctx context.Context, goBin string) (string, error) {
	cmd := exec.CommandContext(ctx, goBin, "env", "GOVERSION")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s env GOVERSION: %w", goBin, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildBusybox writes the busybox image, made from Debian's static
// /bin/busybox (package busybox-static) and the grpchealth program built
// with the Go toolchain on PATH (or /usr/local/go/bin/go), to
// dir/busybox.tar.
func BuildBusybox(ctx context.Context, dir string) (Image, error) {
	goBin, err := goTool()
	if err != nil {
		return Image{}, fmt.Errorf("build busybox image: %w", err)
	}
	return buildBusybox(ctx, dir, BusyboxBinary, goBin, "")
}

// buildBusybox writes dir/busybox.tar from binary; the grpchealth build's
// output goes to logPath.
func buildBusybox(ctx context.Context, dir, binary, goBin, logPath string) (Image, error) {
	entries, err := busyboxEntries(ctx, binary)
	if err != nil {
		return Image{}, fmt.Errorf("build busybox image: %w", err)
	}
	health, err := compileGo(ctx, goBin, "grpchealth", grpchealthSource, logPath)
	if err != nil {
		return Image{}, fmt.Errorf("build busybox image: %w", err)
	}
	entries = append(entries, entry{name: strings.TrimPrefix(GRPCHealthBinary, "/"), mode: 0o755, typ: tar.TypeReg, data: health})
	return writeLayout(filepath.Join(dir, BusyboxArchive), spec{
		name:      BusyboxName,
		arch:      runtime.GOARCH,
		entries:   entries,
		cmd:       []string{"sh"},
		createdBy: "nodeguard lab/images: " + BusyboxBinary + " from busybox-static with its applet links, and CGO_ENABLED=0 go build grpchealth/main.go",
	})
}

// busyboxEntries returns the busybox image's files: the binary at
// bin/busybox, a symlink to it for every applet it lists, and a minimal
// root filesystem.
func busyboxEntries(ctx context.Context, binary string) ([]entry, error) {
	if err := CheckStatic(binary); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, binary, "--list-full").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", binary, err)
	}
	applets, err := parseAppletList(out)
	if err != nil {
		return nil, fmt.Errorf("%s --list-full: %w", binary, err)
	}
	have := make(map[string]bool, len(applets))
	for _, a := range applets {
		have[path.Base(a)] = true
	}
	var missing []string
	for _, a := range RequiredApplets {
		if !have[a] {
			missing = append(missing, a)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s lacks applets %s", binary, strings.Join(missing, " "))
	}

	entries := []entry{
		{name: "bin/busybox", mode: 0o755, typ: tar.TypeReg, data: bin},
		{name: "dev", mode: 0o755, typ: tar.TypeDir},
		{name: "proc", mode: 0o555, typ: tar.TypeDir},
		{name: "sys", mode: 0o555, typ: tar.TypeDir},
		{name: "tmp", mode: 0o1777, typ: tar.TypeDir},
		{name: "root", mode: 0o700, typ: tar.TypeDir},
		{name: "var", mode: 0o755, typ: tar.TypeDir},
		{name: "etc/passwd", mode: 0o644, typ: tar.TypeReg,
			data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")},
		{name: "etc/group", mode: 0o644, typ: tar.TypeReg,
			data: []byte(BusyboxGroup)},
	}
	taken := map[string]bool{}
	for _, e := range entries {
		taken[e.name] = true
	}
	for _, a := range applets {
		if taken[a] {
			continue
		}
		taken[a] = true
		entries = append(entries, entry{name: a, mode: 0o777, typ: tar.TypeSymlink, target: "/bin/busybox"})
	}
	return entries, nil
}

// parseAppletList parses `busybox --list-full`: one relative path per line
// ("bin/sh", "usr/bin/[", "linuxrc").
func parseAppletList(out []byte) ([]string, error) {
	var applets []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	n := 0
	for sc.Scan() {
		n++
		a := strings.TrimSpace(sc.Text())
		if a == "" {
			continue
		}
		if strings.HasPrefix(a, "/") || path.Clean(a) != a || strings.HasPrefix(a, "..") {
			return nil, fmt.Errorf("line %d: applet path %q is not a clean relative path", n, a)
		}
		applets = append(applets, a)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(applets) == 0 {
		return nil, errors.New("no applets listed")
	}
	return applets, nil
}

// NodeguardName is the image of nodeguard itself that deploy/kubernetes'
// DaemonSet runs (guard mode): the test cluster imports it into the node's
// containerd, and IfNotPresent never pulls it.
const NodeguardName = "localhost/nodeguard:dev"

// BuildNodeguard writes an image of the static nodeguard binary at binary
// to archive: /usr/local/bin/nodeguard, /tmp, and /sys, /proc, /run and
// /var/lib, the mount points the DaemonSet's volumes land on. Entrypoint
// ["/usr/local/bin/nodeguard"]. The binary must be static (CGO_ENABLED=0):
// the image has no libc.
func BuildNodeguard(binary, archive, name string) (Image, error) {
	if err := CheckStatic(binary); err != nil {
		return Image{}, fmt.Errorf("build nodeguard image: %w", err)
	}
	b, err := os.ReadFile(binary)
	if err != nil {
		return Image{}, fmt.Errorf("build nodeguard image: %w", err)
	}
	entries := []entry{{name: "usr/local/bin/nodeguard", mode: 0o755, typ: tar.TypeReg, data: b}, {name: "tmp", mode: 0o1777, typ: tar.TypeDir}}
	for _, d := range []string{"sys", "proc", "run", "var/lib", "etc"} {
		entries = append(entries, entry{name: d, mode: 0o755, typ: tar.TypeDir})
	}
	return writeLayout(archive, spec{
		name:       name,
		arch:       runtime.GOARCH,
		entries:    entries,
		entrypoint: []string{"/usr/local/bin/nodeguard"},
		createdBy:  "nodeguard lab/images: the nodeguard binary, CGO_ENABLED=0",
		// Built where it is imported: gzip at its best level took most
		// of the 100 s the node lane's guest (TCG) spent on build and
		// import.
		uncompressed: true,
	})
}
