// Package nodevm is the host side of the node lane (see package
// lab/nodelane for the whole story, its knobs and costs): it builds
// and caches a Debian 12 root filesystem with systemd and containerd for
// Debian's 6.12 kernel, with a busybox initrd that mounts it; writes the
// per-run payload disk (the test binary, the make install stage, crictl,
// the test images and, with NODEGUARD_NODE_CONTAINERD=v2.4.2, containerd
// 2.x with its config, unit drop-in and installer: containerd.go) and an
// empty output disk; boots them in qemu; copies
// what the checks wrote on the output disk (the OOM race's files) to a
// host directory; and drives `go test -tags nodelane -exec nodevm`,
// printing one line per check and a summary. race.go holds the race
// check's modes (NODEGUARD_NODE_RACE), shared by the lane's bounds and the
// check. cmd/nodevm is
// its command. It reuses the VM lane's kernel cache, host tools, exit-marker
// stream and console handling (lab/vmtest).
//
// Invariants:
//
//   - Nothing is installed on the host except the runners' tools through
//     apt-get; kernel packages are only downloaded and read; crictl and
//     containerd 2.x are built into the cache, never into the clone, with
//     the module proxy's releases as they are (no replace directives) and
//     GOTOOLCHAIN=local.
//   - The cached root filesystem is never written: qemu boots it with
//     snapshot=on, and the payload disk read-only. It is the same for
//     both containerds: containerd 2.x replaces Debian's in the guest's
//     snapshot only. The output disk, made
//     per run, is the only one the guest writes back.
//   - Nothing is mounted on the host: the output disk is read with
//     debugfs from its image file, and only its directories and regular
//     files are copied, beneath the target directory through os.Root.
//   - Cached things are built in a temporary directory beneath the cache
//     under an flock and published by rename, so a concurrent run never
//     sees half of one; a build killed midway leaves a directory the next
//     build sweeps (by pid).
//   - The guest has no network device, except in a cluster run
//     (NODEGUARD_NODE_CLUSTER: cluster.go), where qemu's user-mode network
//     with restrict=on forwards exactly two things: the guest's
//     connections to 10.0.2.100:443 to the control plane the runner
//     started on the host's loopback (through `nodevm -relay`, which
//     dials loopback only), and the host's 127.0.0.1:<port> to the node
//     endpoint's port in the guest. Nothing else leaves the guest, and
//     nothing but loopback is dialled on the host. The payload's cluster/ has the
//     credentials, kubectl and the kubelet of the control plane's build.
//   - Every qemu runs under timeout(1)
//     and is stopped by its pid (SIGTERM through timeout) when the runner
//     is interrupted or dies.
//   - The test channel (ttyS1) carries only what the test binary wrote,
//     ended by a marker with a fresh nonce; the console goes to a file.
//   - Files baked into the image are written beneath it through os.Root:
//     a symbolic link in the image never points a write at the host.
package nodevm
