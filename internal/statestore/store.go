package statestore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
)

// Format is the envelope's own version. It changes only when the envelope
// does; a kind's payload has its own version (Kind.Version).
const Format = 1

// maxRecord bounds what is read of one record: the largest payload today,
// a persisted pod, is a few KiB; a file larger than this is not ours.
const maxRecord = 4 << 20

// suffix marks record files; anything else in a kind's directory is left
// alone (temporary files of a crashed write are removed).
const suffix = ".rec"

// tmpPrefix starts the names of the temporary files a write renames.
const tmpPrefix = ".tmp-"

// sparePrefix starts the names of the files Prepare makes for the next
// Stage; a crash leaves one, which the first listing of its kind removes.
const sparePrefix = tmpPrefix + "spare-"

// QuarantineDir is the directory beneath the store's root that receives
// records that could not be read, one directory per kind.
const QuarantineDir = "quarantine"

var (
	// ErrCorrupt is a record that cannot be read: a torn or foreign file,
	// a checksum that does not match, a kind or key that is not its
	// place's, a payload that does not decode or validate. It has been
	// quarantined.
	ErrCorrupt = errors.New("corrupt state record")
	// ErrUnsupported is a record of a newer schema version than this
	// agent reads. It is left in place.
	ErrUnsupported = errors.New("state record of a newer version")
)

// Kind names a kind of record and the newest schema version of its payload
// this agent writes and reads.
type Kind struct {
	// Name is the directory the kind's records live in: lower case,
	// letters, digits and dashes.
	Name string
	// Version is the payload's schema version, at least 1.
	Version int
}

