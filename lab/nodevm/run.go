package nodevm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodeguard/nodeguard/lab/images"
	"github.com/nodeguard/nodeguard/lab/vmtest"
)

// Environment variables the runner reads (besides vmtest's EnvCache, whose
// cache directory it shares).
const (
	// EnvStage is the `make install DESTDIR=` stage to install in the
	// guest; required.
	EnvStage = "NODEGUARD_NODE_STAGE"
	// EnvTimeout bounds one guest run: seconds or a Go duration;
	// DefaultTimeout.
	EnvTimeout = "NODEGUARD_NODE_TIMEOUT"
	// EnvMemory is the guest's memory in qemu's -m syntax; DefaultMemory.
	EnvMemory = "NODEGUARD_NODE_MEMORY"
	// EnvCPUs is the guest's vCPU count; DefaultCPUs.
	EnvCPUs = "NODEGUARD_NODE_CPUS"
	// EnvTCG is "multi" (one host thread per vCPU) or "single";
	// DefaultTCG.
	EnvTCG = "NODEGUARD_NODE_TCG"
	// EnvConsole set to "1" copies the guest's whole console to stderr
	// after the run (its tail is always shown when a run ends abnormally).
	EnvConsole = "NODEGUARD_NODE_CONSOLE"
	// EnvSources overrides DefaultSources, the apt sources of the build.
	EnvSources = "NODEGUARD_NODE_SOURCES"
	// EnvLane is set to "1" in the guest: the checks run only there.
	EnvLane = "NODEGUARD_NODE_LANE"
	// EnvRace is the OOM race check's mode: quick (DefaultRace), full or
	// off (see race.go). The guest gets it as it is; it also raises the
	// lane's bounds by RaceAllowance.
	EnvRace = "NODEGUARD_NODE_RACE"
	// EnvOut is the host directory the output disk's files are copied to
	// after the guest ends (make test-node: out/node); an absolute path.
	// Unset, the output disk is thrown away with the run.
	EnvOut = "NODEGUARD_NODE_OUT"
	// EnvOutDir is set in the guest by the lane script: where the output
	// disk is mounted (OutMount), for the checks to write what the host
	// keeps. Neither it nor EnvOut is passed from the host.
	EnvOutDir = "NODEGUARD_NODE_OUT_DIR"
)

// Defaults, each with its reason.
const (
	// KernelSeries is the guest kernel: Debian 12's 6.12
	// (linux-image-6.12-amd64), as the VM lane resolves it.
	KernelSeries = "6.12"
	// DefaultTimeout bounds a guest run: boot ~15 s, the checks 3-5
	// minutes when they pass, and each check's own bounds when they fail;
	// above the test binary's -test.timeout (see the lane), so that a hung
	// test prints its goroutines before the guest is killed. The race
	// check's RaceAllowance is added to it.
	DefaultTimeout = 14 * time.Minute
	// DefaultMemory: systemd, containerd, the agent, a handful of pods and
	// the eviction check's hog (nodeguard allocatable is cut to a few
	// hundred MiB by systemReserved, not by the guest's size).
	DefaultMemory = "2G"
	// DefaultCPUs matches the host's 2 cores.
	DefaultCPUs = 2
	// DefaultTCG is one host thread for both vCPUs, as the VM lane runs:
	// measured here, multi-threaded TCG starts the checks 20-22 s after
	// qemu starts against 28-30 s, and a whole run of the agent's checks
	// took 57-76 s against 69-78 s (3 runs each, no kernel trouble seen),
	// but the VM lane saw 6.12 take int3 Oopses under multi-threaded TCG
	// and CI load when static keys flip at run time, which the agent's
	// BPF attach does in the middle of the checks, where no retry can
	// help. NODEGUARD_NODE_TCG=multi buys the 8 s back.
	DefaultTCG = "single"
)

