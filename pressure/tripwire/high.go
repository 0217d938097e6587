package tripwire

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/internal/statestore"
)

// DefaultUnarmed is the memory.high of the pod root without a live agent:
// the kubelet never sets memory.high on kubepods (node allocatable is
// memory.max, and Memory QoS writes memory.high on pods and containers
// only), so "max" is what it would have.
const DefaultUnarmed = "max"

// HighRange bounds the memory.high values a Tripwire of one configuration
// can have written on its directory, in bytes, both ends included. The zero
// HighRange holds nothing.
type HighRange struct {
	Min, Max uint64
}

// Holds tells whether the memory.high value v (as the file reads) is in
// r: "max" never is.
func (r HighRange) Holds(v string) bool {
	n, ok := highBytes(v)
	return ok && r.Max != 0 && n >= r.Min && n <= r.Max
}

// repairAction is what a Tripwire does with the memory.high it finds when
// the record of the original is unreadable.
type repairAction int

const (
	// repairNothing: memory.high already has its value without an agent.
	repairNothing repairAction = iota
	// repairRestore: a value a Tripwire of this configuration writes;
	// the value without an agent goes back.
	repairRestore
	// repairLeave: a value the agent does not recognise: someone else's,
	// left alone.
	repairLeave
)

// decideRepair decides what becomes of found, the memory.high of a
// directory whose record was unreadable (quarantined): the record was put
// before the first write, so a Tripwire was writing memory.high when the
// agent stopped, and found is either what it left or what someone wrote
// since. Only a value it could have written is replaced, by unarmed.
func decideRepair(found, unarmed string, ours HighRange) repairAction {
	switch {
	case found == unarmed:
		return repairNothing
	case ours.Holds(found):
		return repairRestore
	default:
		return repairLeave
	}
}

// highKeeper owns the writes of one directory's memory.high: it keeps the
// value found before the first write (recorded in the store, see
// highRecord), writes new values, and restores the original. Its owner
// guards it with its own mutex.
type highKeeper struct {
	dir   string
	dirfd int // borrowed from the owner
	log   *slog.Logger
	// store, legacy, unarmed and ours are Options.Store,
	// LegacyStateDir, Unarmed and Written.
	store   *statestore.Store
	legacy  string
	unarmed string
	ours    HighRange

	orig     string
	written  string // memory.high as read back after the last write; "" before
	key      string // the record's key
	id       uint64 // the directory's inode, for the record
	recorded bool   // the record of orig is in the store
	// refuse, when set, is why memory.high must not be written: the
	// record of the original cannot be read (a newer agent's, or the
	// store fails), so a write could not be undone after a crash.
	refuse error
	buf    [64]byte
}

// newHighKeeper keeps memory.high of dir, open as dirfd (borrowed), as
// opts say.
func newHighKeeper(dir string, dirfd int, opts Options) highKeeper {
	return highKeeper{dir: dir, dirfd: dirfd, log: opts.Logger, store: opts.Store, legacy: opts.LegacyStateDir,
		unarmed: opts.Unarmed, ours: opts.Written}
}

// load reads the original memory.high and, with a store, recovers what a
// Tripwire that did not close left: a memory.high it armed goes back to
// the recorded original at once, or, when the record was unreadable, to
// the value without an agent (see decideRepair). Only a memory.high that
// cannot be read fails it; a bad record never does.
func (h *highKeeper) load() error {
	v, err := h.read()
	if err != nil {
		return err
	}
	if v == "" {
		return fmt.Errorf("read %s/%s: %w: empty", h.dir, fileHigh, ErrMalformed)
	}
	h.orig = v
	if h.store == nil {
		return nil
	}
	if h.unarmed == "" {
		h.unarmed = DefaultUnarmed
	}
	h.key = recordKey(h.dir)
	if h.id, err = dirID(h.dirfd, h.dir); err != nil {
		return err
	}
	h.recover()
	return nil
}

