#!/bin/sh
# Copies kernel modules that a package's VM-lane benchmarks load themselves
# (finit_module from testdata/, which vmrun packs into the guest at the same
# path) out of the Debian kernel packages of the VM lane's cached kernels.
#
#   scripts/vm-modules.sh DEST MODULE...
#
# writes DEST/<uname -r>/<module>.ko (decompressed) for every kernel in
# ${NODEGUARD_VM_CACHE:-/var/cache/nodeguard-vm}/kernels (run `make test-vm`
# once first so the kernels are cached). The package is only downloaded
# (apt-get download) and read, never installed. Used by
# `make bench-tripwire-vm` for brd.ko: a RAM block device whose buffered
# reads give the benchmark reclaimable page cache (the guest has no disk).
set -eu
dest=$1; shift
cache=${NODEGUARD_VM_CACHE:-/var/cache/nodeguard-vm}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for k in "$cache"/kernels/*/; do
	b=$(basename "$k"); rel=${b%%_*}; ver=${b#*_}
	mkdir -p "$dest/$rel"
	need=
	for m in "$@"; do [ -s "$dest/$rel/$m.ko" ] || need="$need $m"; done
	[ -n "$need" ] || continue
	(cd "$tmp" && apt-get download -q "linux-image-$rel=$ver" >/dev/null 2>&1) ||
		{ echo "vm-modules: apt-get download linux-image-$rel=$ver failed" >&2; exit 1; }
	deb=$(ls "$tmp"/linux-image-*.deb)
	for m in $need; do
		p=$(dpkg-deb -c "$deb" | awk '{print $NF}' | grep -E "/$m\.ko(\.xz|\.zst)?$" | head -1)
		[ -n "$p" ] || { echo "vm-modules: no $m.ko in $deb" >&2; exit 1; }
		dpkg-deb --fsys-tarfile "$deb" | tar -xO "$p" > "$tmp/$m.raw"
		case $p in
		*.xz) xz -dc "$tmp/$m.raw" > "$dest/$rel/$m.ko" ;;
		*.zst) zstd -qdc "$tmp/$m.raw" > "$dest/$rel/$m.ko" ;;
		*) mv "$tmp/$m.raw" "$dest/$rel/$m.ko" ;;
		esac
		echo "vm-modules: $dest/$rel/$m.ko"
	done
	rm -f "$deb"
done
