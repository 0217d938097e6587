# nodeguard: see README.md. `make test` is what CI runs.

GO            ?= go
BPF2GO_CC     ?= clang-19
BPF2GO_STRIP  ?= llvm-strip-19
BPF2GO_CFLAGS ?= -O2 -g -Wall -Werror
BIN           ?= bin/nodeguard
export BPF2GO_CC BPF2GO_STRIP BPF2GO_CFLAGS

.PHONY: all build generate vmlinux deps test test-vm bench lint check-generate demo clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/nodeguard

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

# The test command of README.md and .ci/run: the host lane, then the VM lane.
test: deps lint check-generate build
	$(GO) test -race -count=1 -timeout 20m ./...
	$(MAKE) test-vm

# The pure cgroup v2 lane (internal/vmtest): each package of VM_PKGS on each
# kernel of VM_KERNELS, in throwaway qemu VMs, as
#   CGO_ENABLED=0 NODEGUARD_VM_KERNEL=<k> go test -json -count=1 -exec bin/vmrun <pkg>
# then one summary line per kernel. Static test binaries, so no -race (it
# needs cgo). Kernels are cached in /var/cache/nodeguard-vm.
VM_KERNELS ?= 6.1 6.12
VM_PKGS    ?= ./loader ./internal/cgtest ./internal/host ./internal/cgroups ./pressure ./pressure/cgstat ./lifecycle/podcgroups ./oom/tripwire
VMRUN      ?= bin/vmrun

test-vm:
	$(GO) build -o $(VMRUN) ./internal/vmtest/cmd/vmrun
	$(abspath $(VMRUN)) -lane -go '$(GO)' -kernels '$(VM_KERNELS)' $(VM_PKGS)

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 100000x ./loader/...
	NODEGUARD_REQUIRE_PRIVILEGED=1 $(GO) test -run '^$$' -bench Snapshot250 -benchtime 300x ./pressure
	./$(BIN) bench events --out out/bench
	./$(BIN) bench churn --pods 50 --parallel 8 --out out/bench --log-level warn
	./$(BIN) bench net --pods 50 --out out/bench --log-level warn

demo: deps build
	./scripts/demo.sh

clean:
	rm -rf bin
