// Package statestore keeps what the agent writes and must read back after
// any crash: persisted API pods, eviction records, oom_score_adj raise
// records, guard mode's pending removals and holds, the tripwire's
// memory.high originals.
//
// It follows the kubelet's checkpoint manager (pkg/kubelet/checkpointmanager)
// rather than a database such as bbolt: every record is one small file, one
// per object, written rarely (on an apply, an eviction, a raise) and read
// once at start. A file per record needs no compaction, no lock held across
// a crash and no second process to inspect it (cat works), and a torn or
// corrupt record costs that record alone, never the store. bbolt's
// transactions buy atomic multi-record updates, which no caller needs: each
// record stands alone.
//
// Invariants:
//   - A record is written atomically and durably: a temporary file in the
//     same directory is written and fsynced, renamed over the record, and the
//     directory is fsynced. After a crash or power loss the record is the old
//     one or the new one, never a mix; a removal is durable too.
//   - A record is an envelope with the store's format, the record's kind
//     and key, the caller's schema version, the time written and a CRC-32C
//     of the payload. A record whose envelope or checksum is wrong, whose
//     kind or key does not match its place, or whose payload the caller
//     cannot decode is quarantined: moved aside beneath quarantine/, logged
//     once and counted, never fatal and never silently dropped.
//   - A record of a newer schema version than the reader knows (written by
//     a newer agent, read after a downgrade) is ErrUnsupported: it is left
//     in place untouched, so that the newer agent finds it again.
//   - Keys are free-form strings (namespace/name, a UID); file names are
//     their escaped form, so no key reaches outside its kind's directory.
package statestore
