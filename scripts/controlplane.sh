#!/usr/bin/env bash
# controlplane.sh: the Kubernetes control plane that the cluster lane runs
# nodeguard against (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl, and the kubelet for the OOM race),
# built once from the Go module proxy into a cache outside the clone and
# reused from there. Prints the directory of the binaries on stdout.
#
#   scripts/controlplane.sh
#
# Cache: ${NODEGUARD_CP_CACHE:-/var/cache/nodeguard-cp}/k8s-<version>-etcd-<version>/bin,
# keyed by K8S_VERSION (v1.37.2) and ETCD_VERSION (v3.7.3). A build runs in a
# directory beside the cache entry and is renamed into place only once every
# binary is built and has said its version, under a flock: a build that is
# killed leaves nothing half-made, and two runs at once build once.
#
# How (../shared/ENVIRONMENT.md): `go install k8s.io/kubernetes/cmd/...` is
# refused for its replace directives, so a throwaway module requires
# k8s.io/kubernetes with one replace per staging module (k8s.io/X =>
# k8s.io/X v0.<minor>.<patch>; the two sample modules are left out, the
# proxy refuses them) and blank-imports the commands. Cold on 2 cores this
# takes about 25 minutes (kube-apiserver alone ~18, 2.4 GB peak memory);
# cached, nothing.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.3}
cache=${NODEGUARD_CP_CACHE:-/var/cache/nodeguard-cp}
go=${GO:-go}
key="k8s-$K8S_VERSION-etcd-$ETCD_VERSION"
dest=$cache/$key
cmds=(kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet)

log() { echo "controlplane: $*" >&2; }
built() { [[ -f $dest/ok ]]; }

if built; then
	echo "$dest/bin"
	exit 0
fi
mkdir -p "$cache"
exec 9>"$cache/$key.lock"
chmod 666 "$cache/$key.lock" 2>/dev/null || true
if ! flock -n 9; then
	log "another build of $key holds $cache/$key.lock; waiting for it"
	flock 9
fi
if built; then
	echo "$dest/bin"
	exit 0
fi
rm -rf "$dest" # an entry without its ok mark is not one

if [[ ! $K8S_VERSION =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
	log "K8S_VERSION $K8S_VERSION: want v1.<minor>.<patch>"
	exit 2
fi
minor=${BASH_REMATCH[1]}
staging="v0.$minor.${BASH_REMATCH[2]}"
rm -rf "$cache/.build-$key".* # left by a build that was killed (we hold the lock)
tmp=$(mktemp -d "$cache/.build-$key.XXXXXX")
chmod 755 "$tmp" # mktemp's 0700 would hide the entry from other users
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/k8s" "$tmp/etcd" "$tmp/bin"
start=$SECONDS
elapsed() { printf '%dm%02ds' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)); }
# A step that fails says which (its go output is just above it on stderr).
trap 'log "FAILED at scripts/controlplane.sh:$LINENO after $(elapsed): $BASH_COMMAND (its output is above; nothing was cached)"' ERR

log "resolving k8s.io/kubernetes@$K8S_VERSION and its staging modules ($staging)"
if ! info=$(cd "$tmp/k8s" && "$go" mod download -json "k8s.io/kubernetes@$K8S_VERSION" 9>&-); then
	log "could not download k8s.io/kubernetes@$K8S_VERSION from the module proxy: $info"
	exit 1
fi
modfile=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"$info")
if [[ ! -f $modfile ]]; then
	log "no go.mod for k8s.io/kubernetes@$K8S_VERSION in: $info"
	exit 1
fi
mapfile -t staged < <(awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$modfile" | grep -v -e '^k8s.io/sample-controller$' -e '^k8s.io/sample-cli-plugin$')
if ((${#staged[@]} < 10)); then
	log "found only ${#staged[@]} staging modules in $modfile"
	exit 1
fi
{
	echo "module nodeguard.local/controlplane"
	echo
	echo "go $(sed -n 's/^go \([0-9.]*\)$/\1/p' "$modfile")" # kubernetes' own
	echo
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo
	for m in "${staged[@]}"; do echo "replace $m => $m $staging"; done
} >"$tmp/k8s/go.mod"
{
	echo "//go:build tools"
	echo
	echo "package tools"
	echo
	echo "import ("
	for c in "${cmds[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
	echo ")"
} >"$tmp/k8s/tools.go"
(cd "$tmp/k8s" && "$go" mod tidy >&2 9>&-)

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
done
for c in "${cmds[@]}"; do
	log "building $c $K8S_VERSION ($(elapsed) so far; kube-apiserver takes ~18 min cold)"
	(cd "$tmp/k8s" && "$go" build -trimpath -ldflags "$ldflags" -o "$tmp/bin/$c" "k8s.io/kubernetes/cmd/$c" 9>&-)
done

log "building etcd $ETCD_VERSION ($(elapsed) so far)"
(cd "$tmp/etcd" && "$go" mod init nodeguard.local/etcd 2>/dev/null &&
	"$go" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2 9>&- &&
	"$go" build -trimpath -ldflags "-s -w" -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3 9>&-)

# Each binary must run and say the version it was built as (kubectl has
# no --version flag: `version --client`).
says() { # name want command...
	local name=$1 want=$2 out
	shift 2
	if ! out=$("$@" 2>&1); then
		log "$name: \"$*\" failed: $out"
		exit 1
	fi
	out=${out%%$'\n'*}
	if [[ $out != *"$want"* ]]; then
		log "$name says \"$out\", want $want"
		exit 1
	fi
	log "$out"
}
for c in "${cmds[@]}"; do
	if [[ $c == kubectl ]]; then
		says "$c" "$K8S_VERSION" "$tmp/bin/$c" version --client
	else
		says "$c" "$K8S_VERSION" "$tmp/bin/$c" --version
	fi
done
says etcd "${ETCD_VERSION#v}" "$tmp/bin/etcd" --version
touch "$tmp/ok"
mv "$tmp" "$dest"
trap - EXIT
log "built $key in $(elapsed): $dest/bin"
echo "$dest/bin"
