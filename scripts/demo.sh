#!/usr/bin/env bash
# The demo of nodeguard's main job: see memory pressure through the kernel
# event pipeline, then run pods and watch nodeguard evict a runaway one before
# the kernel OOM killer fires, and race it against polling baselines. It checks
# the host (nodeguard doctor), makes a memory cgroup with a 64 MiB limit beneath
# its own cgroup and streams its events while a hog runs into the limit, runs
# the example pods on a private containerd with node allocatable cut to 1 GiB,
# lets a hog pod loose, and removes everything it made.
#
# The slow first steps of a fresh machine (building crictl, installing the
# private runtime's packages, building its images) run in step 0, each with
# its progress and its log, before the agent starts: the agent's own start
# is then seconds, and the demo waits for its API (bounded) before it goes
# on. A step that fails says which, and names its log. Logs are kept in
# $LOGS (out/demo/logs). NODEGUARD_IMAGE_CACHE points the image cache
# elsewhere (an empty directory: a first run's build), GO the go command.
set -Eeuo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-bin/nodeguard}
GO=${GO:-go}
LOGS=${LOGS:-out/demo/logs}
name="nodeguard-demo-$$"
mkdir -p "$LOGS"

cur_step="start"
cur_log=""
step() {
	printf '\n== %s\n' "$*"
	cur_step=$1
	cur_log=""
}

# A command that fails outside a `|| true` ends the demo with the step, the
# line and the log to read (not a bare make error).
on_err() {
	local rc=$1 line=$2 cmd=$3
	[ "$BASHPID" = "$$" ] || return 0 # a subshell's failure is reported by its parent
	echo >&2
	echo "demo: FAILED in step $cur_step, scripts/demo.sh:$line: \"$cmd\" exited $rc" >&2
	if [ -n "$cur_log" ]; then
		echo "demo: its log: $cur_log (last lines below)" >&2
		tail -n 15 "$cur_log" 2>/dev/null | sed 's/^/  | /' >&2 || true
	fi
	echo "demo: all logs of this run: $LOGS" >&2
}
trap 'on_err $? $LINENO "$BASH_COMMAND"' ERR

# slow WHAT EXPECTED LOG COMMAND...: runs a slow step with its output in
# LOG, saying what it does, how long it has run every 20 s (with the log's
# last line), and how long it took; on failure, what failed and its log.
slow() {
	local what=$1 expected=$2 log=$3 start=$SECONDS pid rc=0 last
	shift 3
	cur_log=$log
	echo "$what ($expected); log: $log"
	"$@" >"$log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		for _ in $(seq 1 40); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
		if kill -0 "$pid" 2>/dev/null; then
			last=$(tail -n 1 "$log" 2>/dev/null | cut -c1-160)
			echo "  ... $((SECONDS - start))s${last:+: $last}"
		fi
	done
	wait "$pid" || rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "demo: $what failed after $((SECONDS - start))s" >&2
		on_err "$rc" "${BASH_LINENO[0]}" "$*"
		trap - ERR
		exit "$rc"
	fi
	echo "  done in $((SECONDS - start))s"
	cur_log=""
}

own() { awk -F: -v c="$1" '$2==c {print $3}' /proc/self/cgroup; }
if grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts; then
	mem_dir="/sys/fs/cgroup$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)/$name"
	uni_dir=""
	limit_file=memory.max
else
	mem_dir="/sys/fs/cgroup/memory$(own memory)/$name"
	uni_dir=""
	if [ -d /sys/fs/cgroup/unified ]; then
		uni_dir="/sys/fs/cgroup/unified$(awk -F: '$1=="0"{print $3}' /proc/self/cgroup)/$name"
	fi
	limit_file=memory.limit_in_bytes
fi

events_pid=""
hog_pid=""
run_pid=""
cleanup() {
	[ -n "$run_pid" ] && kill "$run_pid" 2>/dev/null && wait "$run_pid" 2>/dev/null || true
	[ -n "$events_pid" ] && kill "$events_pid" 2>/dev/null && wait "$events_pid" 2>/dev/null || true
	[ -n "$hog_pid" ] && kill "$hog_pid" 2>/dev/null && wait "$hog_pid" 2>/dev/null || true
	for d in "$mem_dir" "$uni_dir"; do
		[ -n "$d" ] && [ -d "$d" ] && rmdir "$d" 2>/dev/null || true
	done
}
trap cleanup EXIT

step "0/8 preparing this machine (slow only on the first run: apt packages, crictl, the private runtime's images)"
# crictl is not packaged in Debian 12: built from the Go module proxy once.
CRICTL=${CRICTL:-$(command -v crictl || true)}
if [ -z "$CRICTL" ]; then
	CRICTL="$PWD/bin/crictl"
	if [ -x "$CRICTL" ]; then
		echo "crictl: $CRICTL"
	else
		slow "building crictl v1.37.0 (go install sigs.k8s.io/cri-tools/cmd/crictl)" \
			"first run: downloads its Go modules and compiles them, ~2-4 min on 2 cores" "$LOGS/crictl-build.log" \
			env GOBIN="$PWD/bin" "$GO" install sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0
	fi
