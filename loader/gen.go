package loader

// The BPF objects are compiled from bpf/*.bpf.c by bpf2go and committed, so
// that `go build` needs no clang. `make generate` reruns these lines with the
// pinned compiler (BPF2GO_CC, default clang-19; see Dockerfile.bpf).

//go:generate go tool bpf2go -cc ${BPF2GO_CC} -strip ${BPF2GO_STRIP} -cflags ${BPF2GO_CFLAGS} -target bpfel -no-global-types oom ../bpf/oom.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -cc ${BPF2GO_CC} -strip ${BPF2GO_STRIP} -cflags ${BPF2GO_CFLAGS} -target bpfel -no-global-types reclaim ../bpf/reclaim.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -cc ${BPF2GO_CC} -strip ${BPF2GO_STRIP} -cflags ${BPF2GO_CFLAGS} -target bpfel -no-global-types cgroup ../bpf/cgroup.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -cc ${BPF2GO_CC} -strip ${BPF2GO_STRIP} -cflags ${BPF2GO_CFLAGS} -target bpfel -no-global-types exit ../bpf/exit.bpf.c -- -I../bpf/include
//go:generate go tool bpf2go -cc ${BPF2GO_CC} -strip ${BPF2GO_STRIP} -cflags ${BPF2GO_CFLAGS} -target bpfel -no-global-types bench ../bpf/bench.bpf.c -- -I../bpf/include
