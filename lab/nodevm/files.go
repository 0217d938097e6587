package nodevm

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// File is one file the root filesystem gets on top of what its packages
// install: a regular file with Data, or a symbolic link to Link.
type File struct {
	// Path is absolute in the guest.
	Path string
	Mode fs.FileMode
	Data string
	Link string
}

// Guest paths shared by the baked-in files, the payload and the tests.
const (
	// PayloadMount is where the lane unit mounts the payload disk, read-only.
	PayloadMount = "/run/nodelane/payload"
	// OutMount is where the lane unit mounts the output disk, read-write
	// (EnvOutDir in the tests' environment).
	OutMount = "/run/nodelane/out"
	// PayloadLabel, RootLabel and OutLabel are the ext4 labels of the
	// three disks.
	PayloadLabel = "nodelane-payload"
	RootLabel    = "nodelane-root"
	OutLabel     = "nodelane-out"
	// LaneScript is the lane unit's program, baked into the image.
	LaneScript = "/usr/local/lib/nodelane/run-payload"
	// LaneUnit runs LaneScript once multi-user.target is reached;
	// LaneTarget (the kernel's systemd.unit=) pulls in multi-user.target
	// and it.
	LaneUnit   = "nodelane.service"
	LaneTarget = "nodelane.target"
	// TestChannel is the serial port the test output and the exit marker
	// go to (qemu's stdout); ttyS0 is the console.
	TestChannel = "/dev/ttyS1"
	// ContainerdSocket is Debian's containerd's CRI socket.
	ContainerdSocket = "/run/containerd/containerd.sock"
	// CNIBinDir is where containernetworking-plugins installs the plugins;
	// CNIConfDir is where containerd reads networks from.
	CNIBinDir  = "/usr/lib/cni"
	CNIConfDir = "/etc/cni/net.d"
	// Hostname of the guest.
	Hostname = "nodelane"
	// machineID is fixed: an empty /etc/machine-id makes every boot a
	// first boot (systemd-firstboot, presets), which costs time and
	// changes nothing the checks look at.
	machineID = "6e6f6465677561726400006c616e6531"
)

// Masked are the units linked to /dev/null in the image, each with why:
// they only cost boot time under TCG, or would act on a throwaway guest.
var Masked = []struct{ Unit, Why string }{
	{"systemd-logind.service", "no logins; pods and the agent need no seats or sessions"},
	{"serial-getty@ttyS0.service", "ttyS0 is the console file; a login prompt there only adds noise"},
	{"getty@tty1.service", "there is no tty1 on microvm"},
	{"systemd-journal-flush.service", "the journal stays volatile in /run (journald.conf below): nothing to flush"},
	{"systemd-firstboot.service", "the machine-id is fixed; nothing to ask"},
	{"systemd-machine-id-commit.service", "the machine-id is a plain file already"},
	{"systemd-pstore.service", "no pstore on microvm"},
	{"systemd-random-seed.service", "the root disk is a throwaway snapshot: a saved seed is never reused"},
	{"systemd-update-utmp.service", "no logins"},
	{"systemd-update-utmp-runlevel.service", "no logins"},
	{"systemd-udev-settle.service", "deprecated; nothing here waits for it"},
	{"systemd-repart.service", "never repartition the lane's disks"},
	{"systemd-pcrphase.service", "no TPM"},
	{"systemd-pcrphase-sysinit.service", "no TPM"},
	{"dpkg-db-backup.timer", "a throwaway guest's package database needs no backup"},
	{"fstrim.timer", "throwaway disks"},
	{"systemd-tmpfiles-clean.timer", "a run lasts minutes, not a day"},
	// nfs-kernel-server and nfs-common enable these; the NFS check runs
	// its own NFSv4 server in a network namespace it makes, and the
	// client (mount.nfs, v4) needs none of them.
	{"nfs-server.service", "the NFS check starts its own server in its own network namespace, never in the node's"},
	{"nfs-mountd.service", "the NFS check starts its server's rpc.mountd itself"},
	{"nfs-idmapd.service", "NFSv4 with AUTH_SYS uses numeric ids: no id mapping"},
	{"nfsdcld.service", "the check's server keeps no client records across restarts"},
	{"rpcbind.service", "NFSv4 needs no portmapper"},
	{"rpcbind.socket", "NFSv4 needs no portmapper"},
	{"rpc-statd.service", "NFSv4 has locking in the protocol: no statd"},
	{"rpc-statd-notify.service", "no NFSv3 clients to notify"},
	{"proc-fs-nfsd.mount", "the check's server mounts the nfsd file system of its own network namespace"},
}

