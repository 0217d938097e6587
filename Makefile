# nodeguard: see README.md. `make test` is what CI runs.

GO            ?= go
BPF2GO_CC     ?= clang-19
BPF2GO_STRIP  ?= llvm-strip-19
BPF2GO_CFLAGS ?= -O2 -g -Wall -Werror
BIN           ?= bin/nodeguard
# What `nodeguard version` reports (cmd/nodeguard/version.go). Outside a
# git checkout the version is "dev" and the commit is left to the binary
# (the Go toolchain's stamp, if any, else "unknown").
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT        ?= $(shell git describe --always --dirty --abbrev=40 --match='' 2>/dev/null)
LDFLAGS       ?= -X main.version=$(VERSION) -X main.commit=$(COMMIT)
export BPF2GO_CC BPF2GO_STRIP BPF2GO_CFLAGS

.PHONY: all build install generate vmlinux deps test test-vm test-node test-cluster test-cluster-host test-cluster-node bench-kube-race fuzz bench bench-tripwire-vm lint check-generate demo clean

all: build

# Static (CGO_ENABLED=0): the same binary runs on any Linux, and in the
# scratch image the DaemonSet of deploy/kubernetes runs (guard mode).
build:
	CGO_ENABLED=0 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nodeguard

# Install as a system daemon: the binary where the unit's ExecStart looks
# (/usr/local/bin), the unit, and the example configuration unless one is
# there already. DESTDIR stages it elsewhere (packaging). The service is
# neither enabled nor started: see docs/operations.md.
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)/usr/local/bin/nodeguard
	install -D -m 0644 deploy/systemd/nodeguard.service $(DESTDIR)/etc/systemd/system/nodeguard.service
	@if [ -e $(DESTDIR)/etc/nodeguard/config.yaml ]; then \
		echo "kept $(DESTDIR)/etc/nodeguard/config.yaml (deploy/config.example.yaml has every key)"; \
	else install -D -m 0600 deploy/config.example.yaml $(DESTDIR)/etc/nodeguard/config.yaml; fi
	install -D -m 0644 deploy/systemd/nodeguard-guard.service $(DESTDIR)/etc/systemd/system/nodeguard-guard.service
	@if [ -e $(DESTDIR)/etc/nodeguard/guard.yaml ]; then \
		echo "kept $(DESTDIR)/etc/nodeguard/guard.yaml (deploy/guard.example.yaml has every key)"; \
	else install -D -m 0600 deploy/guard.example.yaml $(DESTDIR)/etc/nodeguard/guard.yaml; fi

deps:
	./scripts/deps.sh

# Regenerate the committed BPF objects and Go bindings from bpf/*.bpf.c.
generate:
	cd loader && $(GO) generate ./...

# Regenerate bpf/include/vmlinux.h from the running kernel's BTF (rarely:
# CO-RE makes one vmlinux.h good for every kernel we support).
vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/include/vmlinux.h

check-generate: deps
	$(MAKE) generate
	git diff --exit-code -- loader/ || (echo "generated BPF objects drift from bpf/*.bpf.c: run make generate and commit" >&2; exit 1)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting" >&2; exit 1)
	$(GO) vet ./...
	$(GO) vet -tags nodelane ./lab/nodelane/
	$(GO) vet -tags clusterlane ./lab/cluster/ ./agent/ ./cmd/nodeguard/ ./guard/

# The test command of README.md and .ci/run: the host lane, then the lanes
# that boot guests, in two chains side by side (scripts/lanes.sh; each
# guest is one host thread, the host has 2 cores): the node lane on
# Debian's containerd 1.6.20 with the quick race, beside the node lane on
# containerd 2.4.2 without the race (built once, cached afterwards), where
# the cgroup driver is read through CRI RuntimeConfig and a mismatch is
# refused at start, followed by the VM lane and every fuzz target for
# TEST_FUZZTIME with one fuzzing worker. What each lane proves and how
# long it takes: docs/testing.md.
TEST_FUZZTIME ?= 7s

test: deps lint check-generate build
	$(GO) test -race -count=1 -timeout 20m ./...
	NODE_CONTAINERD_2='$(NODE_CONTAINERD_2)' FUZZTIME='$(TEST_FUZZTIME)' ./scripts/lanes.sh '$(MAKE)'

