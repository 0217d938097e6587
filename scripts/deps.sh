#!/usr/bin/env bash
# Installs what building and testing nodeguard needs on Debian 12, through apt,
# only when something is missing. Safe to run again.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have clang-19       || need+=(clang-19)
have llvm-strip-19  || need+=(llvm-19)
have bpftool        || need+=(bpftool)
have stress-ng      || need+=(stress-ng)
have prometheus     || need+=(prometheus)
have iptables       || need+=(iptables)
# The systemd unit's test runs systemd-analyze verify (Debian's systemd
# package; systemd need not run as PID 1).
have systemd-analyze || need+=(systemd)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
# Local block volumes are formatted and probed as the kubelet does it
# (k8s.io/mount-utils runs blkid, mkfs.ext4 and fsck).
have mkfs.ext4      || need+=(e2fsprogs)
have blkid          || need+=(util-linux)
# netplumb's tests and bench net run the CNI plugins directly.
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/portmap ] && [ -x /usr/lib/cni/bandwidth ] || need+=(containernetworking-plugins)

if [ ${#need[@]} -eq 0 ]; then
	echo "deps: all present (clang-19, llvm-19, bpftool, libbpf-dev, stress-ng, prometheus, iptables, systemd-analyze, CNI plugins, e2fsprogs)"
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "deps: missing ${need[*]}; run as root or install them with apt-get" >&2
	exit 1
fi
# apt's output goes to a log, named when a step fails.
log=${DEPS_LOG:-/tmp/nodeguard-deps.log}
: >"$log"
start=$SECONDS
trap 'echo "deps: FAILED after $((SECONDS - start))s installing ${need[*]}; apt-get output: $log (last lines below)" >&2; tail -n 15 "$log" >&2' ERR
echo "deps: installing ${need[*]} through apt (a fresh machine: ~1-3 min); log: $log"
export DEBIAN_FRONTEND=noninteractive
# One apt-get at a time with the lane runners (lab/vmtest's aptLock),
# and dpkg's own lock waited for: make test's lanes prepare side by side.
mkdir -p /run/lock
exec 9>/run/lock/nodeguard-apt.lock
flock 9
echo "deps: apt-get update"
apt-get update -qq -o DPkg::Lock::Timeout=600 >>"$log" 2>&1
echo "deps: apt-get install (lists updated in $((SECONDS - start))s)"
apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "${need[@]}" >>"$log" 2>&1
exec 9>&-
trap - ERR
echo "deps: installed ${need[*]} in $((SECONDS - start))s"
