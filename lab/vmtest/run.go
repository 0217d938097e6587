package vmtest

import (
	"github.com/nodeguard/nodeguard/internal/flock"
	"slices"

	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Environment variables the runner reads.
const (
	// EnvKernel selects the guest kernel series ("6.1", "6.12") or a
	// linux-image-* package; required. The guest sees it too, so tests
	// (cgtest.Lane) know they run in the VM lane.
	EnvKernel = "NODEGUARD_VM_KERNEL"
	// EnvCache overrides DefaultCacheDir.
	EnvCache = "NODEGUARD_VM_CACHE"
	// EnvTimeout bounds one guest run: seconds ("240") or a Go duration
	// ("4m"); DefaultTimeout when unset.
	EnvTimeout = "NODEGUARD_VM_TIMEOUT"
	// EnvMemory is the guest's memory in qemu's -m syntax; DefaultMemory.
	EnvMemory = "NODEGUARD_VM_MEMORY"
	// EnvCPUs is the guest's vCPU count; DefaultCPUs.
	EnvCPUs = "NODEGUARD_VM_CPUS"
	// EnvConsole set to "1" copies the guest's whole kernel console to
	// stderr after the run (it is always shown when a run ends abnormally).
	EnvConsole = "NODEGUARD_VM_CONSOLE"
	// EnvRelease is set in the guest to the kernel release (uname -r).
	EnvRelease = "NODEGUARD_VM_RELEASE"
)

// Defaults, each with its reason.
const (
	// DefaultCacheDir holds kernels and the base initramfs across runs.
	DefaultCacheDir = "/var/cache/nodeguard-vm"
	// DefaultTimeout bounds a guest run: the slowest package (loader, with
	// a real OOM and BPF loads under TCG) takes well under a minute; a
	// hung guest must not hold CI for go test's 10 minutes.
	DefaultTimeout = 240 * time.Second
	// DefaultMemory fits a test binary in the initramfs (tens of MiB),
	// the kernel, and tests that drive a 64 MiB cgroup into OOM, at ~300
	// MiB of host memory.
	DefaultMemory = "512M"
	// DefaultCPUs matches the host's 2 cores: multi-threaded TCG runs one
	// host thread per vCPU, and per-CPU BPF maps and rings get two CPUs.
	DefaultCPUs = 2
	// defaultTSCkHz is used when the host's TSC frequency is unknown.
	defaultTSCkHz = 2000000
	// KillGrace is how long timeout(1) waits after SIGTERM before SIGKILL.
	KillGrace = 5 * time.Second
	// consoleTail is how many kernel console lines an abnormal end shows.
	consoleTail = 60
)

// Config configures Prepare and Run.
type Config struct {
	Kernel   string // series or package, see EnvKernel
	CacheDir string
	Timeout  time.Duration
	Memory   string
	CPUs     int
	Console  bool // see EnvConsole
	Log      *slog.Logger
}

// ConfigFromEnv reads Config from the environment through getenv.
func ConfigFromEnv(getenv func(string) string, log *slog.Logger) (Config, error) {
	c := Config{
		Kernel:   getenv(EnvKernel),
		CacheDir: getenv(EnvCache),
		Timeout:  DefaultTimeout,
		Memory:   getenv(EnvMemory),
		CPUs:     DefaultCPUs,
		Console:  getenv(EnvConsole) == "1",
		Log:      log,
	}
	if c.Kernel == "" {
		return c, fmt.Errorf("%s is not set: name the guest kernel (%s)", EnvKernel, strings.Join(KernelSeries(), ", "))
	}
	if _, err := metaPackage(c.Kernel); err != nil {
		return c, err
	}
	if c.CacheDir == "" {
		c.CacheDir = DefaultCacheDir
	}
	if c.Memory == "" {
		c.Memory = DefaultMemory
	}
	if v := getenv(EnvTimeout); v != "" {
		d, err := ParseTimeout(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvTimeout, v, err)
		}
		c.Timeout = d
	}
	if v := getenv(EnvCPUs); v != "" {
		n, err := ParseCPUs(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", EnvCPUs, v, err)
		}
		c.CPUs = n
	}
	return c, nil
}

// ParseCPUs accepts a number of vCPUs from 1 to 64 (the VM and node
// lanes' knob).
func ParseCPUs(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 64 {
		return 0, errors.New("want a number of vCPUs from 1 to 64")
	}
	return n, nil
}