fi
# What `nodeguard run --private-runtime` would otherwise do inside its
# start: install containerd, runc, busybox-static and the CNI plugins, and
# build the pause, busybox and hog images into the image cache.
image_cache=${NODEGUARD_IMAGE_CACHE:-/var/cache/nodeguard-images}
slow "private runtime: packages and images (cache $image_cache)" \
	"first run: apt-get install, then 3 static Go programs, ~1-3 min; later: seconds" "$LOGS/prepare.log" \
	env CGO_ENABLED=0 "$GO" run ./lab/images/cmd/mkimages -packages -cache "$image_cache"

step "1/8 what this host allows (nodeguard doctor)"
"$BIN" doctor || true

step "2/8 a memory cgroup with a 64 MiB limit: $mem_dir"
mkdir -p "$mem_dir"
[ -n "$uni_dir" ] && mkdir -p "$uni_dir"
echo $((64 << 20)) > "$mem_dir/$limit_file"
[ -f "$mem_dir/memory.swap.max" ] && echo 0 > "$mem_dir/memory.swap.max"

step "3/8 streaming its events (nodeguard events --json --cgroup $name --min-reclaim 0) while a hog allocates 256 MiB"
out=$(mktemp)
"$BIN" events --json --cgroup "$name" --duration 8s --min-reclaim 0 >"$out" &
events_pid=$!
sleep 1.5
# The hog moves itself into the demo cgroups, then allocates (bounded: 256 MiB, 5 s).
sh -c 'echo $$ > "$1/cgroup.procs"; [ -n "$2" ] && echo $$ > "$2/cgroup.procs"; exec stress-ng --vm 1 --vm-bytes 256M --vm-keep --timeout 5s --oomable --quiet' \
	sh "$mem_dir" "$uni_dir" || true
wait "$events_pid" || true
events_pid=""

step "4/8 what nodeguard saw"
printf '%-14s %s\n' kind count
for k in oom_kill reclaim exit oom_score_adj cgroup_mkdir cgroup_rmdir; do
	printf '%-14s %s\n' "$k" "$(grep -c "\"kind\":\"$k\"" "$out" || true)"
done
echo
echo "the OOM kills, as nodeguard events --json prints them:"
grep '"kind":"oom_kill"' "$out" | head -3 || echo "(none: see the reclaim and exit lines above)"
rm -f "$out"

step "5/8 the same cgroup under pressure, as nodeguard top --once shows it (a 5 s hog that stress-ng respawns after each OOM kill)"
sh -c 'echo $$ > "$1/cgroup.procs"; [ -n "$2" ] && echo $$ > "$2/cgroup.procs"; exec stress-ng --vm 1 --vm-bytes 256M --vm-keep --timeout 5s --quiet' \
	sh "$mem_dir" "$uni_dir" &
hog_pid=$!
sleep 1
"$BIN" top --once --interval 2s --cgroup-root "$name" --log-level warn || true
wait "$hog_pid" || true
hog_pid=""

step "6/8 pods: nodeguard run with a private containerd, the example pods of deploy/examples"
run_dir=$(mktemp -d /tmp/nodeguard-demo-run.XXXXXX)
# Node allocatable cut to 1 GiB (systemReserved = MemTotal - 1 GiB), so that
# step 7's runaway meets the default hard threshold (memory.available<100Mi,
# copied to allocatableMemory.available) within a second.
reserved=$(awk '/^MemTotal:/ {printf "%.0f", $2 * 1024 - 1073741824}' /proc/meminfo)
# imagePull off: the private containerd has only the locally built images
# and no registry.
printf 'imagePull: false\nsystemReserved: {memory: "%s"}\n' "$reserved" >"$run_dir/config.yaml"
"$BIN" run --private-runtime --config "$run_dir/config.yaml" --root-dir "$run_dir/root" --api-socket "$run_dir/api.sock" \
	--pod-manifest-path "$PWD/deploy/examples" --metrics-addr 127.0.0.1:9847 --log-level info 2>"$LOGS/agent.log" &
run_pid=$!
cur_log="$LOGS/agent.log"
# The agent starts its containerd (the images were built in step 0), then
# serves its API: wait for that, bounded, saying how long it takes.
echo "starting the agent with its private containerd; log: $cur_log"
waited=0
until "$BIN" pod ls --api-socket "$run_dir/api.sock" >/dev/null 2>&1; do
	if ! kill -0 "$run_pid" 2>/dev/null; then
		rc=0
		wait "$run_pid" || rc=$?
		run_pid=""
		echo "demo: the agent exited (status $rc) before it served its API" >&2
		false
	fi
	if [ "$waited" -ge 240 ]; then # 120 s
		echo "demo: the agent did not serve its API within 120 s" >&2
		false
	fi
	waited=$((waited + 1))
	[ $((waited % 20)) -eq 0 ] && echo "  ... $((waited / 2))s: $(tail -n 1 "$cur_log" | cut -c1-160)"
	sleep 0.5
