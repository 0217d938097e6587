// Package vmtest runs nodeguard's privileged Go tests inside throwaway qemu
// VMs on Debian's own kernels with pure cgroup v2, the production layout
// that the development and CI machines (hybrid cgroups, a 6.18 kernel)
// cannot show. It is the VM lane of `make test`; cmd/vmrun is its command.
//
// # How a package is tested
//
// `make test-vm` builds bin/vmrun and runs `vmrun -lane`, which for each
// kernel series in VM_KERNELS (6.1: linux-image-amd64, Debian 12's own
// kernel; 6.12: linux-image-6.12-amd64) and each package in VM_PKGS runs
//
//	CGO_ENABLED=0 NODEGUARD_VM_KERNEL=<series> go test -json -count=1 -exec <abs>/bin/vmrun <pkg>
//
// prints go test's usual output (a failed test's output, a line per
// package), and ends with one line per kernel:
//
//	vm <uname -r>: packages N, passed P, failed F, skipped S (<pkg> <test>: <reason>; ...)
//
// Tests and subtests are counted alike. A failed package makes vmrun, and
// so the make target, exit non-zero after the summary. -race needs cgo, so
// this lane runs without it; the host lane keeps -race.
//
// go test builds the static test binary and starts `vmrun <binary> <test
// flags>` in the package directory. vmrun then:
//
//  1. Prepare, under an flock on the cache directory (go test runs the
//     runners of several packages in parallel): installs what is missing of
//     qemu-system-x86, busybox-static, xz-utils and zstd through apt-get
//     (apt-get update first only when there are no package lists, or a
//     look-up failed); resolves the series' metapackage to its kernel image
//     package with apt-cache show (linux-image-amd64 depends on
//     linux-image-6.1.0-57-amd64 (= 6.1.192-3)); on first use downloads it
//     with apt-get download (nothing is installed on the host), streams
//     ./boot/vmlinuz-<release> out of the package's data archive with
//     dpkg-deb --fsys-tarfile, and extracts the uncompressed ELF vmlinux
//     from it (ExtractVmlinux: 6.1 is xz, 6.12 zstd); and builds the base
//     initramfs. Both are cached (see Cache).
//  2. Run: writes the initramfs as the cached base followed by a per-run
//     newc archive (the kernel unpacks concatenated archives in order) with
//     the test binary, the package's testdata/ at the same absolute path as
//     on the host, a run script and a fresh exit-marker nonce; boots
//     `timeout -k 5 <N> qemu-system-x86_64 -M microvm,pit=on,pic=on,rtc=on
//     -cpu max -m 512M -smp 2 -kernel vmlinux -initrd ... -no-reboot` under
//     TCG; copies the test's output to its stdout; exits with the test's
//     status.
//
// The guest has two serial ports. ttyS0 is the kernel console, written to a
// file on the host, so kernel messages (the OOM reports the tests provoke)
// never mix into go test's output; ttyS1 (a second isa-serial) is the test
// channel, qemu's stdout, set raw so bytes arrive unchanged. After the test
// binary exits, /init prints "\nNODEGUARD-VM-EXIT-<nonce>=<status>" there
// and reboots (-no-reboot turns that into qemu's exit). The runner copies
// everything before the marker, exactly, and takes the status from it; a
// test cannot fake it without the nonce. A guest that ends without the
// marker (panic, /init failure) or is killed at the timeout makes vmrun
// exit non-zero (124 for the timeout) with the reason and the console's
// tail; console lines that report a kernel bug (BUG:, WARNING: CPU:, Oops,
// lockups) are always copied to stderr.
//
// # The guest
//
// A Debian kernel on qemu's microvm machine: no firmware, no PCI, no disk,
// no network device; Debian's virtio and 9p drivers are modules, so the
// initramfs is the only file system. Kernel command line: console=ttyS0
// cgroup_no_v1=all (the memory controller can only be on cgroup2)
// tsc_early_khz=<host TSC> tsc=reliable (under TCG nothing calibrates the
// TSC, and 6.1 otherwise declares the vCPUs' TSCs unsynchronised and falls
// back to the 4 ms jiffies clock) quiet panic=-1.
//
// /init (busybox sh, PID 1) mounts proc, sysfs, devtmpfs, devpts, /dev/shm,
// /run, cgroup2 on /sys/fs/cgroup with systemd's options (nsdelegate,
// memory_recursiveprot) and bpffs on /sys/fs/bpf, but neither tracefs nor
// debugfs: as on a freshly booted machine, the code under test mounts
// tracefs itself (host.EnsureTracefs); brings lo up; writes every controller of
// the root's cgroup.controllers into its cgroup.subtree_control, so the
// sandboxes cgtest makes beneath the root get memory, cpu, io, pids and the
// rest. The test binary runs as root with every capability (unlike the
// development machines, CAP_SYS_RESOURCE too) in the ROOT cgroup, which is
// exempt from the no-internal-processes rule; /proc/self/cgroup is "0::/".
// /tmp is left on the initramfs (already RAM), so a package directory under
// /tmp is not hidden by a mount.
//
// The userland is busybox-static, hard-linked under each applet's name
// (bin/sh, bin/sleep, bin/true, bin/echo, usr/bin/timeout, ...), so a test
// that starts "sleep" sees /proc/PID/exe end in "sleep" as on a real host.
// /etc has passwd, group, hostname and hosts.
//
// The guest environment is the host test's NODEGUARD_* variables
// (NODEGUARD_REQUIRE_PRIVILEGED passes through) and the Go runtime's knobs
// (GODEBUG, GOTRACEBACK, GOMAXPROCS, GOGC, GOMEMLIMIT), plus
// NODEGUARD_VM_KERNEL=<series> and NODEGUARD_VM_RELEASE=<uname -r>;
// cgtest.Lane reports "vm-v2" there and cgtest.RequireMode lets tests that
// only mean something on one cgroup mode skip elsewhere.
//
// # Cache
//
// DefaultCacheDir (/var/cache/nodeguard-vm, NODEGUARD_VM_CACHE overrides):
//
//	lock                                   flock for Prepare
//	kernels/<release>_<debian version>/vmlinux  uncompressed ELF, 58-66 MB
//	initramfs/base-<key>.cpio              busybox, links, /etc, /init
//
// The base's key hashes the init script, the archive layout and busybox, so
// a change to any rebuilds it; a newer kernel in the archive after apt-get
// update gets a directory of its own. Per-run files live in a temporary
// directory that is removed when the run ends.
//
// # Knobs
//
//	NODEGUARD_VM_KERNEL   6.1 | 6.12 | linux-image-<release>  (required for -exec)
//	NODEGUARD_VM_TIMEOUT  per guest run, seconds or a duration; default 240s
//	NODEGUARD_VM_MEMORY   qemu -m; default 512M
//	NODEGUARD_VM_CPUS     vCPUs; default 2
//	NODEGUARD_VM_CONSOLE  1 copies the whole kernel console to stderr
//
// `vmrun -lane -v` prints every test's output; `-run RE` is passed to go
// test; `make test-vm VM_KERNELS=6.12 VM_PKGS=./loader` narrows the lane.
//
// # Costs (2-core development machine)
//
// Boot to /init is ~1.3 s under TCG and a package round trip (link, pack,
// boot, test, power-off) 3-8 s; the whole lane (2 kernels x 4 packages) is
// ~35 s warm. The test channel moves ~300 KB/s, plenty for test output but
// not for bulk data. The first run downloads and unpacks the two kernel packages
// (70 and 107 MB from the apt mirror, ~2 s each here). A 512M guest uses
// ~300 MB of host memory.
//
// # The node lane
//
// lab/nodevm (make test-node) boots a systemd node on the 6.12 kernel
// that Prepare caches here, and reuses this package's exported pieces:
// InstallTools, DownloadPackage and WalkDebData for its tools and the
// kernel's modules, MicrovmMachine and KernelParams for qemu, CopyUntilMarker,
// ReportConsole, GuestEnv, ShellQuote and SweepStaleRuns for a run. They
// behave here as they always did.
//
// Invariants:
//
//   - Nothing is installed on the host except the runner's tools through
//     apt-get; kernel packages are only downloaded and read.
//   - Every qemu runs under timeout(1) and is also stopped (SIGTERM through
//     timeout) when the runner is interrupted or dies; processes are
//     stopped by pid or by the process group the runner made, never by name.
//   - The test channel carries only what the test binary wrote, byte for
//     byte; kernel messages go to the console file.
//   - A test binary that is not static is refused with ErrNotStatic before
//     anything boots.
package vmtest
