// Package loader is nodeguard's kernel side in Go: the only package that
// imports github.com/cilium/ebpf.
//
// It loads the BPF objects compiled from bpf/*.bpf.c (committed bpf2go
// output, see gen.go), attaches every hook by actually loading it and taking
// the first attach path the running kernel accepts (tp_btf, then the classic
// tracepoint, then off), reads the ring buffers and hands decoded
// [event.Event] values to one consumer through a bounded queue.
//
// Invariants:
//   - The readers never block on the consumer: when the queue is full an
//     event is dropped and counted. Records from the OOM ring may use the
//     last part of the queue that other rings leave free, so a flood of exits
//     cannot push out an OOM kill.
//   - Every record is accounted for: per ring, the kernel counts records
//     submitted and reservations that failed (ring full), and the loader
//     counts records read, malformed records and queue drops, so that
//     submitted + reserve failures = events attempted and
//     read = delivered + dropped + malformed.
//   - The per-cgroup reclaim aggregates (reclaim_stats) stay bounded under
//     any churn: a removed cgroup's entries are freed a while after its
//     rmdir event, and the map is an LRU hash, so the entries of cgroups
//     whose rmdir was lost make room for new ones instead of filling it.
//   - Hooks fail one at a time: a hook that no path can attach is reported
//     with the exact error of every attempt and the rest keep working.
//   - Close stops the readers, detaches every hook and frees every map; it
//     is safe to call more than once.
package loader