done
echo "  agent serving after $((waited / 2))s; waiting (up to 60 s) for the example pods to run"
for _ in $(seq 1 120); do
	[ "$("$BIN" pod ls --api-socket "$run_dir/api.sock" 2>/dev/null | grep -c Running)" -ge 3 ] && break
	sleep 0.5
done
"$BIN" pod ls --api-socket "$run_dir/api.sock" || true
endpoint=$(sed -n 's/^private containerd: \(unix:[^ ]*\).*/\1/p' "$cur_log" | head -1)
echo
echo "the same pods as crictl sees them on $endpoint:"
"$CRICTL" --runtime-endpoint "$endpoint" pods 2>/dev/null || true
echo
web_ip=$("$BIN" pod get web -o json --api-socket "$run_dir/api.sock" 2>/dev/null | sed -n 's/.*"podIP": *"\([0-9.]*\)".*/\1/p' | head -1 || true)
echo "nodeguard pod logs batch; pod to pod over the CNI bridge: scratch -> web ($web_ip:8080):"
"$BIN" pod logs batch --api-socket "$run_dir/api.sock" --tail 2 || true
"$BIN" pod exec scratch --api-socket "$run_dir/api.sock" -- sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | timeout 5 nc $web_ip 8080 | tail -1" || true
echo
echo "scratch's volumes (an emptyDir on disk, a 16 MiB tmpfs for medium: Memory):"
"$BIN" pod exec scratch --api-socket "$run_dir/api.sock" -- sh -c "cat /cache/note; df -h /fast | tail -1" || true
echo
echo "oom_score_adj as the kubelet sets it (BestEffort 1000, Burstable 1000-1000*request/capacity, Guaranteed -997 clamped to what this host allows):"
for p in scratch web batch; do
	printf '%-8s %s\n' "$p" "$("$BIN" pod exec "$p" --api-socket "$run_dir/api.sock" -- cat /proc/1/oom_score_adj 2>/dev/null || echo '?')"
done
echo
echo "pod-labelled working sets on /metrics (the cgroups of new pods join the next snapshot):"
for _ in $(seq 1 20); do
	lines=$(wget -qO- http://127.0.0.1:9847/metrics 2>/dev/null | grep '^container_memory_working_set_bytes' | grep -v 'pod=""' || true)
	[ -n "$lines" ] && break
	sleep 0.5
done
echo "${lines:-(none yet)}" | head -5

step "7/8 the main job: a runaway pod, evicted before the kernel OOM killer (allocatable is 1 GiB here)"
cur_log="$LOGS/agent.log"
"$BIN" events --agent --api-socket "$run_dir/api.sock" --duration 12s >"$run_dir/events" 2>&1 &
events_pid=$!
"$BIN" pod apply -f deploy/demo/hog.yaml --api-socket "$run_dir/api.sock"
# The pod's status reason says Evicted; pod ls's STATUS column, as
# kubectl's, shows the last container state (Error) once it is synced.
for _ in $(seq 1 40); do
	"$BIN" pod get hog -o yaml --api-socket "$run_dir/api.sock" 2>/dev/null | grep -q '^  reason: Evicted' && break
	sleep 0.5
done
"$BIN" pod ls --api-socket "$run_dir/api.sock" || true
"$BIN" pod get hog -o yaml --api-socket "$run_dir/api.sock" 2>/dev/null | grep -E '^  (phase|reason|message):' || true
echo
echo "nodeguard events --agent (the decision with its stage latencies, the node condition):"
sleep 1
kill "$events_pid" 2>/dev/null || true
wait "$events_pid" 2>/dev/null || true
events_pid=""
grep -v '^$' "$run_dir/events" | cut -c1-400 || true
echo
echo "eviction metrics:"
wget -qO- http://127.0.0.1:9847/metrics 2>/dev/null | grep -E '^(kubelet_evictions|nodeguard_node_condition|nodeguard_eviction_latency_seconds_sum)' || true
kill "$run_pid" 2>/dev/null || true
wait "$run_pid" 2>/dev/null || true
run_pid=""
rm -rf "$run_dir"

step "8/8 the OOM race: the shipped agent against a kubelet-style 10 s poller, the kubelet's v1 memcg notifier, a 1 s poller and PSI triggers (bench eviction --quick)"
"$BIN" bench eviction --quick --out out/demo --log-level warn || echo "bench eviction failed (see above)"
[ -f out/demo/eviction.png ] && echo "plot: out/demo/eviction.png, rows: out/demo/eviction.csv"
echo "logs of this run: $LOGS"