func (h *highKeeper) read() (string, error) {
	fd, err := openAt(h.dirfd, h.dir, fileHigh, unix.O_RDONLY)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	raw, err := pread(fd, h.buf[:])
	if err != nil {
		return "", fmt.Errorf("read %s/%s: %w", h.dir, fileHigh, err)
	}
	return string(bytes.TrimSpace(raw)), nil
}

// write sets memory.high to v, recording the original durably first, and
// returns what the kernel shows (it rounds down to pages), which restore
// compares to tell whether someone else changed it since.
func (h *highKeeper) write(v string) (string, error) {
	if h.refuse != nil {
		return "", fmt.Errorf("write %q to %s/%s: %w", v, h.dir, fileHigh, h.refuse)
	}
	if h.store != nil && !h.recorded {
		// Durably, before the first write: a crash after it leaves the
		// original where the next Tripwire finds it.
		if err := h.store.Put(RecordKind, h.key, highRecord{ID: h.id, Original: h.orig}); err != nil {
			return "", err
		}
		h.recorded = true
	}
	if err := writeValue(h.dirfd, h.dir, fileHigh, v); err != nil {
		return "", err
	}
	got, err := h.read()
	if err != nil {
		return "", err
	}
	h.written = got
	return got, nil
}

// restore writes back the memory.high found before the first write (or
// recorded by a Tripwire that did not close), unless the cgroup is gone or
// someone else has changed it since our last write; then it removes the
// record. A failed write keeps the record, for the next Tripwire.
func (h *highKeeper) restore() error {
	if h.written == "" || h.dirfd < 0 {
		return h.forget()
	}
	now, err := h.read()
	if err != nil {
		if cgroups.Gone(err) {
			return h.forget()
		}
		return fmt.Errorf("restore %s/%s to %q: %w", h.dir, fileHigh, h.orig, err)
	}
	if now != h.written {
		h.log.Warn("memory.high changed by someone else, not restoring it",
			"dir", h.dir, "ours", h.written, "found", now, "original", h.orig)
		return h.forget()
	}
	if err := writeValue(h.dirfd, h.dir, fileHigh, h.orig); err != nil {
		if cgroups.Gone(err) {
			return h.forget()
		}
		return fmt.Errorf("restore memory.high: %w", err)
	}
	h.written = ""
	return h.forget()
}

// forget removes the record, if there is one.
func (h *highKeeper) forget() error {
	if h.store == nil || !h.recorded {
		return nil
	}
	h.recorded = false
	return h.store.Delete(RecordKind, h.key)
}

// recover reads the record of the directory. A record of this very cgroup
// (same inode) was left by a Tripwire that did not Close (a crash): its
// original goes back now. A record of another cgroup that had the same
// path is stale and removed. An unreadable record has been quarantined
// (and counted) by the store: memory.high is repaired from the
// configuration (decideRepair). A record that cannot be read for another
// reason (a newer agent's, left in place; the store failing) means no
// write can be undone: memory.high is left as found and never written.
func (h *highKeeper) recover() {
	r, ok, err := statestore.GetOf[highRecord](h.store, RecordKind, h.key)
	switch {
	case errors.Is(err, statestore.ErrCorrupt):
		h.repair("the record of the original was unreadable and is quarantined", err)
		return
	case err != nil:
		h.refuse = fmt.Errorf("the record of its original cannot be read: %w", err)
		h.log.Warn("tripwire: the record of the original memory.high cannot be read: memory.high is left as found and not written",
			"dir", h.dir, "found", h.orig, "err", err)
		return
	case !ok:
		if r, ok = h.migrate(); !ok {
			return
		}
	}
	if r.ID != h.id {
		h.log.Info("tripwire record of a removed cgroup at the same path, deleted",
			"dir", h.dir, "record_id", r.ID, "id", h.id)
		if err := h.store.Delete(RecordKind, h.key); err != nil {
			h.log.Warn("tripwire: delete a stale record", "dir", h.dir, "err", err)
		}
		return
	}
	h.recorded = true
	h.putBack(r.Original)
}