// Config configures Prepare and Run.
type Config struct {
	CacheDir string
	Sources  string
	Stage    string
	Timeout  time.Duration
	Memory   string
	CPUs     int
	TCG      string
	Console  bool
	// Race is the race check's mode (EnvRace), already parsed.
	Race string
	// Out is the absolute host directory the output disk's files go to;
	// empty: nowhere.
	Out string
	// Containerd is the guest's containerd (EnvContainerd), already
	// parsed: ContainerdDebian or ContainerdV2.
	Containerd string
	// Go is the go command that builds crictl and containerd 2.x.
	Go string
	// Cluster is the control plane binaries' directory (EnvCluster);
	// empty: no control plane and no network device.
	Cluster string
	Log     *slog.Logger
}

// ConfigFromEnv reads Config from the environment through getenv.
func ConfigFromEnv(getenv func(string) string, log *slog.Logger) (Config, error) {
	c := Config{
		CacheDir: getenv(vmtest.EnvCache),
		Sources:  getenv(EnvSources),
		Stage:    getenv(EnvStage),
		Timeout:  DefaultTimeout,
		Memory:   getenv(EnvMemory),
		CPUs:     DefaultCPUs,
		TCG:      getenv(EnvTCG),
		Console:  getenv(EnvConsole) == "1",
		Out:      getenv(EnvOut),
		Cluster:  getenv(EnvCluster),
		Go:       "go",
		Log:      log,
	}
	ctrd, err := ParseContainerd(getenv(EnvContainerd))
	if err != nil {
		return c, err
	}
	c.Containerd = ctrd
	race, err := ParseRace(getenv(EnvRace))
	if err != nil {
		return c, err
	}
	if getenv(EnvRace) == "" {
		race = DefaultRaceFor(ctrd)
	}
	c.Race = race
	c.Timeout += RaceAllowance(race)
	if c.Out != "" && !filepath.IsAbs(c.Out) {
		return c, fmt.Errorf("%s=%q: want an absolute path (go test starts the runner in the package directory)", EnvOut, c.Out)
	}
	if c.Cluster != "" && !filepath.IsAbs(c.Cluster) {
		return c, fmt.Errorf("%s=%q: want an absolute path", EnvCluster, c.Cluster)
	}
	if c.CacheDir == "" {
		c.CacheDir = vmtest.DefaultCacheDir
	}
	if c.Sources == "" {
		c.Sources = DefaultSources
	}
	if c.Memory == "" {
		c.Memory = DefaultMemory
	}
	if c.TCG == "" {
		c.TCG = DefaultTCG
	}
	if c.TCG != "multi" && c.TCG != "single" {
		return c, fmt.Errorf("%s=%q: want multi or single", EnvTCG, c.TCG)
	}
	if v := getenv(EnvTimeout); v != "" {
		d, err := vmtest.ParseTimeout(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvTimeout, v, err)
		}
		c.Timeout = d
	}
	if v := getenv(EnvCPUs); v != "" {
		n, err := vmtest.ParseCPUs(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvCPUs, v, err)
		}
		c.CPUs = n
	}
	return c, nil
}

// nodeTools are the host tools of the build besides the VM lane's (qemu,
// busybox-static, xz, zstd, dpkg-deb): mmdebstrap for the root filesystem,
// mkfs.ext4 for the images, debugfs to read the output disk, chroot for
// depmod.
var nodeTools = []vmtest.HostTool{
	{Path: "mmdebstrap", Package: "mmdebstrap"},
	{Path: "mkfs.ext4", Package: "e2fsprogs"},
	{Path: "debugfs", Package: "e2fsprogs"},
	{Path: "chroot", Package: "coreutils"},
}