# The pure cgroup v2 lane (lab/vmtest): each package of VM_PKGS on each
# kernel of VM_KERNELS, in throwaway qemu VMs, as
#   CGO_ENABLED=0 NODEGUARD_VM_KERNEL=<k> go test -json -count=1 -exec bin/vmrun <pkg>
# then one summary line per kernel. Static test binaries, so no -race (it
# needs cgo). Kernels are cached in /var/cache/nodeguard-vm.
VM_KERNELS ?= 6.1 6.12
VM_PKGS    ?= ./loader ./cgroups/cgtest ./internal/host ./cgroups ./pressure ./cgroups/cgstat ./cgroups/kubepods ./pressure/tripwire
VMRUN      ?= bin/vmrun

test-vm:
	$(GO) build -o $(VMRUN) ./lab/vmtest/cmd/vmrun
	$(abspath $(VMRUN)) -lane -go '$(GO)' -kernels '$(VM_KERNELS)' $(VM_PKGS)

# The node lane (lab/nodelane; lab/nodevm boots it): nodeguard as
# make install puts it, started by systemd on a Debian 12 node with
# containerd (SystemdCgroup = true) and pure cgroup v2, in a qemu VM with no
# network device. It installs into a temporary stage, then runs
#   CGO_ENABLED=0 go test -tags nodelane -json -exec bin/nodevm ./lab/nodelane
# with one line per check and one summary line. The root filesystem, crictl
# and the kernel are cached in /var/cache/nodeguard-vm. NODE_FLAGS: e.g.
# -run 'TestNode/(systemd|containerd)' or -v. The last check is the OOM
# race (nodeguard bench eviction on the guest's containerd): NODE_RACE=quick
# (the default: 200Mi/s and 1Gi/s, 1 trial each), full (docs/benchmarks.md's set:
# 50Mi/s, 200Mi/s and 1Gi/s, 3 trials; for its figures) or off. What the
# guest writes on its output disk (the race's eviction.csv, eviction.png,
# report and agent log in race-<mode>/) is copied to NODE_OUT.
# NODE_CONTAINERD=v2.4.2 (or 2) runs the checks on containerd 2.x instead of
# the root filesystem's 1.6.20 (debian, the default): built once from the
# Go module proxy into the cache, put on the payload disk and installed in
# the guest over Debian's; its CRI reports the cgroup driver (RuntimeConfig),
# so a mismatch is refused when nodeguard starts. The race defaults to off
# there (NODE_RACE= still chooses).
NODEVM          ?= bin/nodevm
NODE_FLAGS      ?=
NODE_RACE       ?=
NODE_CONTAINERD ?=
# The containerd 2.x of make test's second node-lane run.
NODE_CONTAINERD_2 ?= v2.4.2
NODE_OUT        ?= out/node
# NODE_CLUSTER: the control plane binaries' directory; set (make
# test-cluster does), each guest gets a control plane of its own on the
# host's loopback and the node-mode check joins it.
NODE_CLUSTER    ?=

test-node:
	$(GO) build -o $(NODEVM) ./lab/nodevm/cmd/nodevm
	@stage=$$(mktemp -d /tmp/nodeguard-stage.XXXXXX) && trap 'rm -rf "$$stage"' EXIT && \
		$(MAKE) --no-print-directory install DESTDIR="$$stage" && \
		NODEGUARD_NODE_STAGE="$$stage" NODEGUARD_NODE_OUT='$(abspath $(NODE_OUT))' $(if $(NODE_RACE),NODEGUARD_NODE_RACE='$(NODE_RACE)') \
		$(if $(NODE_CONTAINERD),NODEGUARD_NODE_CONTAINERD='$(NODE_CONTAINERD)') \
		$(if $(NODE_CLUSTER),NODEGUARD_NODE_CLUSTER='$(NODE_CLUSTER)') \
		$(abspath $(NODEVM)) -lane -go '$(GO)' $(NODE_FLAGS)