// envelope is a record as stored.
type envelope struct {
	Format   int             `json:"format"`
	Kind     string          `json:"kind"`
	Key      string          `json:"key"`
	Version  int             `json:"version"`
	Written  time.Time       `json:"written"`
	Checksum uint32          `json:"crc32c"`
	Data     json.RawMessage `json:"data"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Options configure a Store.
type Options struct {
	// Log receives one line per quarantined record and per record of a
	// newer version; slog.Default() when nil.
	Log *slog.Logger
	// Now stamps records; time.Now when nil.
	Now func() time.Time
}

// Store is a directory of records. It is safe for concurrent use; writes
// of the same record are serialised by the caller's order (last rename
// wins).
type Store struct {
	dir  string
	log  *slog.Logger
	now  func() time.Time
	quar *prometheus.CounterVec

	mu          sync.Mutex
	unsupported map[string]bool     // kind/key already logged
	made        map[string]bool     // kind directories made and synced
	listed      map[string]bool     // kinds listed once (their leftovers removed)
	spare       map[string]*os.File // per kind, the next Stage's file (Prepare)
}

// Open returns the store rooted at dir, creating it (0700) when missing.
func Open(dir string, opts Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("open state store: no directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open state store: %w", err)
	}
	s := &Store{
		dir: dir, log: opts.Log, now: opts.Now,
		quar: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodeguard_state_records_quarantined_total",
			Help: "State records that could not be read back and were moved aside to the store's quarantine directory, by kind.",
		}, []string{"kind"}),
		unsupported: map[string]bool{},
		made:        map[string]bool{},
		listed:      map[string]bool{},
		spare:       map[string]*os.File{},
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Close removes the files Prepare made; records are not affected, and the
// store is not to be used after.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for kind, f := range s.spare {
		f.Close()
		os.Remove(f.Name())
		delete(s.spare, kind)
	}
}

// Dir is the store's root directory.
func (s *Store) Dir() string { return s.dir }

// Collector exports the quarantine counter.
func (s *Store) Collector() prometheus.Collector { return s.quar }

// Quarantined reports how many records of kind were quarantined by this
// Store (tests; the metric is the operator's view).
func (s *Store) Quarantined(kind string) int {
	c, err := s.quar.GetMetricWithLabelValues(kind)
	if err != nil {
		return 0
	}
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return 0
	}
	return int(m.GetCounter().GetValue())
}

func validKind(k Kind) error {
	if k.Name == "" || k.Version < 1 || k.Name == QuarantineDir {
		return fmt.Errorf("state kind %q version %d: invalid", k.Name, k.Version)
	}
	for _, r := range k.Name {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("state kind %q: invalid character %q", k.Name, r)
		}
	}
	return nil
}

// fileName is key's file name: escaped so that no key holds a separator
// or is "." or ".."; a key whose escaped form is too long for a file name
// (a manifest's long path) is named by its hash instead ("#" and the
// SHA-256 in hex: "#" never appears in an escaped name), and its key is
// read from the record's envelope.
func fileName(key string) (string, error) {
	if key == "" {
		return "", errors.New("empty state key")
	}
	if !utf8.ValidString(key) {
		// JSON would write it with U+FFFD in place of the bad bytes: the
		// record would not match its own file when read back.
		return "", fmt.Errorf("state key %.40q: not UTF-8", key)
	}
	name := url.PathEscape(key)
	name = strings.ReplaceAll(name, ".", "%2E")
	if len(name)+len(suffix) > 255 {
		sum := sha256.Sum256([]byte(key))
		return hashedPrefix + hex.EncodeToString(sum[:]) + suffix, nil
	}
	return name + suffix, nil
}

// hashedPrefix starts the file names of keys named by their hash.
const hashedPrefix = "#"

// keyOf is the key of an escaped record file name; ok is false for a name
// that is not one (a hashed name, whose key is in its envelope, or a name
// fileName would not give: another spelling of a key is not its record).
func keyOf(name string) (string, bool) {
	base, ok := strings.CutSuffix(name, suffix)
	if !ok || base == "" || strings.HasPrefix(base, hashedPrefix) {
		return "", false
	}
	key, err := url.PathUnescape(base)
	if err != nil {
		return "", false
	}
	if n, err := fileName(key); err != nil || n != name {
		return "", false
	}
	return key, true
}

// keyOfFile is the key of the record file name of kind k: from the name,
// or for a hashed name from the envelope, whose key must hash to it.
func (s *Store) keyOfFile(k Kind, name string) (string, bool) {
	if key, ok := keyOf(name); ok {
		return key, true
	}
	if !strings.HasPrefix(name, hashedPrefix) || !strings.HasSuffix(name, suffix) {
		return "", false
	}
	b, err := readBounded(filepath.Join(s.kindDir(k), name))
	if err != nil {
		return "", false
	}
	var e struct {
		Key string `json:"key"`
	}
	if json.Unmarshal(b, &e) != nil {
		return "", false
	}
	if n, err := fileName(e.Key); err != nil || n != name {
		return "", false
	}
	return e.Key, true
}

func (s *Store) kindDir(k Kind) string { return filepath.Join(s.dir, k.Name) }

func (s *Store) ensureKindDir(k Kind) error {
	s.mu.Lock()
	done := s.made[k.Name]
	s.mu.Unlock()
	if done {
		return nil
	}
	dir := s.kindDir(k)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	s.mu.Lock()
	s.made[k.Name] = true
	s.mu.Unlock()
	return nil
}

// Put writes v (JSON) as the record key of kind k, atomically and
// durably, replacing any record there.
func (s *Store) Put(k Kind, key string, v any) (retErr error) {
	if err := validKind(k); err != nil {
		return err
	}
	name, err := fileName(key)
	if err != nil {
		return fmt.Errorf("write %s record: %w", k.Name, err)
	}
	b, err := encode(k, key, v, s.now())
	if err != nil {
		return fmt.Errorf("write %s record %s: %w", k.Name, key, err)
	}
	if err := s.ensureKindDir(k); err != nil {
		return fmt.Errorf("write %s record %s: %w", k.Name, key, err)
	}
	if err := WriteFileAtomic(filepath.Join(s.kindDir(k), name), b, 0o600); err != nil {
		return fmt.Errorf("write %s record %s: %w", k.Name, key, err)
	}
	return nil
}

// encode is the file Put writes for v as the record key of kind k,
// written at now.
func encode(k Kind, key string, v any, now time.Time) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(envelope{
		Format: Format, Kind: k.Name, Key: key, Version: k.Version,
		Written: now.UTC(), Checksum: crc32.Checksum(data, castagnoli), Data: data,
	})
	if err != nil {
		return nil, err
	}
	if len(b) > maxRecord {
		return nil, fmt.Errorf("%d bytes, more than %d", len(b), maxRecord)
	}
	return append(b, '\n'), nil
}

// Stage writes v as the record key of kind k so that it survives the
// agent's crash but not yet a power loss: the file is written and renamed
// into place, unsynced; durable makes it durable (fsync of the file and
// its directory). It is for a record that must precede an act on the hot
// path (the kill of an eviction) where an fsync's milliseconds, more under
// memory pressure (writeback), would delay the act: a process that dies
// (SIGKILL, the watchdog's abort) leaves the page cache to the kernel,
// which keeps the record; a power loss ends the pods it describes.
func (s *Store) Stage(k Kind, key string, v any) (durable func() error, err error) {
	if err := validKind(k); err != nil {
		return nil, err
	}
	name, err := fileName(key)
	if err != nil {
		return nil, fmt.Errorf("write %s record: %w", k.Name, err)
	}
	b, err := encode(k, key, v, s.now())
	if err != nil {
		return nil, fmt.Errorf("write %s record %s: %w", k.Name, key, err)
	}
	if err := s.ensureKindDir(k); err != nil {
		return nil, fmt.Errorf("write %s record %s: %w", k.Name, key, err)
	}
	path := filepath.Join(s.kindDir(k), name)
	if err := s.writeSpare(k, path, b); err != nil {
		return nil, fmt.Errorf("write %s record %s: %w", k.Name, key, err)
	}
	return func() error {
		s.Prepare(k) // the next Stage's file, made off the hot path
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed since: nothing to make durable
		}
		if err != nil {
			return fmt.Errorf("sync %s record %s: %w", k.Name, key, err)
		}
		err = f.Sync()
		f.Close()
		if err == nil {
			err = syncDir(filepath.Dir(path))
		}
		if err != nil {
			return fmt.Errorf("sync %s record %s: %w", k.Name, key, err)
		}
		return nil
	}, nil
}

// Prepare makes, ahead of time, the temporary file the next Stage of kind
// k writes: creating a file (an inode) costs about half a millisecond on
// ext4 here, ten times the write and rename, and Stage precedes a kill.
// Stage's durable makes the next one.
func (s *Store) Prepare(k Kind) {
	if validKind(k) != nil || s.ensureKindDir(k) != nil {
		return
	}
	s.mu.Lock()
	have := s.spare[k.Name] != nil
	s.mu.Unlock()
	if have {
		return
	}
	f, err := os.CreateTemp(s.kindDir(k), sparePrefix+"*")
	if err != nil {
		return // Stage makes its own
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		os.Remove(f.Name())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.spare[k.Name] != nil {
		f.Close()
		os.Remove(f.Name())
		return
	}
	s.spare[k.Name] = f
}

// writeSpare writes b as path through the prepared file of kind k when
// there is one, through a new temporary file otherwise; it syncs nothing.
func (s *Store) writeSpare(k Kind, path string, b []byte) error {
	s.mu.Lock()
	f := s.spare[k.Name]
	delete(s.spare, k.Name)
	s.mu.Unlock()
	if f != nil {
		_, err := f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), path)
		}
		if err == nil {
			return nil
		}
		os.Remove(f.Name()) // and write it the ordinary way
	}
	return writeRename(path, b, 0o600)
}

// writeRename writes b to a temporary file beside path and renames it over
// path, syncing nothing (Stage).
func writeRename(path string, b []byte, perm os.FileMode) error {
	return writeTemp(path, b, perm, false)
}

// writeTemp writes b to a temporary file beside path, fsynced when sync,
// and renames it over path. The temporary file is removed on failure.
func writeTemp(path string, b []byte, perm os.FileMode, sync bool) (retErr error) {
	f, err := os.CreateTemp(filepath.Dir(path), tmpPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Delete removes the record key of kind k, durably; a missing record is
// not an error.
func (s *Store) Delete(k Kind, key string) error {
	if err := validKind(k); err != nil {
		return err
	}
	name, err := fileName(key)
	if err != nil {
		return fmt.Errorf("remove %s record: %w", k.Name, err)
	}
	if err := os.Remove(filepath.Join(s.kindDir(k), name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("remove %s record %s: %w", k.Name, key, err)
	}
	if err := syncDir(s.kindDir(k)); err != nil {
		return fmt.Errorf("remove %s record %s: %w", k.Name, key, err)
	}
	return nil
}

// Record is one record read back, its payload not yet decoded.
type Record struct {
	Key     string
	Version int
	Written time.Time
	Data    json.RawMessage
}

// Get reads the record key of kind k. ok is false when there is none; an
// unreadable record is quarantined and returned as ErrCorrupt, one of a
// newer version as ErrUnsupported.
func (s *Store) Get(k Kind, key string) (Record, bool, error) {
	if err := validKind(k); err != nil {
		return Record{}, false, err
	}
	name, err := fileName(key)
	if err != nil {
		return Record{}, false, fmt.Errorf("read %s record: %w", k.Name, err)
	}
	return s.read(k, name)
}

func (s *Store) read(k Kind, name string) (Record, bool, error) {
	path := filepath.Join(s.kindDir(k), name)
	b, err := readBounded(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Record{}, false, nil
	}
	if errors.Is(err, ErrCorrupt) {
		return Record{}, false, s.quarantine(k, name, err)
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("read %s record %s: %w", k.Name, path, err)
	}
	key, ok := s.keyOfFile(k, name)
	if !ok {
		return Record{}, false, s.quarantine(k, name, fmt.Errorf("%w: not a record's file name, or a hashed name its key does not hash to", ErrCorrupt))
	}
	r, err := parse(b, k, key)
	if errors.Is(err, ErrUnsupported) {
		s.mu.Lock()
		seen := s.unsupported[k.Name+"/"+name]
		s.unsupported[k.Name+"/"+name] = true
		s.mu.Unlock()
		if !seen {
			s.log.Warn("state record of a newer nodeguard left in place, not read", "kind", k.Name, "file", path, "err", err)
		}
		return Record{}, false, err
	}
	if err != nil {
		return Record{}, false, s.quarantine(k, name, err)
	}
	return r, true, nil
}

// Parse decodes one record file's bytes as a record of kind k stored
// under key: the envelope, the checksum, the kind, key and version. It is
// what reading does before the payload is decoded (and what the fuzz
// target drives).
func Parse(b []byte, k Kind, key string) (Record, error) { return parse(b, k, key) }

func parse(b []byte, k Kind, key string) (Record, error) {
	var e envelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Record{}, fmt.Errorf("%w: envelope: %w", ErrCorrupt, err)
	}
	if dec.More() {
		return Record{}, fmt.Errorf("%w: data after the envelope", ErrCorrupt)
	}
	switch {
	case e.Format != Format:
		if e.Format > Format {
			return Record{}, fmt.Errorf("%w: envelope format %d, this agent reads %d", ErrUnsupported, e.Format, Format)
		}
		return Record{}, fmt.Errorf("%w: envelope format %d", ErrCorrupt, e.Format)
	case e.Kind != k.Name:
		return Record{}, fmt.Errorf("%w: kind %q in the %q directory", ErrCorrupt, e.Kind, k.Name)
	case e.Key != key:
		return Record{}, fmt.Errorf("%w: key %q in the file of %q", ErrCorrupt, e.Key, key)
	case e.Version < 1:
		return Record{}, fmt.Errorf("%w: version %d", ErrCorrupt, e.Version)
	case e.Version > k.Version:
		return Record{}, fmt.Errorf("%w: version %d, this agent reads up to %d", ErrUnsupported, e.Version, k.Version)
	case len(e.Data) == 0:
		return Record{}, fmt.Errorf("%w: no data", ErrCorrupt)
	}
	if sum := crc32.Checksum(e.Data, castagnoli); sum != e.Checksum {
		return Record{}, fmt.Errorf("%w: checksum %08x, data sums to %08x", ErrCorrupt, e.Checksum, sum)
	}
	return Record{Key: e.Key, Version: e.Version, Written: e.Written, Data: e.Data}, nil
}

// List reads every record of kind k, sorted by key. Unreadable records are
// quarantined and left out, records of a newer version left in place and
// out; only a failure to read the directory itself is an error. Temporary
// files of an interrupted write are removed.
func (s *Store) List(k Kind) ([]Record, error) {
	entries, err := s.entries(k)
	if err != nil || entries == nil {
		return nil, err
	}
	var out []Record
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			continue
		}
		if e.IsDir() {
			continue
		}
		r, ok, err := s.read(k, name)
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
			return nil, err
		}
		if ok {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Record) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// entries reads kind k's directory (nil when there is none yet), swept of
// a crashed agent's temporary files at its first reading.
func (s *Store) entries(k Kind) ([]os.DirEntry, error) {
	if err := validKind(k); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(s.kindDir(k))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s records: %w", k.Name, err)
	}
	s.sweep(k, entries)
	return entries, nil
}

// sweep removes, at the first listing of kind k (List or Keys), the
// temporary files of a crashed agent's writes among entries, its
// directory's; the file Prepare made for this agent is kept.
func (s *Store) sweep(k Kind, entries []os.DirEntry) {
	s.mu.Lock()
	first := !s.listed[k.Name]
	s.listed[k.Name] = true
	var own string
	if f := s.spare[k.Name]; f != nil {
		own = filepath.Base(f.Name())
	}
	s.mu.Unlock()
	if !first {
		return
	}
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, tmpPrefix) && name != own {
			os.Remove(filepath.Join(s.kindDir(k), name))
		}
	}
}

// Reject quarantines the record key of kind k whose payload the caller
// could not decode or validate, naming why. It returns the ErrCorrupt it
// logged.
func (s *Store) Reject(k Kind, key string, why error) error {
	name, err := fileName(key)
	if err != nil {
		return fmt.Errorf("quarantine %s record: %w", k.Name, err)
	}
	return s.quarantine(k, name, fmt.Errorf("%w: %w", ErrCorrupt, why))
}

// quarantine moves the file name of kind k beneath quarantine/<kind>/,
// stamped so that a second bad record of the same key keeps the first,
// logs it and counts it. It returns the error it was given (or the move's,
// joined), so that callers can return it as is.
func (s *Store) quarantine(k Kind, name string, why error) error {
	src := filepath.Join(s.kindDir(k), name)
	qdir := filepath.Join(s.dir, QuarantineDir, k.Name)
	dst := filepath.Join(qdir, fmt.Sprintf("%s.%d", name, s.now().UnixNano()))
	err := os.MkdirAll(qdir, 0o700)
	if err == nil {
		err = os.Rename(src, dst)
	}
	if err == nil {
		err = syncDir(s.kindDir(k))
	}
	s.quar.WithLabelValues(k.Name).Inc()
	if err != nil {
		s.log.Error("unreadable state record could not be moved aside; ignored", "kind", k.Name, "file", src, "reason", why, "err", err)
		return errors.Join(why, err)
	}
	s.log.Error("unreadable state record quarantined", "kind", k.Name, "file", src, "moved_to", dst, "err", why)
	return why
}

// Decode decodes r's payload strictly (unknown fields refused) into v.
func Decode(r Record, v any) error {
	dec := json.NewDecoder(bytes.NewReader(r.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", r.Key, err)
	}
	if dec.More() {
		return fmt.Errorf("decode %s: data after the value", r.Key)
	}
	return nil
}

// Validator is a payload that checks itself after decoding.
type Validator interface{ Validate() error }

// Entry is one record decoded.
type Entry[T any] struct {
	Key     string
	Version int
	Written time.Time
	Value   T
}

// ListOf reads every record of kind k and decodes each into a T (strict,
// then Validate when *T has it). A record that does not decode or validate
// is quarantined and left out.
func ListOf[T any](s *Store, k Kind) ([]Entry[T], error) {
	recs, err := s.List(k)
	if err != nil {
		return nil, err
	}
	out := make([]Entry[T], 0, len(recs))
	for _, r := range recs {
		v, err := decodeValid[T](r)
		if err != nil {
			s.Reject(k, r.Key, err)
			continue
		}
		out = append(out, Entry[T]{Key: r.Key, Version: r.Version, Written: r.Written, Value: v})
	}
	return out, nil
}

// GetOf reads the record key of kind k as a T; see Get and ListOf.
func GetOf[T any](s *Store, k Kind, key string) (T, bool, error) {
	var zero T
	r, ok, err := s.Get(k, key)
	if !ok || err != nil {
		return zero, false, err
	}
	v, err := decodeValid[T](r)
	if err != nil {
		return zero, false, s.Reject(k, key, err)
	}
	return v, true, nil
}

func decodeValid[T any](r Record) (T, error) {
	var v T
	if err := Decode(r, &v); err != nil {
		return v, err
	}
	if val, ok := any(&v).(Validator); ok {
		if err := val.Validate(); err != nil {
			return v, fmt.Errorf("validate %s: %w", r.Key, err)
		}
	}
	return v, nil
}

// WriteFileAtomic writes b to path durably: a temporary file in the same
// directory, written and fsynced, renamed over path, and the directory
// fsynced. After a crash path holds its old content or b.
func WriteFileAtomic(path string, b []byte, perm os.FileMode) error {
	if err := writeTemp(path, b, perm, true); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return nil, err
	}
	if n > maxRecord {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrCorrupt, maxRecord)
	}
	return buf.Bytes(), nil
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