// ParseTimeout accepts whole seconds or a Go duration, at least one
// second (the VM and node lanes' timeout knobs).
func ParseTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, errors.New("want seconds or a duration such as 4m")
		}
		d = time.Duration(n) * time.Second
	}
	if d < time.Second {
		return 0, errors.New("want at least one second")
	}
	return d, nil
}

// Prepared is what every run of one kernel shares.
type Prepared struct {
	Kernel *Kernel
	// Base is the cached base initramfs (BaseArchive).
	Base string
}

// Prepare installs missing host tools, resolves and caches the kernel and
// the base initramfs. It holds an exclusive lock on the cache directory
// while it works, so runners started in parallel by go test for several
// packages download and build each thing once.
func Prepare(ctx context.Context, c Config) (*Prepared, error) {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(c.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("create cache %s: %w", c.CacheDir, err)
	}
	unlock, err := flock.Lock(ctx, filepath.Join(c.CacheDir, "lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	a := &apt{log: c.Log}
	if err := a.ensureTools(ctx, hostTools); err != nil {
		return nil, err
	}
	k, err := a.resolveKernel(ctx, c.Kernel)
	if err != nil {
		return nil, err
	}
	if err := a.fetchKernel(ctx, c.CacheDir, k); err != nil {
		if a.updated {
			return nil, err
		}
		// Stale package lists name a version the archive no longer
		// has: update them once, resolve again and retry.
		c.Log.Info("kernel download failed; updating the package lists and retrying", "err", err)
		if uerr := a.update(ctx); uerr != nil {
			return nil, errors.Join(err, uerr)
		}
		if k, err = a.resolveKernel(ctx, c.Kernel); err != nil {
			return nil, err
		}
		if err := a.fetchKernel(ctx, c.CacheDir, k); err != nil {
			return nil, err
		}
	}
	base, err := baseArchive(c.CacheDir)
	if err != nil {
		return nil, err
	}
	return &Prepared{Kernel: k, Base: base}, nil
}

// baseArchive returns the cached base initramfs, building it when the init
// script or busybox changed.
func baseArchive(cache string) (string, error) {
	key, err := BaseArchiveKey(Busybox)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "initramfs")
	name := filepath.Join(dir, "base-"+key+".cpio")
	if _, err := os.Stat(name); err == nil {
		return name, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build base initramfs: %w", err)
	}
	// Older bases are stale by construction.
	old, _ := filepath.Glob(filepath.Join(dir, "base-*.cpio"))
	for _, o := range old {
		_ = os.Remove(o)
	}
	f, err := os.CreateTemp(dir, "base-*.tmp")
	if err != nil {
		return "", fmt.Errorf("build base initramfs: %w", err)
	}
	defer os.Remove(f.Name())
	err = BaseArchive(f, Busybox)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("build base initramfs: %w", err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return "", fmt.Errorf("build base initramfs: %w", err)
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return "", fmt.Errorf("build base initramfs: %w", err)
	}
	return name, nil
}

// Test is one test binary run in a guest.
type Test struct {
	// Binary is the host path of the static test binary; Args follow it.
	Binary string
	Args   []string
	// Dir is the host working directory (go test starts the runner in
	// the package directory). The guest runs in the same path, with
	// Dir/testdata packed when it exists.
	Dir string
	// Environ is the host environment the guest's is taken from.
	Environ []string
}

// Result is how a guest run ended.
type Result struct {
	// Status is the test binary's exit status; meaningful when Exited.
	Status int
	// Exited reports that the guest printed the exit marker.
	Exited bool
	// TimedOut reports that the run was killed at Config.Timeout.
	TimedOut bool
	// Elapsed is the qemu wall-clock time, boot to power-off.
	Elapsed time.Duration
}

// Run boots p's kernel with the base initramfs plus t, streams the test's
// output to stdout, and reports how the guest ended. Kernel console lines
// that report a kernel bug are copied to stderr, and the console's tail too
// when the guest ended without an exit status.
//
// A guest whose kernel panics while booting, before the test wrote a byte,
// is booted again, twice at most: under TCG with two vCPUs, Debian's 6.12
// kernel now and then takes an int3 Oops in early text patching
// (sched_clock_cpu), which has nothing to do with the test.
func Run(ctx context.Context, c Config, p *Prepared, t Test, stdout, stderr io.Writer) (Result, error) {
	const attempts = 3
	for i := 1; ; i++ {
		cw := &countingWriter{w: stdout}
		res, bootPanic, err := runOnce(ctx, c, p, t, cw, stderr)
		if err == nil || !bootPanic || cw.n > 0 || i == attempts || ctx.Err() != nil {
			return res, err
		}
		fmt.Fprintf(stderr, "vmrun: the guest kernel panicked while booting, before the test started; booting again (%d/%d)\n", i+1, attempts)
	}
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

func runOnce(ctx context.Context, c Config, p *Prepared, t Test, stdout, stderr io.Writer) (_ Result, bootPanic bool, _ error) {
	res, err := runGuest(ctx, c, p, t, stdout, stderr, &bootPanic)
	return res, bootPanic, err
}

func runGuest(ctx context.Context, c Config, p *Prepared, t Test, stdout, stderr io.Writer, bootPanic *bool) (Result, error) {
	var res Result
	if err := CheckStatic(t.Binary); err != nil {
		return res, err
	}
	sweepStaleRuns(os.TempDir())
	tmp, err := os.MkdirTemp("", runDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return res, fmt.Errorf("run %s: %w", t.Binary, err)
	}
	defer os.RemoveAll(tmp)

	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return res, fmt.Errorf("run %s: %w", t.Binary, err)
	}
	spec := &RunSpec{
		Binary: t.Binary,
		Args:   t.Args,
		Env:    GuestEnv(t.Environ, c.Kernel, p.Kernel.Release),
		Dir:    t.Dir,
		Marker: ExitMarkerPrefix + "-" + hex.EncodeToString(nonce),
	}
	if st, err := os.Stat(filepath.Join(t.Dir, "testdata")); err == nil && st.IsDir() {
		spec.Testdata = filepath.Join(t.Dir, "testdata")
	}
	initrd := filepath.Join(tmp, "initrd.cpio")
	if err := writeInitrd(initrd, p.Base, spec); err != nil {
		return res, err
	}

	console := filepath.Join(tmp, "console.log")
	return Boot(ctx, BootSpec{
		Args:    qemuArgs(c, p.Kernel.Vmlinux, initrd, console, HostTSCkHz()),
		Timeout: c.Timeout, Marker: spec.Marker, Console: console, AllConsole: c.Console,
		TimeoutHint: fmt.Sprintf("%s=%s; raise %s if the tests are just slow", EnvKernel, c.Kernel, EnvTimeout),
		FailHint:    "kernel panic or /init failure",
	}, stdout, stderr, bootPanic)
}

// BootSpec is one guest boot: qemu's arguments, its bound, the marker the
// guest prints its exit status after, and its console file.
type BootSpec struct {
	// Args are qemu-system-x86_64's arguments.
	Args []string
	// Timeout bounds the guest; timeout(1) kills qemu KillGrace after it.
	Timeout time.Duration
	// Marker precedes the exit status on the test channel (CopyUntilMarker).
	Marker string
	// Console is the console file qemu writes; AllConsole copies all of it
	// to stderr, not only the lines that report a kernel bug.
	Console    string
	AllConsole bool
	// TimeoutHint and FailHint complete the errors for a guest killed at
	// Timeout and one that powered off without an exit status.
	TimeoutHint, FailHint string
	// Started, when set, is called once qemu runs, with timeout(1)'s pid.
	Started func(pid int)
	// Follow, when set, is called once qemu runs and returns a function
	// called when it has exited (a console follower's stop).
	Follow func(start time.Time) (stop func())
}

// Boot runs one guest under timeout(1), copies its test channel to stdout
// until the marker, and reports how it ended; *bootPanic is set when the
// guest ended without an exit status and its console shows a kernel
// panic. It is the one VM runner of the lab: the VM lane's test binaries
// (Run) and the node lane's systemd guests (lab/nodevm) both boot
// through it.
func Boot(ctx context.Context, b BootSpec, stdout, stderr io.Writer, bootPanic *bool) (Result, error) {
	var res Result
	secs := int((b.Timeout + time.Second - 1) / time.Second)
	args := append([]string{"-k", strconv.Itoa(int(KillGrace / time.Second)), strconv.Itoa(secs), "qemu-system-x86_64"}, b.Args...)
	cmd := exec.Command("timeout", args...)
	cmd.Stdin = nil // /dev/null: the test channel carries output only
	var qemuErr bytes.Buffer
	cmd.Stderr = &qemuErr
	// If the runner dies, timeout(1) gets SIGTERM and passes it to qemu.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return res, fmt.Errorf("start qemu: %w", err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start qemu: %w", err)
	}
	if b.Started != nil {
		b.Started(cmd.Process.Pid)
	}
	// On cancellation (the runner got SIGINT or SIGTERM) stop the guest
	// the same way: timeout(1) forwards SIGTERM to qemu. By pid, never by
	// name.
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	defer stop()
	follow := func() {}
	if b.Follow != nil {
		follow = b.Follow(start)
	}

	status, found, cerr := CopyUntilMarker(stdout, out, b.Marker)
	werr := cmd.Wait()
	follow()
	res.Elapsed = time.Since(start)
	res.Status, res.Exited = status, found
	var ee *exec.ExitError
	if errors.As(werr, &ee) && (ee.ExitCode() == 124 || ee.ExitCode() == 137) && !found {
		res.TimedOut = true
	}

	ReportConsole(stderr, b.Console, b.AllConsole, !found)
	if !found {
		if c, err := os.ReadFile(b.Console); err == nil && bytes.Contains(c, []byte("Kernel panic")) {
			*bootPanic = true
		}
	}
	switch {
	case cerr != nil:
		return res, fmt.Errorf("read guest output: %w", cerr)
	case found:
		*bootPanic = false
		return res, nil
	case ctx.Err() != nil:
		return res, fmt.Errorf("guest stopped: %w", ctx.Err())
	case res.TimedOut:
		return res, fmt.Errorf("guest killed after %s without finishing (%s)", b.Timeout, b.TimeoutHint)
	case werr != nil:
		return res, fmt.Errorf("qemu: %w: %s", werr, bytes.TrimSpace(qemuErr.Bytes()))
	}
	return res, fmt.Errorf("guest powered off without an exit status (%s; see the console above)%s",
		b.FailHint, suffix(bytes.TrimSpace(qemuErr.Bytes())))
}