# Fuzzing: each Go fuzz target below for FUZZTIME (go test -fuzz takes one
# target per run). The corpora in <pkg>/testdata/fuzz/<Target> also run as
# plain tests under `make test`. A target that fails leaves its input in
# that directory: fix the code, keep the input as a seed. Every
# `func Fuzz...` in the module must be listed (checked first), so that a new
# target is not silently left out.
FUZZTIME ?= 10s
FUZZ_TARGETS ?= \
	./lifecycle/podspec:FuzzParse \
	./lifecycle/podspec:FuzzValidate \
	./cgroups/kubepods:FuzzPodParent \
	./qos:FuzzOOMScoreAdj \
	./psi:FuzzParse \
	./cgroups/cgstat:FuzzParseMemoryStat \
	./cgroups/cgstat:FuzzParseMemoryEvents \
	./cgroups/cgstat:FuzzParseOOMControl \
	./cgroups/cgstat:FuzzParseSingle \
	./cgroups/cgstat:FuzzScanMemoryStat \
	./pressure/nodestats:FuzzParseMeminfo \
	./pressure/nodestats:FuzzParseVmstat \
	./pressure/nodestats:FuzzParseLoadavgTasks \
	./loader/event:FuzzDecode \
	./cgroups:FuzzParseMountinfo \
	./cgroups:FuzzParseSelfCgroup \
	./cgroups:FuzzDiscoverFS \
	./mounts:FuzzValidatePath \
	./eviction:FuzzParseThresholdList \
	./eviction:FuzzParsePSIRule \
	./pressure/tripwire:FuzzDecodeRecord \
	./lifecycle:FuzzAPIPodRecord \
	./lifecycle:FuzzEvictionRecord \
	./lifecycle:FuzzStaticPodsRecord \
	./oomadj:FuzzRaiseRecord \
	./guard:FuzzRemovalRecord \
	./lifecycle/logs:FuzzParseRecord \
	./lifecycle/credentials:FuzzParseFile \
	./netplumb:FuzzParseLease \
	./netplumb:FuzzRender \
	./internal/statestore:FuzzParse \
	./config:FuzzConfig

# The cluster lane (issue 15): etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager, kubectl and kubelet v1.37.2 built once from the
# Go module proxy into /var/cache/nodeguard-cp (scripts/controlplane.sh:
# 10-25 min cold on 2 cores, nothing when cached), started on 127.0.0.1
# with Node,RBAC and NodeRestriction and checked (lab/cluster), then
# nodeguard in node mode against it (agent, TestNodeMode*: the
# Node Ready with its capacity and Lease, a Deployment's pods Running, a
# graceful delete, a rejection with its Event, NotReady once stopped),
# and last the node lane's node-mode check: nodeguard as make install
# ships it, under systemd on the lane's pure-v2 node with containerd as
# its own service, joins a control plane on the host's loopback, reached
# only through qemu's user network with restrict=on (CLUSTER_NODE_FLAGS
# picks the checks it needs). test-cluster-host and test-cluster-node are
# its two halves; make test runs the node half after the first chain's
# node lane and the host half at the end of the second chain
# (scripts/lanes.sh).
# (\b, not $$: the value goes through two makes and a shell.)
CLUSTER_NODE_FLAGS ?= -run '^TestNode\b/^(systemd_reached|containerd_is_active|systemctl_start_nodeguard|node_mode|kubelet|the_three-way_OOM_race)'
# CLUSTER_NODE_RACE: the three-way OOM race's mode in that run (quick:
# 1 GiB/s, one trial per strategy, ~8 min under TCG; off skips it). Off
# in make test: the lane already runs the kubelet and guard mode beside it
# (~9 min under TCG), and make test must stay within CI's bounds; make
# bench-kube-race runs the race for docs/benchmarks.md's figures.
CLUSTER_NODE_RACE ?= off
test-cluster: test-cluster-host test-cluster-node

test-cluster-host: deps
	@bin=$$(scripts/controlplane.sh) && \
		NODEGUARD_CP_BIN=$$bin $(GO) test -tags clusterlane -count=1 -timeout 10m -v -run '^TestControlPlane$$' ./lab/cluster/ && \
		NODEGUARD_CP_BIN=$$bin $(GO) test -tags clusterlane -count=1 -timeout 12m -v -run '^TestNodeMode' ./agent/ && \
		NODEGUARD_CP_BIN=$$bin $(GO) test -tags clusterlane -count=1 -timeout 10m -v -run '^TestGuard' ./guard/

test-cluster-node:
	@bin=$$(scripts/controlplane.sh) && \
		$(MAKE) --no-print-directory test-node NODE_CLUSTER=$$bin NODE_RACE=$(CLUSTER_NODE_RACE) NODE_FLAGS="$(CLUSTER_NODE_FLAGS)" \
			BIN=bin/nodeguard-lane-cluster NODEVM=bin/nodevm-lane-cluster NODE_OUT=out/node-cluster

