package tripwire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// highRecord is the state file of one watched v2 directory: the
// memory.high it had before a Tripwire first wrote it. It is written
// (atomically, and synced) before that first write and removed once the
// original is back, so that a Tripwire started after a crash restores the
// real original instead of the threshold the crashed one left there.
type highRecord struct {
	// Dir is the watched directory, for people reading the file.
	Dir string `json:"dir"`
	// ID is the directory's inode number (the cgroup id on v2): a
	// record of a removed and re-created cgroup at the same path does
	// not match it.
	ID uint64 `json:"id"`
	// Original is memory.high as it read before the first write.
	Original string `json:"original"`
}

// recordPath is where the record of dir lives in stateDir: one file per
// watched path, named after it.
func recordPath(stateDir, dir string) string {
	name := strings.ReplaceAll(strings.Trim(filepath.Clean(dir), "/"), "/", "_")
	return filepath.Join(stateDir, "memory.high."+name+".json")
}

// loadRecord reads a record; ok is false when there is none. A record
// that does not parse matches ErrMalformed.
func loadRecord(path string) (r highRecord, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("read tripwire state %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, false, fmt.Errorf("parse tripwire state %s: %w: %w", path, ErrMalformed, err)
	}
	if r.ID == 0 || r.Original == "" || strings.ContainsAny(r.Original, " \n") {
		return r, false, fmt.Errorf("parse tripwire state %s: %w: id %d, original %q", path, ErrMalformed, r.ID, r.Original)
	}
	return r, true, nil
}

// saveRecord writes r to path atomically: a synced temporary file in the
// same directory renamed over it, then the directory synced, so that after
// a crash the file is either the old one or r, never partial.
func saveRecord(path string, r highRecord) (retErr error) {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("write tripwire state %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("write tripwire state %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write tripwire state %s: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write tripwire state %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync tripwire state %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close tripwire state %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write tripwire state %s: %w", path, err)
	}
	return syncDir(dir)
}

// removeRecord removes path (and syncs its directory); a missing file is
// not an error.
func removeRecord(path string) error {
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove tripwire state %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Fsync(fd); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// dirID returns the inode number of the open directory dirfd: the cgroup
// id on cgroup v2.
func dirID(dirfd int, dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(dirfd, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", dir, err)
	}
	return st.Ino, nil
}
