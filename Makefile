# nodeguard: see README.md. `make test` is what CI runs.

GO            ?= go
BPF2GO_CC     ?= clang-19
BPF2GO_STRIP  ?= llvm-strip-19
BPF2GO_CFLAGS ?= -O2 -g -Wall -Werror
BIN           ?= bin/nodeguard
export BPF2GO_CC BPF2GO_STRIP BPF2GO_CFLAGS

.PHONY: all build generate vmlinux deps test bench lint check-generate demo clean

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

# The test command of README.md and .ci/run.
test: deps lint check-generate build
	$(GO) test -race -count=1 -timeout 20m ./...

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 100000x ./loader/...
	./$(BIN) bench events

demo: deps build
	./scripts/demo.sh

clean:
	rm -rf bin