# The three-way OOM race on the real kubelet's node alone (issue 16; the
# docs/benchmarks.md's figures): the node lane's start checks, then the kubelet alone,
# the kubelet with nodeguard guard beside it and nodeguard in node mode
# (lab/nodelane/kuberace_test.go), KUBE_RACE=full (3 rates, 2 trials
# per strategy: the race 20 min 39 s under TCG, the lane 23 min; go test
# and the guest are bounded by KUBE_RACE_TIMEOUT) or quick (1 GiB/s, one
# trial per strategy: the race 5 min 44 s, the lane 9 min 48 s). Its report, eviction.csv, eviction.png and
# logs land in out/node-kube/kube-race-<mode>/.
KUBE_RACE         ?= full
KUBE_RACE_TIMEOUT ?= 85m
KUBE_RACE_FLAGS   ?= -timeout $(KUBE_RACE_TIMEOUT) -run '^TestNode\b/^(systemd_reached|containerd_is_active|systemctl_start_nodeguard|the_three-way_OOM_race)'
bench-kube-race:
	@bin=$$(scripts/controlplane.sh) && NODEGUARD_NODE_TIMEOUT=$(KUBE_RACE_TIMEOUT) \
		$(MAKE) --no-print-directory test-node NODE_CLUSTER=$$bin NODE_RACE=$(KUBE_RACE) NODE_FLAGS="$(KUBE_RACE_FLAGS)" \
			BIN=bin/nodeguard-lane-kube NODEVM=bin/nodevm-lane-kube NODE_OUT=out/node-kube

fuzz:
	@missing=$$(git ls-files --cached --others --exclude-standard '*_test.go' | xargs grep -Eo '^func Fuzz[A-Za-z0-9_]+' | \
		sed -E 's|^(.*)/[^/]+_test\.go:func |./\1:|' | sort -u | while read -r t; do \
			case " $(strip $(FUZZ_TARGETS)) " in *" $$t "*) ;; *) echo "$$t";; esac; done); \
	if [ -n "$$missing" ] && [ "$(origin FUZZ_TARGETS)" = file ]; then \
		echo "fuzz: targets not in FUZZ_TARGETS (add them to the Makefile):" $$missing >&2; exit 1; fi
	./scripts/fuzz.sh '$(GO)' $(FUZZTIME) $(FUZZ_TARGETS)

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 100000x ./loader/...
	NODEGUARD_REQUIRE_PRIVILEGED=1 $(GO) test -run '^$$' -bench Snapshot250 -benchtime 300x ./pressure
	./$(BIN) bench events --out out/bench
	./$(BIN) bench churn --pods 50 --parallel 8 --out out/bench --log-level warn
	./$(BIN) bench net --pods 50 --out out/bench --log-level warn

# The pod-root tripwire's v2 mechanisms side by side (pressure/tripwire
# BenchmarkV2Mechanisms) in the VM lane's guests, one run per kernel of
# VM_KERNELS; brd.ko (page cache without a disk) is copied out of each
# cached kernel package first. Figures are under TCG.
bench-tripwire-vm:
	$(GO) build -o $(VMRUN) ./lab/vmtest/cmd/vmrun
	$(abspath $(VMRUN)) -lane -go '$(GO)' -kernels '$(VM_KERNELS)' ./pressure/tripwire >/dev/null
	./scripts/vm-modules.sh pressure/tripwire/testdata/modules brd
	for k in $(VM_KERNELS); do uptime; \
		(cd pressure/tripwire && CGO_ENABLED=0 NODEGUARD_VM_KERNEL=$$k NODEGUARD_VM_MEMORY=1G NODEGUARD_VM_TIMEOUT=900s \
		$(GO) test -count=1 -exec $(abspath $(VMRUN)) -run '^$$' -bench V2Mechanisms -benchtime 1x -v .) || exit 1; uptime; done

# build is run here rather than as a prerequisite so that a fresh machine
# is told why it takes minutes (go downloads the modules first).
demo: deps
	@echo "== building $(BIN) (a fresh machine downloads the Go modules first: a few minutes)"; \
	start=$$(date +%s); \
	$(MAKE) --no-print-directory build || { echo "demo: building $(BIN) failed: the go output is above" >&2; exit 1; }; \
	echo "   built in $$(( $$(date +%s) - start ))s"
	GO=$(GO) BIN=$(BIN) ./scripts/demo.sh

clean:
	rm -rf bin