// runDirPrefix starts the name of each run's temporary directory, followed
// by the runner's pid.
const runDirPrefix = "nodeguard-vmrun-"

// sweepStaleRuns removes run directories left by runners that were killed
// (SIGKILL skips their cleanup): those whose pid no longer exists.
func sweepStaleRuns(dir string) { SweepStaleRuns(dir, runDirPrefix) }

// SweepStaleRuns removes the directories dir/<prefix><pid>-* whose pid no
// longer exists: run directories of runners that were killed (SIGKILL skips
// their cleanup). Directories of live runners are left alone.
func SweepStaleRuns(dir, prefix string) {
	old, _ := filepath.Glob(filepath.Join(dir, prefix+"*-*"))
	for _, o := range old {
		pidStr, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(o), prefix), "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 {
			continue
		}
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			_ = os.RemoveAll(o)
		}
	}
}

func suffix(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return "; qemu: " + string(b)
}

// writeInitrd writes base followed by spec's run archive to name.
func writeInitrd(name, base string, spec *RunSpec) (retErr error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("write initramfs: %w", err)
	}
	defer func() {
		if err := f.Close(); err != nil && retErr == nil {
			retErr = fmt.Errorf("write initramfs: %w", err)
		}
	}()
	b, err := os.Open(base)
	if err != nil {
		return fmt.Errorf("write initramfs: %w", err)
	}
	defer b.Close()
	if _, err := io.Copy(f, b); err != nil {
		return fmt.Errorf("write initramfs: %w", err)
	}
	return RunArchive(f, spec)
}