// ContainerdConfig renders /etc/containerd/config.toml (version 2, the
// format of Debian 12's containerd 1.6): the CRI plugin with runc's
// SystemdCgroup = true (the production layout: containers in
// cri-containerd-<id>.scope units beneath the pod slices), the local pause
// image as sandbox_image and no registry mirrors or config path, so that
// nothing is ever pulled, and the CNI plugins and networks where Debian's
// packages and nodeguard put them. The guest has no network device: a pull
// would fail anyway, this makes it fail at once.
func ContainerdConfig(sandboxImage string) (string, error) {
	q, err := quoteConfigValues(map[string]string{"sandbox_image": sandboxImage, "bin_dir": CNIBinDir, "conf_dir": CNIConfDir})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Written by nodeguard lab/nodevm for the node lane's guest.")
	w("version = 2")
	w(`disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]`)
	w(`required_plugins = ["io.containerd.grpc.v1.cri"]`)
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri"]`)
	w("  sandbox_image = %s", q["sandbox_image"])
	w("  disable_tcp_service = true")
	w(`  stream_server_address = "127.0.0.1"`)
	w(`  stream_server_port = "0"`)
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".containerd]`)
	w(`  snapshotter = "overlayfs"`)
	w(`  default_runtime_name = "runc"`)
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`)
	w(`  runtime_type = "io.containerd.runc.v2"`)
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`)
	w("  SystemdCgroup = true")
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".cni]`)
	w("  bin_dir = %s", q["bin_dir"])
	w("  conf_dir = %s", q["conf_dir"])
	w("  max_conf_num = 1")
	w("")
	w(`[plugins."io.containerd.grpc.v1.cri".registry]`)
	w(`  config_path = ""`)
	return b.String(), nil
}

// quoteConfigValues returns each value of a containerd config as a TOML
// string; an empty value or one with a non-printable character is an
// error.
func quoteConfigValues(values map[string]string) (map[string]string, error) {
	q := map[string]string{}
	for k, v := range values {
		if v == "" {
			return nil, fmt.Errorf("render containerd config: %s is empty", k)
		}
		for _, r := range v {
			if !unicode.IsPrint(r) {
				return nil, fmt.Errorf("render containerd config: %s %q has a non-printable character", k, v)
			}
		}
		q[k] = strconv.Quote(v) // Go's quoting agrees with TOML's for printable text
	}
	return q, nil
}

// laneUnit runs the payload once the node is up. Type=exec: the unit is
// active as soon as its program runs, so the boot finishes (systemctl
// is-system-running answers) while the tests run; a oneshot would hold
// the boot job open until the tests end.
const laneUnit = `# nodeguard node lane: runs the per-run payload (see lab/nodelane).
[Unit]
Description=nodeguard node lane payload
After=multi-user.target containerd.service
Wants=containerd.service

[Service]
Type=exec
ExecStart=` + LaneScript + `
StandardInput=null
StandardOutput=journal+console
StandardError=journal+console
`

// laneTarget is the default target of the lane's boots (systemd.unit= on
// the kernel command line): the node's own multi-user.target, then the
// lane unit.
const laneTarget = `# nodeguard node lane: the boot target (see lab/nodelane).
[Unit]
Description=nodeguard node lane
Requires=multi-user.target
After=multi-user.target
Wants=` + LaneUnit + `
AllowIsolate=yes
`