// Prepared is what every run shares: all of it cached.
type Prepared struct {
	Kernel *vmtest.Kernel
	Image  *Image
	Crictl string
	Images images.Set
	// Containerd is the built containerd 2.x the payload carries; nil for
	// the root filesystem's (ContainerdDebian).
	Containerd *ContainerdBuild
	// ContainerdVersion names the guest's containerd for the lane's
	// lines: Debian's package version as the image's dpkg status has
	// it, or the built release.
	ContainerdVersion string
	// Took is how long Prepare took, and its steps.
	Took map[string]time.Duration
}

// Prepare installs missing host tools, and resolves, builds or reuses the
// kernel (the VM lane's cache), the root filesystem with its initrd, a
// static crictl, the test images and, for ContainerdV2, containerd 2.x.
// The builds run in parallel; each is serialised across processes by its
// own flock.
func Prepare(ctx context.Context, c Config) (*Prepared, error) {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if err := CheckStage(c.Stage); err != nil {
		return nil, err
	}
	start := time.Now()
	p := &Prepared{Took: map[string]time.Duration{}}
	kp, err := vmtest.Prepare(ctx, vmtest.Config{Kernel: KernelSeries, CacheDir: c.CacheDir, Log: c.Log})
	if err != nil {
		return nil, fmt.Errorf("prepare kernel %s: %w", KernelSeries, err)
	}
	p.Kernel = kp.Kernel
	if err := vmtest.InstallTools(ctx, c.Log, nodeTools); err != nil {
		return nil, err
	}
	p.Took["kernel and tools"] = time.Since(start).Round(time.Millisecond)
	sources, err := os.ReadFile(c.Sources)
	if err != nil {
		return nil, fmt.Errorf("read apt sources: %w", err)
	}
	mmv, err := commandOutput(ctx, "mmdebstrap", "--version")
	if err != nil {
		return nil, err
	}
	bb, err := sha256File(vmtest.Busybox)
	if err != nil {
		return nil, err
	}
	r := &Rootfs{Kernel: p.Kernel, Sources: sources, SandboxImage: images.PauseName, Mmdebstrap: mmv, BusyboxSum: bb}

	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	timed := func(name string, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			err := f()
			mu.Lock()
			defer mu.Unlock()
			p.Took[name] = time.Since(t0).Round(time.Millisecond)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	timed("rootfs", func() (err error) { p.Image, err = CachedImage(ctx, c.CacheDir, c.Sources, r, c.Log); return })
	timed("crictl", func() (err error) { p.Crictl, err = CachedCrictl(ctx, c.CacheDir, c.Go, c.Log); return })
	timed("images", func() (err error) { p.Images, err = images.Cached(ctx, images.DefaultCacheDir, c.Log); return })
	if c.Containerd == ContainerdV2 {
		timed("containerd", func() (err error) { p.Containerd, err = CachedContainerd(ctx, c.CacheDir, c.Go, c.Log); return })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	switch {
	case p.Containerd != nil:
		p.ContainerdVersion = p.Containerd.Version
	default:
		p.ContainerdVersion = ContainerdDebian
		if v := imagePackageVersion(ctx, p.Image.Rootfs, "containerd"); v != "" {
			p.ContainerdVersion = "debian " + v
		}
	}
	p.Took["total"] = time.Since(start).Round(time.Millisecond)
	return p, nil
}

// Test is one test binary run in a guest, as the VM lane's.
type Test = vmtest.Test

// Result is how a guest run ended (vmtest.Result), and Payload the time
// to make the payload disk.
type Result struct {
	vmtest.Result
	Payload time.Duration
}

// runDirPrefix starts the name of each run's temporary directory, followed
// by the runner's pid.
const runDirPrefix = "nodeguard-nodevm-"

// bootAttempts bounds the boots of one run: a kernel that panics before
// the test wrote a byte (seen now and then with 6.12 under TCG, in early
// text patching) is booted again.
const bootAttempts = 3

// Run makes the payload disk for t, boots the cached image with it, streams
// the test's output to stdout and reports how the guest ended. Progress
// ("nodelane:" lines of the guest's console) goes to the log; console
// lines that report a kernel bug go to stderr, and the console's tail too
// when the guest ended without an exit status.
func Run(ctx context.Context, c Config, p *Prepared, t Test, stdout, stderr io.Writer) (Result, error) {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	vmtest.SweepStaleRuns(os.TempDir(), runDirPrefix)
	tmp, err := os.MkdirTemp("", runDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return Result{}, fmt.Errorf("run %s: %w", t.Binary, err)
	}
	defer os.RemoveAll(tmp)

	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return Result{}, fmt.Errorf("run %s: %w", t.Binary, err)
	}
	pl := &Payload{
		Binary: t.Binary,
		Args:   t.Args,
		Dir:    t.Dir,
		Env:    append(guestEnv(t.Environ, p.Kernel.Release), EnvLane+"=1"),
		Stage:  c.Stage,
		Images: []images.Image{p.Images.Pause, p.Images.Busybox, p.Images.Hog},
		Crictl: p.Crictl,
		Marker: vmtest.ExitMarkerPrefix + "-" + hex.EncodeToString(nonce),
	}
	if p.Containerd != nil {
		conf, err := ContainerdV2Config(images.PauseName)
		if err != nil {
			return Result{}, err
		}
		pl.Containerd = &PayloadContainerd{Version: p.Containerd.Version, Dir: p.Containerd.Dir, Binaries: p.Containerd.Binaries, Config: conf}
	}
	var netArgs []string
	if c.Cluster != "" {
		relay, err := os.Executable()
		if err != nil {
			return Result{}, fmt.Errorf("run %s: the relay: %w", t.Binary, err)
		}
		c.Log.Info("starting the guest's control plane on the host's loopback", "bin", c.Cluster)
		gc, err := startCluster(ctx, c.Cluster, filepath.Join(tmp, "cluster"), relay, progressWriter{c.Log})
		if err != nil {
			return Result{}, fmt.Errorf("run %s: %w", t.Binary, err)
		}
		defer func() {
			if err := gc.cp.Stop(); err != nil {
				c.Log.Warn("stop the guest's control plane", "err", err)
			}
		}()
		if netArgs, err = gc.net.netArgs(); err != nil {
			return Result{}, fmt.Errorf("run %s: %w", t.Binary, err)
		}
		pl.Extra = gc.entries
		c.Log.Info("the guest's control plane is up", "server", gc.cp.Server, "node", ClusterNodeName,
			"guest_api", ClusterAPIAddress, "node_port", gc.net.NodePort)
	}
	t0 := time.Now()
	disk, err := makePayload(ctx, c.Log, tmp, pl)
	if err != nil {
		return Result{}, err
	}
	out := filepath.Join(tmp, "out.img")
	if err := MakeOutImage(ctx, c.Log, out); err != nil {
		return Result{}, err
	}
	payloadTook := time.Since(t0)

	for i := 1; ; i++ {
		cw := &countingWriter{w: stdout}
		res, bootPanic, err := boot(ctx, c, p, pl.Marker, Disks{Payload: disk, Out: out}, netArgs, filepath.Join(tmp, fmt.Sprintf("console-%d.log", i)), cw, stderr)
		res.Payload = payloadTook
		if err == nil || !bootPanic || cw.n > 0 || i == bootAttempts || ctx.Err() != nil {
			// Whatever the checks wrote, even when they failed or the
			// guest was killed.
			return res, errors.Join(err, copyOut(context.WithoutCancel(ctx), c, out, stderr))
		}
		fmt.Fprintf(stderr, "nodevm: the guest kernel panicked while booting, before the tests started; booting again (%d/%d)\n", i+1, bootAttempts)
	}
}

// guestEnv is the test binary's environment in the guest: vmtest's
// selection of the host's, without the output disk's variables (EnvOut
// names a host directory; the lane script sets EnvOutDir).
func guestEnv(host []string, release string) []string {
	env := vmtest.GuestEnv(host, KernelSeries, release)
	return slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == EnvOut || name == EnvOutDir || name == EnvCluster
	})
}

