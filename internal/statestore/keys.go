package statestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Keys lists the keys of kind k's record files, sorted, without reading
// them: a caller that must know which records could not be read (to keep
// what they describe) reads each with Get, whose ErrCorrupt and
// ErrUnsupported then name the key. Files that are not records' are left
// out (List quarantines them).
func (s *Store) Keys(k Kind) ([]string, error) {
	entries, err := s.entries(k)
	if err != nil || entries == nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		if key, ok := s.keyOfFile(k, e.Name()); ok {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out, nil
}

// QuarantineFile moves path, a file of kind k's that is not in the store
// (an older agent's file being migrated) and cannot be read, beneath
// quarantine/<kind>/, logged and counted as a record is. It returns why,
// as ErrCorrupt.
func (s *Store) QuarantineFile(k Kind, path string, why error) error {
	if err := validKind(k); err != nil {
		return err
	}
	why = fmt.Errorf("%w: %w", ErrCorrupt, why)
	qdir := filepath.Join(s.dir, QuarantineDir, k.Name)
	dst := filepath.Join(qdir, fmt.Sprintf("%s.%d", filepath.Base(path), s.now().UnixNano()))
	err := os.MkdirAll(qdir, 0o700)
	if err == nil {
		err = os.Rename(path, dst)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	s.quar.WithLabelValues(k.Name).Inc()
	if err != nil {
		s.log.Error("unreadable file could not be moved aside; ignored", "kind", k.Name, "file", path, "reason", why, "err", err)
		return errors.Join(why, err)
	}
	s.log.Error("unreadable file quarantined", "kind", k.Name, "file", path, "moved_to", dst, "err", why)
	return why
}