// laneScript is the lane unit's program. It mounts the payload disk and
// the output disk (read-write, its path exported as EnvOutDir), installs
// the staged `make install` tree and crictl, runs the payload's containerd
// installer when it has one (ContainerdInstallScript), imports the images,
// runs the test binary with its output on the test channel, prints the
// exit marker, unmounts the output disk (so the host finds everything on
// it) and ends the guest. Its own messages, prefixed "nodelane:", go to the console
// (the runner prints them as progress). The exit status 125 means the
// payload could not be set up.
const laneScript = `#!/bin/sh
# nodeguard node lane: the lane unit's program (see lab/nodelane).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp
say() { echo "nodelane: $*, $(cut -d' ' -f1 /proc/uptime)s after boot" >/dev/console; }
chan=` + TestChannel + `
payload=` + PayloadMount + `
out=` + OutMount + `
marker=""
finish() {
	sync
	if mountpoint -q "$out"; then
		umount "$out" 2>/dev/null || { say "umount the output disk failed: remounting it read-only"; mount -o remount,ro "$out"; sync; }
	fi
	if [ -n "$marker" ]; then printf '\n%s=%d\n' "$marker" "$1" >"$chan"; fi
	say "exit status $1; powering off"
	systemctl reboot --force --force
	sleep 30
	reboot -f
}
stty -F "$chan" raw -echo 2>/dev/null
mkdir -p "$payload"
mount -o ro LABEL=` + PayloadLabel + ` "$payload" || { say "mount the payload disk failed"; finish 125; }
marker=$(cat "$payload/marker") || finish 125
say "payload mounted"
mkdir -p "$out"
mount -o rw LABEL=` + OutLabel + ` "$out" || { say "mount the output disk failed"; finish 125; }
export ` + EnvOutDir + `="$out"
say "output disk mounted"
# "make install" into this node: the staged DESTDIR tree.
cp -a "$payload/stage/." / || { say "copy the make install stage failed"; finish 125; }
install -m 0755 "$payload/bin/crictl" /usr/local/bin/crictl || finish 125
say "stage installed"
systemctl daemon-reload || { say "systemctl daemon-reload failed"; finish 125; }
say "units reloaded"
# Another containerd than the root filesystem's (NODEGUARD_NODE_CONTAINERD):
# its installer replaces Debian's before anything runs on it.
if [ -f "$payload/` + payloadContainerdInstall + `" ]; then
	say "installing containerd from the payload"
	/bin/sh "$payload/` + payloadContainerdInstall + `" >/run/nodelane/containerd-install.log 2>&1 ||
		{ say "installing containerd from the payload failed: $(tail -n 40 /run/nodelane/containerd-install.log)"; finish 125; }
	say "$(containerd --version) installed and started"
fi
systemctl is-active --quiet containerd || say "containerd is $(systemctl is-active containerd) before the image import"
# The imports run side by side (2 vCPUs; each is mostly containerd's work).
pids=""
for image in "$payload"/images/*.tar; do
	name=${image##*/}
	ctr -n k8s.io images import "$image" >"/run/nodelane/import-$name.log" 2>&1 &
	pids="$pids $!:$name"
done
for p in $pids; do
	wait "${p%%:*}" || { say "ctr images import ${p#*:} failed: $(cat "/run/nodelane/import-${p#*:}.log")"; finish 125; }
done
say "images imported; running the tests"
/bin/sh "$payload/run" >"$chan" 2>&1 </dev/null
finish $?
`

// initrdModulesWanted are the modules the initrd loads to mount the root
// disk (Debian builds them as modules), in an order that satisfies their
// dependencies; the build checks it against modules.dep and adds what a
// newer kernel needs.
var initrdModulesWanted = []string{"virtio_mmio", "virtio_blk", "crc32c_generic", "crc16", "mbcache", "jbd2", "ext4"}

// BakedFiles returns every file the root filesystem gets on top of its
// packages, sorted by path: configuration, the lane unit and its program,
// and the masks.
func BakedFiles(sandboxImage string) ([]File, error) {
	containerd, err := ContainerdConfig(sandboxImage)
	if err != nil {
		return nil, err
	}
	files := []File{
		{Path: "/etc/containerd/config.toml", Mode: 0o644, Data: containerd},
		{Path: "/etc/hostname", Mode: 0o644, Data: Hostname + "\n"},
		{Path: "/etc/hosts", Mode: 0o644, Data: "127.0.0.1 localhost " + Hostname + "\n::1 localhost\n"},
		{Path: "/etc/machine-id", Mode: 0o444, Data: machineID + "\n"},
		// The initrd mounts the root read-write; pass 0: nothing to fsck
		// on a fresh snapshot.
		{Path: "/etc/fstab", Mode: 0o644, Data: "# nodeguard node lane\n/dev/vda / ext4 rw,relatime 0 0\n"},
		{Path: "/etc/systemd/journald.conf.d/nodelane.conf", Mode: 0o644,
			Data: "# nodeguard node lane: the journal lives in /run (the disk is a throwaway snapshot).\n[Journal]\nStorage=volatile\nRuntimeMaxUse=64M\n"},
		// udev loads kvm for the CPU's virtualisation flags under -cpu
		// max; it is of no use in a TCG guest and costs boot time.
		{Path: "/etc/modprobe.d/nodelane.conf", Mode: 0o644,
			Data: "# nodeguard node lane: no nested virtualisation in a TCG guest.\nblacklist kvm\nblacklist kvm_intel\nblacklist kvm_amd\n"},
		{Path: "/etc/systemd/system/" + LaneUnit, Mode: 0o644, Data: laneUnit},
		{Path: "/etc/systemd/system/" + LaneTarget, Mode: 0o644, Data: laneTarget},
		{Path: LaneScript, Mode: 0o755, Data: laneScript},
	}
	for _, m := range Masked {
		files = append(files, File{Path: "/etc/systemd/system/" + m.Unit, Link: "/dev/null"})
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files, nil
}
