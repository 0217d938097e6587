// Package netplumb owns the pod network of a nodeguard node: the CNI
// configuration the container runtime reads, direct libcni calls where
// nodeguard owns a pod's network namespace itself, netlink verification
// that a pod's plumbing (veth pair, bridge port, address, default route,
// traffic shaping) is real, and garbage collection of what dead sandboxes
// left behind (IPAM leases, veths, IFB devices, netns files).
//
// Invariants:
//
//   - Every network operation happens in a network namespace named by the
//     caller (the "node" namespace that holds the bridge, and one namespace
//     per pod). CNI plugins are executed from a thread switched into the
//     node namespace (github.com/containernetworking/plugins/pkg/ns), so
//     the bridge, the host ends of the veths, the IFB devices and the
//     iptables rules of portmap all live there; netlink handles are opened
//     at a namespace handle and never change the calling thread's
//     namespace.
//   - State lives in the directories of Config: host-local leases in
//     IPAMDir, libcni's result cache in CacheDir (never libcni's default
//     /var/lib/cni), and the conflist in ConfDir, written atomically.
//   - Configuration errors are *ConfigError values that name the field and
//     its value and wrap ErrInvalidConfig (malformed) or ErrUnsupported (well
//     formed but not supported here); a missing plugin binary is a
//     *PluginNotFoundError. Callers tell them apart with errors.Is/As.
//   - Verify only reads; it never repairs. GC removes only what is provably
//     not a live sandbox's: callers pass every sandbox the runtime knows,
//     and GCConfig.MinAge protects what a concurrent ADD is creating.
//   - Network namespaces made persistent by NewNetNS are bind mounts: they
//     are undone by RemoveNetNS (unmount with MNT_DETACH, then unlink).
package netplumb