// putBack writes original, the recorded memory.high of before a Tripwire
// that did not close, over what that Tripwire left, and forgets the
// record. A write that fails keeps the record and leaves the original to
// Close (the assist's first write records nothing new: the record holds).
func (h *highKeeper) putBack(original string) {
	found := h.orig
	h.orig = original
	if found == original {
		h.forgetLogged()
		return
	}
	if err := writeValue(h.dirfd, h.dir, fileHigh, original); err != nil {
		h.written = found
		h.log.Warn("tripwire: memory.high left armed by a tripwire that did not close could not be restored now; tried again on Close",
			"dir", h.dir, "found", found, "original", original, "err", err)
		return
	}
	h.log.Info("memory.high left armed by a tripwire that did not close, restored",
		"dir", h.dir, "found", found, "original", original)
	h.forgetLogged()
}

// repair decides, without a readable record, what becomes of the
// memory.high found (decideRepair), and does it. No record is left: the
// first write puts a new one.
func (h *highKeeper) repair(why string, err error) {
	found := h.orig
	switch decideRepair(found, h.unarmed, h.ours) {
	case repairNothing:
		h.log.Warn("tripwire: "+why+"; memory.high already has its value without an agent",
			"dir", h.dir, "found", found, "err", err)
	case repairRestore:
		h.orig = h.unarmed
		if werr := writeValue(h.dirfd, h.dir, fileHigh, h.unarmed); werr != nil {
			h.written = found // Close tries again
			h.log.Error("tripwire: "+why+"; the memory.high it left could not be restored now; tried again on Close",
				"dir", h.dir, "found", found, "restore_to", h.unarmed, "err", errors.Join(err, werr))
			return
		}
		h.log.Warn("tripwire: "+why+"; the memory.high it left is restored to its value without an agent",
			"dir", h.dir, "found", found, "restored_to", h.unarmed, "written_range", fmt.Sprintf("[%d, %d]", h.ours.Min, h.ours.Max), "err", err)
	case repairLeave:
		h.log.Warn("tripwire: "+why+"; memory.high holds a value the agent does not recognise as its own, left alone",
			"dir", h.dir, "found", found, "unarmed", h.unarmed, "written_range", fmt.Sprintf("[%d, %d]", h.ours.Min, h.ours.Max), "err", err)
	}
}

func (h *highKeeper) forgetLogged() {
	if err := h.forget(); err != nil {
		h.log.Warn("tripwire: delete the record of the original memory.high", "dir", h.dir, "err", err)
	}
}

// migrate moves the old state file of the directory (LegacyStateDir) into
// the store once: a valid one becomes the record and is removed; one that
// does not parse is renamed aside (".corrupt") and repaired from, as an
// unreadable record. ok reports a record to recover from.
func (h *highKeeper) migrate() (highRecord, bool) {
	if h.legacy == "" {
		return highRecord{}, false
	}
	path := legacyPath(h.legacy, h.dir)
	r, ok, err := loadLegacy(path)
	switch {
	case errors.Is(err, ErrMalformed):
		aside := path + ".corrupt"
		if rerr := os.Rename(path, aside); rerr != nil {
			h.log.Error("tripwire: a malformed old state file could not be moved aside", "file", path, "err", rerr)
		}
		h.repair("the old state file of the original was malformed and is moved to "+aside, err)
		return highRecord{}, false
	case err != nil:
		h.refuse = fmt.Errorf("the old state file of its original cannot be read: %w", err)
		h.log.Warn("tripwire: the old state file of the original memory.high cannot be read: memory.high is left as found and not written",
			"dir", h.dir, "found", h.orig, "err", err)
		return highRecord{}, false
	case !ok:
		return highRecord{}, false
	}
	if err := h.store.Put(RecordKind, h.key, r); err != nil {
		// The old file stays for the next start; this one recovers
		// from it all the same.
		h.log.Warn("tripwire: the old state file could not be moved into the state store", "file", path, "err", err)
		return r, true
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.log.Warn("tripwire: remove the old state file moved into the state store", "file", path, "err", err)
	}
	h.log.Info("tripwire: old state file moved into the state store", "file", path, "dir", h.dir)
	return r, true
}