// qemuArgs returns qemu's command line. The kernel console (ttyS0) goes to
// the file console; the test channel (ttyS1, a second 16550 on the ISA bus)
// is qemu's stdout, so kernel messages never mix into go test's output.
//
//   - microvm boots an uncompressed ELF vmlinux directly (no firmware, no
//     PCI); under TCG it needs the PIT (pit=on) for timer calibration, the
//     PIC and the RTC (wall clock).
//   - tsc_early_khz: no calibration source is reliable under TCG, and
//     TCG's TSC runs at the host's rate; tsc=reliable keeps 6.1 from
//     declaring the vCPUs' TSCs unsynchronised and falling back to jiffies
//     (4 ms resolution, which timing tests would notice).
//   - cgroup_no_v1=all: the memory controller can only be on cgroup2.
//   - panic=-1 with -no-reboot: a panic ends qemu at once; so does /init's
//     final reboot -f.
func qemuArgs(c Config, vmlinux, initrd, console string, tscKHz int) []string {
	appendLine := strings.Join(append(KernelParams(tscKHz), "rdinit=/init"), " ")
	return []string{
		"-M", MicrovmMachine,
		// One host thread runs every vCPU: multi-threaded TCG races with
		// the guest's cross-CPU text patching (static keys flipped at run
		// time), which showed as int3 Oopses in 6.12 under CI load.
		"-accel", "tcg,thread=single",
		"-cpu", "max",
		"-m", c.Memory,
		"-smp", strconv.Itoa(c.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-chardev", "file,id=console,path=" + console,
		"-serial", "chardev:console",
		"-chardev", "stdio,id=test,signal=off",
		"-device", "isa-serial,chardev=test,index=1",
		"-kernel", vmlinux,
		"-initrd", initrd,
		"-append", appendLine,
	}
}

// MicrovmMachine is qemu's -M value for the lane's guests: microvm boots
// an uncompressed ELF vmlinux directly (no firmware, no PCI); under TCG it
// needs the PIT for timer calibration, the PIC, the RTC (wall clock), and
// the ISA serial ports that carry the console and the test channel.
const MicrovmMachine = "microvm,pit=on,pic=on,rtc=on,isa-serial=on"

// KernelParams returns the kernel command line every lane guest starts
// with (see qemuArgs for why each is there): the console on ttyS0, no
// cgroup v1, the host's TSC frequency, and a panic that ends qemu at once.
func KernelParams(tscKHz int) []string {
	return []string{
		"console=ttyS0",
		"cgroup_no_v1=all",
		"tsc_early_khz=" + strconv.Itoa(tscKHz),
		"tsc=reliable",
		"quiet",
		"panic=-1",
	}
}

// GuestEnv returns the guest's environment: the host's NODEGUARD_*
// variables and the Go runtime's knobs, with EnvKernel and EnvRelease set.
func GuestEnv(host []string, kernel, release string) []string {
	var env []string
	for _, kv := range host {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == EnvKernel || name == EnvRelease {
			continue
		}
		switch {
		case strings.HasPrefix(name, "NODEGUARD_"),
			name == "GODEBUG", name == "GOTRACEBACK", name == "GOMAXPROCS", name == "GOGC", name == "GOMEMLIMIT":
			env = append(env, kv)
		}
	}
	return append(env, EnvKernel+"="+kernel, EnvRelease+"="+release)
}

// HostTSCkHz returns the host's TSC frequency from /proc/cpuinfo when the
// TSC is invariant, else defaultTSCkHz.
func HostTSCkHz() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return defaultTSCkHz
	}
	return parseTSCkHz(b)
}

