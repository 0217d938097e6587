// Package event is the Go side of nodeguard's kernel event ABI
// (bpf/include/nodeguard.h): the typed events that the BPF programs write to
// the ring buffers, and Decode, which turns one raw ring buffer record into
// one of them.
//
// Every record starts with the same 40-byte header (kind, version, flags, cpu,
// pid, tid, a CLOCK_MONOTONIC timestamp and two cgroup ids) followed by a
// body whose layout is fixed by the kind and its version. Decode picks the
// body by kind and returns a pointer to a concrete type: *OOMKill, *Reclaim,
// *Cgroup (for both mkdir and rmdir), *OOMScoreAdj, *Exit or *Bench.
//
// Invariants:
//
//   - The package is a leaf: standard library only. It never imports
//     cilium/ebpf; the loader reads the rings and hands the bytes here.
//   - Decoding is a pure function of its input. It uses no reflection and no
//     encoding/binary.Read: every field is read by its offset, little-endian.
//   - Decode never panics, whatever the input (FuzzDecode checks this). Every
//     length is checked before a field is read. A record shorter than its
//     kind's size is an error; a longer one is accepted, because ring buffer
//     records are padded to 8 bytes. An unknown kind and a layout version
//     other than the one this package was built for are errors, never guesses.
//   - Every error that Decode returns matches ErrMalformed with errors.Is and
//     is one of *ShortError, *UnknownKindError and *VersionError for
//     errors.As. The last two also match errors.ErrUnsupported: they usually
//     mean that the BPF objects are newer than this decoder, not that the
//     bytes are damaged.
//   - Decode costs one allocation for the event, plus one for each non-empty
//     string field (comm, path). It holds no reference to its input: the
//     caller may reuse the buffer as soon as Decode returns.
//   - C strings live in fixed buffers: a string ends at its first NUL, or
//     fills the whole buffer when it has none. String fields are bytes as the
//     kernel gave them and need not be valid UTF-8.
//   - The sizes and offsets are tested against golden bytes laid out by hand
//     (testdata/*.hex), independently of the decoder. A change to
//     nodeguard.h that moves a field must bump that kind's version there and
//     here, and regenerate the golden files with go test -update.
//
// ToRecord and Human render events for the command line (one JSON object per
// line, or one human-readable line); they are not used on the hot path.
package event
