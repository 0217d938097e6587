// Package crienv runs a private containerd with the CRI plugin for
// nodeguard's privileged tests and its demo: real pods, on the development
// and CI machines, with nothing shared with the host and nothing left
// behind.
//
// Start (or New in a test) installs what is missing through apt
// (containerd, runc, containernetworking-plugins, busybox-static, and
// docker-registry for lab/registry), builds
// or reuses the pause and busybox images of lab/images (cached in
// /var/cache/nodeguard-images by a hash of their inputs), makes a
// temporary directory with containerd's root, state, config.toml and a CNI
// bridge network, creates a network namespace with lo up, starts
// `nsenter --net=<netns> containerd --config <dir>/config.toml` in it, waits
// for CRI Version, and imports the images with `ctr -n k8s.io images
// import`. A warm start takes well under a second.
//
// Tests drive it through RuntimeClient and ImageClient, or through their own
// CRI client at Endpoint. Pods must pass DNSConfig, and a cgroup_parent
// beneath CgroupParent() (relative: runc resolves it against its own cgroup,
// which is this process's). StopPodSandbox kills without grace: call
// StopContainer with a timeout first. CRI removes only the containers' leaf
// cgroups: remove the pod's parent with RemoveCgroup.
//
// Invariants (the rules of the shared development machines):
//
//   - All networking happens inside the environment's own network
//     namespace: containerd, its shims, the CNI bridge and every pod's
//     veth live there, and it has no route out. containerd can pull only
//     from a registry in that namespace (lab/registry, trusted
//     through RegistryHostsDir); the images are imported.
//   - Every path containerd, runc and host-local write is beneath Dir(),
//     except what containerd 1.6 and libcni hard-code: the shims' sockets
//     in /run/containerd/s and CNI results in /var/lib/cni/results. Close
//     removes the env's entries there, by id and network name, and the
//     directories once they are empty and no containerd runs.
//   - Cgroups are made only beneath this process's own cgroups, under
//     CgroupParent(), and Close removes them in every hierarchy.
//   - Only the env's own processes are signalled: containerd by its pid (our
//     unreaped child), shims by "-address <Socket()>" in argv, containers by
//     their root beneath Dir() or their cgroup beneath CgroupParent(),
//     each re-checked through a pidfd before the signal (for cgroups,
//     cgroups.SigkillTree and EmptyTree do it). Nothing is matched by name
//     alone.
//   - Only mounts beneath Dir() (from /proc/self/mountinfo) are unmounted,
//     and Dir() is removed only when none is left.
//   - Every wait is bounded; Close checks Leftovers and returns an error
//     naming anything that survived.
//   - An owner that dies without Close (a test binary killed at its
//     timeout) takes containerd with it (a parent-death signal); the
//     shims, pods, mounts and cgroups it leaves are removed by the next
//     Start (SweepStale), found through the env.json that names the owner
//     by pid and start time. Environments of live owners are never
//     touched.
//   - Start fails with an error matching ErrUnsupported when this host or
//     caller cannot run it (not root, no apt-get for a missing package):
//     New skips then, or fails when NODEGUARD_REQUIRE_PRIVILEGED=1.
package crienv
