#!/usr/bin/env bash
# beside.sh A B runs the shell commands A and B at the same time and exits
# non-zero when either failed, saying which. A's output comes as it
# comes; B's goes to a file, printed once both have ended, so that the
# two never interleave in a CI log.
#
# make test runs the VM lane (A) beside the node lane on containerd 2.x
# (B): each boots one qemu at a time under single-threaded TCG, one host
# thread, so on the 2-core machine each has a core. Neither has the OOM
# race, the one check whose figures the host's load moves: the node lane
# on Debian's containerd, which runs it, runs alone after them.
set -uo pipefail
if [ $# -ne 2 ]; then
	echo "usage: $0 'command A' 'command B'" >&2
	exit 2
fi
a=$1 b=$2
out=$(mktemp) status=$(mktemp)
trap 'rm -f "$out" "$status"' EXIT
start=$(date +%s)
echo "=== beside: $b, beside $a (its output follows when both have ended)"
{
	bash -c "$b"
	echo "$? $(date +%s)" >"$status"
} >"$out" 2>&1 &
pid=$!
bash -c "$a"
rca=$?
enda=$(date +%s)
wait "$pid"
read -r rcb endb <"$status" || rcb=1 endb=$(date +%s)
echo "=== beside: the output of $b"
cat "$out"
echo "=== beside: $a exit $rca in $((enda - start))s; $b exit $rcb in $((endb - start))s"
if [ "$rca" -ne 0 ] || [ "$rcb" -ne 0 ]; then
	[ "$rca" -eq 0 ] || echo "beside: $a failed (exit $rca)" >&2
	[ "$rcb" -eq 0 ] || echo "beside: $b failed (exit $rcb)" >&2
	exit 1
fi