// parseTSCkHz reads the first "cpu MHz" of a /proc/cpuinfo with the
// constant_tsc flag; defaultTSCkHz otherwise.
func parseTSCkHz(cpuinfo []byte) int {
	mhz, constant := 0.0, false
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "cpu MHz":
			if mhz == 0 {
				mhz, _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
			}
		case "flags":
			constant = constant || strings.Contains(" "+v+" ", " constant_tsc ")
		}
	}
	if !constant || mhz < 100 || mhz > 10000 {
		return defaultTSCkHz
	}
	return int(mhz * 1000)
}

// kernelTrouble marks console lines that report a kernel bug (not the OOM
// reports the tests provoke on purpose, which print a stack too).
var kernelTrouble = []string{"BUG:", "WARNING: CPU:", "Oops:", "Kernel panic", "general protection fault",
	"soft lockup", "hard LOCKUP", "blocked for more than", "UBSAN:", "KASAN:", "list_add corruption", "RCU stall"}

// ReportConsole copies kernel console lines that report a bug to w, and the
// console's tail (everything when all) when tail is set.
func ReportConsole(w io.Writer, name string, all, tail bool) {
	b, err := os.ReadFile(name)
	if err != nil {
		fmt.Fprintf(w, "vmrun: read kernel console: %v\n", err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if all {
		fmt.Fprintf(w, "vmrun: kernel console:\n%s\n", strings.Join(lines, "\n"))
		return
	}
	from := max(0, len(lines)-consoleTail)
	// The first report of a bug, with the lines after it: a panic's
	// tail alone is its last stack, not what went wrong first.
	first := slices.IndexFunc(lines, func(l string) bool {
		return slices.ContainsFunc(kernelTrouble, func(m string) bool { return strings.Contains(l, m) })
	})
	if first >= 0 && (!tail || first < from) {
		end := min(len(lines), first+40)
		if tail {
			end = min(end, from)
		}
		fmt.Fprintf(w, "vmrun: the guest kernel reported a problem:\n%s\n", strings.Join(lines[first:end], "\n"))
	}
	if tail {
		fmt.Fprintf(w, "vmrun: last %d lines of the kernel console:\n%s\n", len(lines)-from, strings.Join(lines[from:], "\n"))
	}
}
