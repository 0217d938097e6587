// Package psi senses Pressure Stall Information: it parses the kernel's
// pressure files (/proc/pressure/{cpu,memory,io,irq} and the cgroup2
// *.pressure files), keeps them open for cheap re-reads, and arms PSI
// triggers whose wake-ups it hands to the caller. It only senses: what a
// pressure reading means is decided elsewhere (package eviction).
//
// The file format is Documentation/accounting/psi.rst: one line per kind,
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//
// where the averages are percentages over 10, 60 and 300 s and total is the
// stall time in microseconds. Kernels before 5.13 have no "full" line for
// cpu, the system-wide cpu file has a "full" line of zeros (undefined at
// system level; OpenSystem and ReadSystem drop it), and irq has only "full".
//
// Invariants:
//
//   - The hot read path does not allocate: Parse and (*File).Read return a
//     Stats value and reuse one buffer per File; only errors allocate.
//   - A missing pressure file (no CONFIG_PSI, psi=0, no irq time
//     accounting, a cgroup v1 directory, cgroup.pressure=0) is an error
//     matching ErrUnsupported; content that does not parse is a
//     *ParseError naming the file and the 1-based line, matching
//     ErrMalformed; a cgroup removed under an open file or trigger matches
//     ErrGone. Callers tell them apart with errors.Is and errors.As. An
//     unreadable value is never reported as zero.
//   - A trigger lives exactly as long as the descriptor it was written to:
//     closing a Watcher closes every descriptor, which destroys its kernel
//     triggers. A Watcher's trigger set is fixed; when the set changes the
//     caller builds a new Watcher and closes the old one.
//   - Trigger windows: the kernel grants windows from 500 ms to 10 s to
//     openers with CAP_SYS_RESOURCE and only multiples of 2 s to others.
//     NewWatcher asks for the requested window first and, when refused,
//     falls back to the smallest 2 s multiple that is not shorter, keeping
//     the stall/window ratio, and logs one info line per Watcher saying so.
//     Effective reports what each trigger really got.
//   - The watch loop never blocks on its consumer and never logs per
//     event: a wake-up that does not fit in the consumer's channel is
//     dropped and counted (Dropped), every wake-up is counted per trigger
//     (Fired), and a trigger whose cgroup disappears is taken out of the
//     epoll set and reported (Errs), never spun on.
//   - A File is not safe for concurrent use; a Watcher is, except that only
//     one Run may be active at a time.
package psi