// copyOut copies the output disk's files to c.Out, saying where on
// stderr; without c.Out it says that they were not kept.
func copyOut(ctx context.Context, c Config, image string, stderr io.Writer) error {
	if c.Out == "" {
		fmt.Fprintf(stderr, "nodevm: the output disk is not kept (%s is not set)\n", EnvOut)
		return nil
	}
	files, err := CopyOut(ctx, image, c.Out)
	if len(files) > 0 {
		fmt.Fprintf(stderr, "nodevm: the guest's output: %d files in %s: %s\n", len(files), c.Out, strings.Join(files, ", "))
	} else if err == nil {
		fmt.Fprintf(stderr, "nodevm: the guest wrote nothing on its output disk (%s unchanged)\n", c.Out)
	}
	return err
}

// makePayload writes the payload tree and its image beneath tmp.
func makePayload(ctx context.Context, log *slog.Logger, tmp string, pl *Payload) (string, error) {
	entries, err := pl.Entries()
	if err != nil {
		return "", err
	}
	tree := filepath.Join(tmp, "payload")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return "", fmt.Errorf("make payload: %w", err)
	}
	n, err := WriteTree(tree, entries)
	if err != nil {
		return "", err
	}
	disk := filepath.Join(tmp, "payload.img")
	log.Info("making the payload disk", "files", len(entries), "bytes", n, "image_bytes", PayloadImageSize(n))
	if err := MakePayloadImage(ctx, log, tree, disk, n); err != nil {
		return "", fmt.Errorf("make payload: %w", err)
	}
	return disk, os.RemoveAll(tree)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// Disks are a run's own disk images besides the cached root filesystem.
