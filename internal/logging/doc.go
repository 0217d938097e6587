// Package logging is nodeguard's log/slog back end: text or JSON records,
// written by one goroutine from a bounded queue, so that logging never
// blocks the caller.
//
// Under memory pressure the agent's output may stall (journald throttled
// or swapped out, a terminal not read, a full pipe): a blocking logger would
// then stall the eviction loop that is meant to relieve the pressure. Meta's
// oomd makes the same point. Here a record is cloned into a queue of fixed
// size and formatted and written by the writer goroutine; when the queue is
// full the record is dropped and counted (Dropped, exported as
// nodeguard_log_dropped_total), and the next record that is written is
// preceded by one line saying how many were lost.
//
// Invariants:
//   - Handle never blocks and never allocates more than one record clone
//     and one queue slot; it does no I/O.
//   - Records are written in the order they were queued, one Write per
//     record.
//   - Level and format can be changed at run time (SetLevel, SetFormat,
//     for a configuration reload); handlers derived with WithAttrs and
//     WithGroup follow the change.
//   - Under journald (JournalStream), the time attribute is left out
//     (journald stamps every line) and each line starts with its syslog
//     priority ("<3>" for errors, ...), which journald strips and records.
package logging
