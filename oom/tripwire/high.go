package tripwire

import (
	"bytes"
	"fmt"
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
)

// highKeeper owns the writes of one directory's memory.high: it keeps the
// value found before the first write (recorded in stateDir, see
// highRecord), writes new values, and restores the original. Its owner
// guards it with its own mutex.
type highKeeper struct {
	dir      string
	dirfd    int // borrowed from the owner
	log      *slog.Logger
	stateDir string

	orig     string
	written  string // memory.high as read back after the last write; "" before
	record   string // the state file; "" without stateDir
	id       uint64 // the directory's inode, for the record
	recorded bool   // the record of orig is on disk
	buf      [64]byte
}

// load reads the original memory.high and, with a stateDir, recovers a
// record left by a Tripwire that did not close.
func (h *highKeeper) load() error {
	v, err := h.read()
	if err != nil {
		return err
	}
	if v == "" {
		return fmt.Errorf("read %s/%s: %w: empty", h.dir, fileHigh, ErrMalformed)
	}
	h.orig = v
	if h.stateDir == "" {
		return nil
	}
	return h.recover()
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
	if h.record != "" && !h.recorded {
		// Durably, before the first write: a crash after it leaves the
		// original where the next Tripwire finds it.
		if err := saveRecord(h.record, highRecord{Dir: h.dir, ID: h.id, Original: h.orig}); err != nil {
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
	if h.record == "" || !h.recorded {
		return nil
	}
	h.recorded = false
	return removeRecord(h.record)
}

// recover reads the record of dir in stateDir. A record of this very
// cgroup (same inode) was left by a Tripwire that did not Close (a
// crash): its original is the original, and the memory.high found now,
// when it differs, is that Tripwire's, which restore puts back. A record
// of another cgroup that had the same path is stale and removed.
func (h *highKeeper) recover() error {
	h.record = recordPath(h.stateDir, h.dir)
	id, err := dirID(h.dirfd, h.dir)
	if err != nil {
		return err
	}
	h.id = id
	r, ok, err := loadRecord(h.record)
	switch {
	case err != nil:
		return err
	case !ok:
		return nil
	case r.ID != id:
		h.log.Info("tripwire state of a removed cgroup at the same path, ignored",
			"dir", h.dir, "state", h.record, "state_id", r.ID, "id", id)
		return removeRecord(h.record)
	}
	h.recorded = true
	if r.Original != h.orig {
		h.log.Info("memory.high left armed by a tripwire that did not close, the recorded original will be restored",
			"dir", h.dir, "found", h.orig, "original", r.Original, "state", h.record)
		h.written = h.orig
	}
	h.orig = r.Original
	return nil
}
