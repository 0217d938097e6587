package crienv

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// criNamespace is the containerd namespace that the CRI plugin uses.
const criNamespace = "k8s.io"

// configParams are the values of one environment's containerd config.
type configParams struct {
	Root, State, Temp string // containerd's directories
	Socket            string // gRPC address (a unix socket path)
	OptDir            string // the opt plugin's directory (default /opt/containerd)
	RuncBinary        string // absolute path of runc
	RuncRoot          string // runc's state root (default /run/containerd/runc)
	SandboxImage      string
	CNIBinDir         string
	CNIConfDir        string
	HostsDir          string // the registry hosts directory (config_path)
}

// tomlString quotes s as a TOML basic string. Go's quoting agrees with
// TOML's for printable text, which is all that renderConfig accepts.
func tomlString(s string) (string, error) {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return "", fmt.Errorf("config value %q: %w: non-printable character", s, ErrInvalidConfig)
		}
	}
	return strconv.Quote(s), nil
}

// renderConfig returns a containerd 1.6 config (version 2) for a private
// daemon: every directory beneath the environment's own, the CRI plugin
// required and configured for this machine.
//
// The settings that matter, and why:
//   - restrict_oom_score_adj = true: without CAP_SYS_RESOURCE runc cannot
//     write the pause container's -998 and every sandbox fails with "can't
//     get final child's PID from pipe: EOF".
//   - systemd_cgroup = false and SystemdCgroup = false: the cgroupfs driver,
//     so a relative cgroup_parent resolves against runc's own cgroup.
//   - runc's Root and the opt plugin's path point into the environment, not
//     at /run/containerd/runc and /opt/containerd.
//   - netns_mounts_under_state_dir: pod netns files under state/, not in
//     /var/run/netns.
//   - disable_apparmor: never load a profile into the host kernel.
//   - sandbox_image: the locally imported pause image; nothing is pulled
//     (containerd runs in a network namespace with only lo anyway).
//   - registry config_path: a hosts directory of the env's own, empty
//     until a test registry in the env's namespace (lab/registry)
//     writes its <host:port>/hosts.toml there with its CA. containerd
//     reads it at each pull, so a registry started after containerd is
//     trusted without a restart. containerd 2.x takes the same directory
//     and files (config version 3, plugin io.containerd.cri.v1.images).
func renderConfig(p configParams) (string, error) {
	q := map[string]string{}
	for k, v := range map[string]string{
		"root": p.Root, "state": p.State, "temp": p.Temp, "socket": p.Socket,
		"opt": p.OptDir, "runc": p.RuncBinary, "runcRoot": p.RuncRoot,
		"sandbox": p.SandboxImage, "cniBin": p.CNIBinDir, "cniConf": p.CNIConfDir,
		"hosts": p.HostsDir,
	} {
		if v == "" {
			return "", fmt.Errorf("render containerd config: %w: %s is empty", ErrInvalidConfig, k)
		}
		s, err := tomlString(v)
		if err != nil {
			return "", fmt.Errorf("render containerd config: %w", err)
		}
		q[k] = s
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Written by nodeguard lab/crienv for a private containerd.")
	w("version = 2")
	w("root = %s", q["root"])
	w("state = %s", q["state"])
	w("temp = %s", q["temp"])
	w("oom_score = 0")
	w(`disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]`)
	w(`required_plugins = ["io.containerd.grpc.v1.cri"]`)
	w("")
	w("[grpc]")
	w("  address = %s", q["socket"])
	w("")
	w("[debug]")
	w(`  level = "info"`)
	w("")
	w(`[plugins."io.containerd.internal.v1.opt"]`)
	w("  path = %s", q["opt"])
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri"]`)
	w("  sandbox_image = %s", q["sandbox"])
	w("  restrict_oom_score_adj = true")
	w("  systemd_cgroup = false")
	w("  disable_apparmor = true")
	w("  disable_tcp_service = true")
	w("  netns_mounts_under_state_dir = true")
	w("  enable_unprivileged_ports = false")
	w("  enable_unprivileged_icmp = false")
	w("  tolerate_missing_hugetlb_controller = true")
	w("  disable_hugetlb_controller = true")
	w(`  stream_server_address = "127.0.0.1"`)
	w(`  stream_server_port = "0"`)
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".containerd]`)
	w(`  snapshotter = "overlayfs"`)
	w(`  default_runtime_name = "runc"`)
	w("  discard_unpacked_layers = false")
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`)
	w(`  runtime_type = "io.containerd.runc.v2"`)
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`)
	w("  BinaryName = %s", q["runc"])
	w("  Root = %s", q["runcRoot"])
	w("  SystemdCgroup = false")
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".cni]`)
	w("  bin_dir = %s", q["cniBin"])
	w("  conf_dir = %s", q["cniConf"])
	w("  max_conf_num = 1")
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".registry]`)
	w("  config_path = %s", q["hosts"])
	return b.String(), nil
}