type Disks struct {
	// Payload is read-only in the guest; Out is the output disk, the
	// only one the guest writes back to the host.
	Payload, Out string
}

// QemuArgs returns qemu's command line: vmtest's microvm and kernel
// parameters, the root image (snapshot=on: the guest's writes go to a
// temporary file, the cached image stays clean), the payload disk
// (read-only) and the output disk (read-write) as virtio-mmio block
// devices (vda, vdb, vdc in this order), no network device at all (pods'
// networking stays inside the guest) unless netArgs (a cluster run's
// GuestNet), the console (ttyS0) in a file and the test channel (ttyS1)
// on stdout.
func QemuArgs(c Config, vmlinux, initrd, rootfs string, disks Disks, netArgs []string, console string, tscKHz int) []string {
	if netArgs == nil {
		netArgs = []string{"-nic", "none"}
	}
	params := append(vmtest.KernelParams(tscKHz),
		"root=/dev/vda",
		"systemd.unified_cgroup_hierarchy=1",
		"systemd.unit="+LaneTarget,
		// unit status lines on the console: the console file is what a
		// failed boot shows
		"systemd.show_status=1",
		"rdinit=/init",
	)
	args := []string{
		"-M", vmtest.MicrovmMachine,
		"-accel", "tcg,thread=" + c.TCG + ",tb-size=512",
		"-cpu", "max",
		"-m", c.Memory,
		"-smp", strconv.Itoa(c.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
	}
	return append(append(args, netArgs...),
		"-chardev", "file,id=console,path="+console,
		"-serial", "chardev:console",
		"-chardev", "stdio,id=test,signal=off",
		"-device", "isa-serial,chardev=test,index=1",
		"-kernel", vmlinux,
		"-initrd", initrd,
		"-append", strings.Join(params, " "),
		"-drive", "id=root,file="+rootfs+",format=raw,if=none,snapshot=on",
		"-device", "virtio-blk-device,drive=root",
		"-drive", "id=payload,file="+disks.Payload+",format=raw,if=none,readonly=on",
		"-device", "virtio-blk-device,drive=payload",
		"-drive", "id=out,file="+disks.Out+",format=raw,if=none",
		"-device", "virtio-blk-device,drive=out",
	)
}

// boot runs one guest through the lab's one VM runner (vmtest.Boot).
func boot(ctx context.Context, c Config, p *Prepared, marker string, disks Disks, netArgs []string, console string, stdout, stderr io.Writer) (res Result, bootPanic bool, _ error) {
	r, err := vmtest.Boot(ctx, vmtest.BootSpec{
		Args:    QemuArgs(c, p.Kernel.Vmlinux, p.Image.Initrd, p.Image.Rootfs, disks, netArgs, console, vmtest.HostTSCkHz()),
		Timeout: c.Timeout, Marker: marker, Console: console, AllConsole: c.Console,
		TimeoutHint: "raise " + EnvTimeout + " if the checks are just slow",
		FailHint:    "kernel panic, initrd or lane unit failure",
		Started: func(pid int) {
			c.Log.Info("booting the node", "kernel", p.Kernel.Release, "memory", c.Memory, "cpus", c.CPUs, "tcg", c.TCG,
				"race", c.Race, "timeout", c.Timeout, "timeout_pid", pid, "host_load", HostLoad())
		},
		Follow: func(start time.Time) func() { return followConsole(console, c.Log, start) },
	}, stdout, stderr, &bootPanic)
	res.Result = r
	return res, bootPanic, err
}

// HostLoad is the host's load average (/proc/loadavg's first three
// figures), logged with the guest's start and end: other lanes' VMs on the
// same cores slow the guest down.
func HostLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// isProgress reports whether a console line is printed as progress while
// the guest runs: the initrd's and the lane unit's own messages, and
// systemd's status lines ([  OK  ], [FAILED]) about multi-user.target,
// containerd and the lane's units, not its "job running" spinner.
func isProgress(line string) bool {
	if strings.Contains(line, "nodelane:") || strings.Contains(line, "nodelane-initrd:") {
		return true
	}
	if !strings.HasPrefix(line, "[  OK  ]") && !strings.HasPrefix(line, "[FAILED]") {
		return false
	}
	for _, s := range []string{"multi-user.target", "containerd.service", "nodelane", "FAILED"} {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// splitLines returns the complete lines of rest+b and what follows the
// last newline.
func splitLines(rest string, b []byte) (lines []string, partial string) {
	text := rest + string(b)
	for {
		line, after, ok := strings.Cut(text, "\n")
		if !ok {
			return lines, text
		}
		lines = append(lines, line)
		text = after
	}
}

// followConsole logs the guest console's progress lines as they arrive,
// polling the file, until the returned func is called (which reads the
// rest first).
func followConsole(name string, log *slog.Logger, start time.Time) func() {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var off int64
		var partial string
		read := func() {
			f, err := os.Open(name)
			if err != nil {
				return
			}
			defer f.Close()
			if _, err := f.Seek(off, io.SeekStart); err != nil {
				return
			}
			b, _ := io.ReadAll(io.LimitReader(f, 4<<20))
			off += int64(len(b))
			var lines []string
			lines, partial = splitLines(partial, b)
			for _, l := range lines {
				if l = strings.TrimSpace(stripANSI(l)); isProgress(l) {
					log.Info("guest: "+l, "at", time.Since(start).Round(100*time.Millisecond))
				}
			}
		}
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				read()
				return
			case <-tick.C:
				read()
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// stripANSI removes the escapes of systemd's status lines (colours, and
// the reverse line feed and carriage return its spinner rewrites a line
// with), keeping what follows the last carriage return.
func stripANSI(s string) string {
	s = strings.TrimRight(s, "\r") // a serial console ends its lines with \r\n
	if i := strings.LastIndex(s, "\r"); i >= 0 {
		s = s[i+1:]
	}
	if !strings.Contains(s, "\x1b") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] != '[' {
			i++ // a two-byte escape such as ESC M
			continue
		}
		if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
