#!/usr/bin/env bash
# lanes.sh MAKE runs make test's VM-backed lanes in two chains side by
# side, each line prefixed with its chain's name:
#
#   node+cluster-node  the node lane on Debian's containerd 1.6.20, with
#                   the quick OOM race (~14.5 min warm, the race ~5 min
#                   of it), then the node lane's node-mode run (make
#                   test-cluster-node: the control plane from its cache,
#                   or built into it the first time: ~25 min cold, the
#                   longest build of a cold run, so it starts in the chain
#                   whose lanes end first);
#   node-2+vm+fuzz+cluster-host  the node lane on containerd 2.x, then the
#                   VM lane (both kernels), then every fuzz target for
#                   FUZZTIME (7 s) with one fuzzing worker
#                   (FUZZ_PARALLEL=1), so that the first chain's guest
#                   keeps its core, then the cluster lane's host tests
#                   (make test-cluster-host; the control plane's build is
#                   shared through its flock).
#
# Every guest runs on one host thread (single-threaded TCG), so on this
# machine's 2 cores the two chains each have a core to themselves, and
# the lanes take as long as the longer chain instead of the sum of them
# all (measured: 14m34s for both node lanes and the VM lane, against
# 27m50s one after the other). Each chain has its own binaries (BIN,
# NODEVM), staging directory and output directory (NODE_OUT: out/node
# and out/node-2), so nothing is written by both; the caches under
# /var/cache/nodeguard-vm are taken under their flocks, so a cold cache
# is filled once, by whichever chain asks first, while the other waits.
#
# Both chains run to their end; the script fails when either did, and
# says which, with each chain's time.
set -uo pipefail
# Each chain in its own process group, so that an interrupted run ends
# both chains (their makes, runners and guests), and only them.
set -m
make=${1:-make}
start=$(date +%s)
declare -A pid=()
trap 'for p in "${pid[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done; exit 130' INT TERM

# chain NAME CMD...: runs CMD with its output prefixed by [NAME] and a
# last line with how it ended and how long it took.
chain() {
	local name=$1
	shift
	(
		set -o pipefail
		t0=$(date +%s) rc=0
		"$@" 2>&1 | sed -u "s/^/[$name] /" || rc=$?
		secs=$(($(date +%s) - t0))
		if [ "$rc" -ne 0 ]; then
			echo "lanes: chain $name FAILED (exit $rc) after $((secs / 60))m$((secs % 60))s"
		else
			echo "lanes: chain $name passed in $((secs / 60))m$((secs % 60))s"
		fi
		exit "$rc"
	) &
	pid[$name]=$!
}

chain node+cluster-node bash -c '"$1" --no-print-directory test-node NODE_CONTAINERD=debian \
		BIN=bin/nodeguard-lane-node NODEVM=bin/nodevm-lane-node NODE_OUT=out/node &&
	"$1" --no-print-directory test-cluster-node' _ "$make"
chain node-2+vm+fuzz+cluster-host bash -c '"$1" --no-print-directory test-node NODE_CONTAINERD="$2" \
		BIN=bin/nodeguard-lane-node-2 NODEVM=bin/nodevm-lane-node-2 NODE_OUT=out/node-2 &&
	"$1" --no-print-directory test-vm VMRUN=bin/vmrun-lane &&
	FUZZ_PARALLEL=1 "$1" --no-print-directory fuzz FUZZTIME="$3" &&
	"$1" --no-print-directory test-cluster-host' _ "$make" "${NODE_CONTAINERD_2:-v2.4.2}" "${FUZZTIME:-7s}"

failed=()
for name in node+cluster-node node-2+vm+fuzz+cluster-host; do
	wait "${pid[$name]}" || failed+=("$name")
done
secs=$(($(date +%s) - start))
if [ "${#failed[@]}" -ne 0 ]; then
	echo "lanes: ${failed[*]} failed; both chains took $((secs / 60))m$((secs % 60))s" >&2
	exit 1
fi
echo "lanes: both chains passed in $((secs / 60))m$((secs % 60))s"
