// Package kubeletproc runs the real kubelet (v1.37.2, the binary
// scripts/controlplane.sh builds) as nodeguard's competitor in the
// benchmarks: standalone, with no API server, running static pods from a
// manifest directory against a private containerd (lab/crienv).
//
// It owns, for one run: the kubelet process, its configuration file, its
// root directory, certificates and pod logs beneath the caller's directory,
// the kubelet's cgroup tree beneath its cgroup root, and (CgroupRoot) that
// root itself. Close removes all of it, and nothing else.
//
// Why the kubelet runs the way it does (../shared/ENVIRONMENT.md, "A
// standalone kubelet beside nodeguard", measured on the development
// machines):
//
//   - cgroupfs driver with an absolute cgroupRoot that exists in every
//     hierarchy: the kubelet checks each one, while the machine's rules
//     allow cgroups only beneath this process's own memory cgroup; so the
//     root is that memory cgroup's path plus a suffix, made at the same
//     absolute path in the other hierarchies too (CgroupRoot).
//     failCgroupV1 is off: this host is hybrid, memory on v1.
//   - A private mount namespace (unshare -m, propagation private) in which
//     a small shell wrapper shows the kubelet what it would otherwise
//     change or miss on the host, then execs it, so the pid a benchmark
//     samples is the kubelet's: the six sysctls protectKernelDefaults
//     checks, at the values it wants (without protectKernelDefaults it
//     rewrites vm.overcommit_memory, kernel.panic and
//     kernel.panic_on_oops on the host); a tmpfs on /var/log (its
//     /var/log/containers links); the private containerd's socket at
//     /run/containerd/containerd.sock, where cAdvisor looks for containerd;
//     and a directory of the run's own on /var/lib/kubelet, where the
//     device-plugin socket is hard-coded.
//   - makeIPTablesUtilChains off (else it adds chains to the host's
//     iptables); server, healthz and metrics on 127.0.0.1 only, on ports
//     picked free for each run; anonymous requests allowed with
//     AlwaysAllow, so a benchmark reads /metrics/probes and /pods without
//     credentials (anyone on the host's loopback may, which is why nothing
//     binds elsewhere).
//
// Invariants:
//
//   - The kubelet kills every pod sandbox on its runtime that it does not
//     know: never run it beside another agent (nodeguard) on one
//     containerd. A benchmark alternates them.
//   - Volumes the kubelet mounts (tmpfs emptyDirs) are made in its private
//     mount namespace, which the runtime does not see: benchmark pods use
//     none.
//   - The kubelet is started from an OS thread locked for its life, with
//     SIGKILL as its parent-death signal, ended by its own pid (SIGTERM,
//     then SIGKILL after a bound), and every wait is bounded.
//   - Cgroups are made only beneath this process's own memory cgroup and
//     at the same absolute path in the other hierarchies, and only those
//     made here are removed; host directories the mount namespace needs
//     (/run/containerd, /var/lib/kubelet) are created only when absent and
//     then removed again once empty.
package kubeletproc
