// Package host probes what the running kernel and this process are allowed
// to do, for `nodeguard doctor` and for choosing fast paths at start-up:
// kernel release, BTF, capabilities, PSI files and trigger windows, tracefs
// and tracepoints.
//
// Invariants:
//
//   - A probe never reports an unknown value as zero or false without
//     saying why: it returns an error naming the file or call that failed.
//   - "Not available here" errors match ErrUnsupported and "the kernel said
//     something this parser does not understand" errors match
//     ErrMalformed, so callers can tell them apart with errors.Is.
//   - Probes leave nothing behind: a PSI trigger lives only as long as the
//     descriptor it was written to, and every descriptor is closed before
//     the probe returns.
//   - Paths are injectable in the unexported cores, so parsers are tested
//     against fixture files.
package host
