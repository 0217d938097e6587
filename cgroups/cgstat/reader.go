package cgstat

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/psi"
)

// Source names the directories one Reader reads.
type Source struct {
	// Memory is the cgroup's directory in the hierarchy that holds the
	// memory controller.
	Memory string
	// V1 says that Memory is a cgroup v1 memory cgroup; otherwise it is a
	// cgroup2 directory with the memory controller enabled.
	V1 bool
	// PSI is the cgroup2 directory whose memory.pressure is read: Memory
	// itself on cgroup2, the cgroup's directory in the cgroup2 hierarchy
	// on hybrid hosts, "" for none (pure v1).
	PSI string
}

// SourceFor picks the Source of one cgroup from its directories, as
// cgroups.Layout.ResolveMonitored and cgtest.Sandbox.Dirs return them: the
// directory whose hierarchy holds the memory controller, and the cgroup2
// one for PSI. It fails with ErrUnsupported when no directory is in a
// memory hierarchy.
func SourceFor(dirs []cgroups.Dir) (Source, error) {
	var src Source
	found := false
	for _, d := range dirs {
		if d.Hierarchy == nil {
			return Source{}, fmt.Errorf("pick memory statistics source of %s: directory without a hierarchy", d.Path)
		}
		if d.Hierarchy.Has("memory") {
			src.Memory, src.V1, found = d.Path, !d.Hierarchy.V2(), true
		}
		if d.Hierarchy.V2() {
			src.PSI = d.Path
		}
	}
	if !found {
		return Source{}, fmt.Errorf("pick memory statistics source: %w: none of %d directories is in the memory hierarchy", ErrUnsupported, len(dirs))
	}
	return src, nil
}

// The files a Reader keeps open, by role. The same role is served by a
// different file on v1 and on cgroup2; "" marks a role the version lacks.
const (
	fileUsage  = iota // memory.current | memory.usage_in_bytes
	fileStat          // memory.stat | memory.stat
	fileEvents        // memory.events | memory.failcnt
	fileLimit         // memory.max | memory.limit_in_bytes
	fileExtra         // memory.high | memory.oom_control
	fileMemsw         // - | memory.memsw.failcnt (with swap accounting)
	filePSI           // memory.pressure (cgroup2 directory)
	numFiles
)

var (
	namesV2 = [numFiles]string{"memory.current", "memory.stat", "memory.events", "memory.max", "memory.high", "", "memory.pressure"}
	namesV1 = [numFiles]string{"memory.usage_in_bytes", "memory.stat", "memory.failcnt", "memory.limit_in_bytes", "memory.oom_control", "memory.memsw.failcnt", "memory.pressure"}
)

// optionalFiles may be missing from an existing cgroup: memsw files exist
// only with swap accounting, pressure files only with PSI.
const optionalFiles = 1<<fileMemsw | 1<<filePSI

const (
	// initialBuf holds every file a Reader reads in one pread on current
	// kernels: memory.stat, the largest, is 1-2 KiB on 6.x (v1 and
	// cgroup2). Larger content grows the buffer once.
	initialBuf = 4 << 10
	// maxBuf bounds the growth: no memory cgroup file comes near it, so
	// content this large means something other than a cgroup file.
	maxBuf = 1 << 20
)

// cgFile is one kept-open file.
type cgFile struct {
	path string // directory + "/" + name, for errors
	name string
	fd   int  // -1 until opened
	skip bool // not read: no such role here, or an optional file that does not exist
}

// Reader reads one cgroup's memory statistics cheaply enough to run every
// tick for hundreds of cgroups: it opens the files it needs once, on the
// first Read, keeps them open, and re-reads each with one pread at offset 0
// (cgroupfs regenerates a file's content on every read at offset 0) into a
// buffer taken from a pool shared by every Reader for the call, so that a
// Read allocates nothing and 330 Readers do not keep 330 buffers.
//
// It holds six file descriptors from the first Read until Close (seven on
// v1 with swap accounting, one fewer without PSI). A Reader is not safe
// for concurrent use.
type Reader struct {
	src    Source
	files  [numFiles]cgFile
	buf    *[]byte // from bufPool during a Read or ReadHot, else nil
	opened bool
	closed bool
}

// NewReader returns a Reader of src. It touches nothing until the first
// Read; open it when the cgroup is discovered, since cgroup paths are
// recycled and the first Read opens whatever is at the path then.
func NewReader(src Source) *Reader {
	r := &Reader{src: src}
	names := &namesV2
	if src.V1 {
		names = &namesV1
	}
	for i := range r.files {
		dir := src.Memory
		if i == filePSI {
			dir = src.PSI
		}
		r.files[i] = cgFile{name: names[i], path: dir + "/" + names[i], fd: -1,
			skip: names[i] == "" || dir == ""}
	}
	return r
}

// Source returns the directories r reads.
func (r *Reader) Source() Source { return r.src }

// Read fills m with a new reading. It returns an error matching ErrGone
// when the cgroup was removed (the caller drops it and closes r), one
// matching ErrMalformed (a *ParseError) when a file does not parse, and one
// matching ErrUnsupported when a required file does not exist in an
// existing cgroup (a root cgroup, or cgroup2 without the memory controller
// enabled). On error, m holds a partial reading and must not be used.
func (r *Reader) Read(m *Memory) error {
	if r.closed {
		return fmt.Errorf("read memory statistics of %s: %w", r.src.Memory, fs.ErrClosed)
	}
	if !r.opened {
		if err := r.open(); err != nil {
			return err
		}
	}
	r.takeBuf()
	defer r.dropBuf()
	*m = Memory{High: Unlimited}
	if r.src.V1 {
		return r.readV1(m)
	}
	return r.readV2(m)
}

// bufPool holds the read buffers (*[]byte) of every Reader: a Reader
// keeps one only for the length of a call.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, initialBuf)
	return &b
}}

// pooledBuf bounds the buffers the pool keeps: a larger one (a file that
// outgrew initialBuf many times over) is left to the collector.
const pooledBuf = 64 << 10

func (r *Reader) takeBuf() { r.buf = bufPool.Get().(*[]byte) }

func (r *Reader) dropBuf() {
	if len(*r.buf) <= pooledBuf {
		bufPool.Put(r.buf)
	}
	r.buf = nil
}

// slowFields are the Fields that ReadHot carries over instead of reading.
const slowFields = FieldHigh | FieldEventsLow | FieldEventsHigh | FieldEventsOOM | FieldEventsOOMGroupKill | FieldUnderOOM

// ReadHot refreshes what moves under pressure (usage, memory.stat and
// memory.pressure: three files instead of five to seven) and keeps the
// limits and event counters of m from the last Read. It is for ticks
// between full reads; m must hold a full reading of this cgroup (Read
// first). Errors are Read's.
func (r *Reader) ReadHot(m *Memory) error {
	if r.closed {
		return fmt.Errorf("read memory statistics of %s: %w", r.src.Memory, fs.ErrClosed)
	}
	if !r.opened {
		return r.Read(m)
	}
	r.takeBuf()
	defer r.dropBuf()
	prev := *m
	*m = Memory{High: Unlimited}
	if err := r.readUsageStat(m); err != nil {
		return err
	}
	if err := r.readPSI(m); err != nil {
		return err
	}
	m.Limit, m.High, m.Events, m.UnderOOM = prev.Limit, prev.High, prev.Events, prev.UnderOOM
	m.Fields |= prev.Fields & slowFields
	return nil
}

// readUsageStat reads what moves under pressure: usage and memory.stat.
func (r *Reader) readUsageStat(m *Memory) error {
	b, err := r.read(fileUsage)
	if err != nil {
		return err
	}
	if m.Usage, err = parseSingle(b, r.files[fileUsage].path, false); err != nil {
		return err
	}
	if b, err = r.read(fileStat); err != nil {
		return err
	}
	if r.src.V1 {
		return parseMemoryStatV1(b, r.files[fileStat].path, m)
	}
	return parseMemoryStatV2(b, r.files[fileStat].path, m)
}

func (r *Reader) readV2(m *Memory) error {
	if err := r.readUsageStat(m); err != nil {
		return err
	}
	b, err := r.read(fileEvents)
	if err != nil {
		return err
	}
	if err = parseMemoryEventsV2(b, r.files[fileEvents].path, m); err != nil {
		return err
	}
	if b, err = r.read(fileLimit); err != nil {
		return err
	}
	if m.Limit, err = parseSingle(b, r.files[fileLimit].path, true); err != nil {
		return err
	}
	if b, err = r.read(fileExtra); err != nil {
		return err
	}
	if m.High, err = parseSingle(b, r.files[fileExtra].path, true); err != nil {
		return err
	}
	m.Fields |= FieldHigh
	return r.readPSI(m)
}

func (r *Reader) readV1(m *Memory) error {
	if err := r.readUsageStat(m); err != nil {
		return err
	}
	b, err := r.read(fileEvents)
	if err != nil {
		return err
	}
	if m.Events.Max, err = parseSingle(b, r.files[fileEvents].path, false); err != nil {
		return err
	}
	if !r.files[fileMemsw].skip {
		// With swap accounting the kernel charges memory+swap first, so
		// when both limits are equal (as runc sets them for pods without
		// swap) it is memsw that fails and counts.
		if b, err = r.read(fileMemsw); err != nil {
			return err
		}
		n, err := parseSingle(b, r.files[fileMemsw].path, false)
		if err != nil {
			return err
		}
		m.Events.Max += n
	}
	if b, err = r.read(fileLimit); err != nil {
		return err
	}
	if m.Limit, err = parseSingle(b, r.files[fileLimit].path, false); err != nil {
		return err
	}
	m.Limit = v1Limit(m.Limit)
	if b, err = r.read(fileExtra); err != nil {
		return err
	}
	if err = parseOOMControlV1(b, r.files[fileExtra].path, m); err != nil {
		return err
	}
	return r.readPSI(m)
}

func (r *Reader) readPSI(m *Memory) error {
	if r.files[filePSI].skip {
		return nil
	}
	b, err := r.pread(filePSI)
	if err == unix.EOPNOTSUPP {
		// PSI is switched off for this cgroup (cgroup.pressure 0, Linux
		// 6.1+): no PSI in this reading, and Fields says so.
		return nil
	}
	if err != nil {
		return r.readError(filePSI, err)
	}
	st, err := psi.Parse(b, r.files[filePSI].path)
	if err != nil {
		return malformedPSI(err)
	}
	m.PSI = st
	m.Fields |= FieldPSI
	return nil
}

// malformedPSI turns package psi's parse error into this package's, so that
// it matches ErrMalformed like every other malformed file here.
func malformedPSI(err error) error {
	var pe *psi.ParseError
	if errors.As(err, &pe) {
		return &ParseError{File: pe.File, Line: pe.Line, Msg: pe.Msg}
	}
	return err
}

// read re-reads file i from offset 0 into r.buf.
func (r *Reader) read(i int) ([]byte, error) {
	b, err := r.pread(i)
	if err != nil {
		return nil, r.readError(i, err)
	}
	return b, nil
}

// readError wraps an error of pread(i).
func (r *Reader) readError(i int, err error) error {
	return preadError(r.files[i].path, err)
}

// preadError wraps an error of preadWhole on the file at path.
func preadError(path string, err error) error {
	if err == unix.ENODEV {
		// kernfs answers ENODEV on an open file whose node was removed.
		return fmt.Errorf("read %s: %w: %w", path, ErrGone, err)
	}
	return fmt.Errorf("read %s: %w", path, err)
}

// pread reads file i whole from offset 0 into r.buf. Its errors are bare
// errnos, so that an expected one costs no allocation.
func (r *Reader) pread(i int) ([]byte, error) {
	return preadWhole(r.files[i].fd, r.buf)
}

// preadWhole reads the file fd whole with one pread at offset 0 into
// *buf, which it makes (initialBuf) or grows as needed and keeps for the
// next read. Its errors are bare errnos, so that an expected one costs no
// allocation.
func preadWhole(fd int, buf *[]byte) ([]byte, error) {
	if *buf == nil {
		*buf = make([]byte, initialBuf)
	}
	for {
		b := *buf
		n, err := unix.Pread(fd, b, 0)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return nil, err
		case n < len(b):
			return b[:n], nil
		case len(b) >= maxBuf:
			return nil, unix.EFBIG
		}
		// The buffer was filled: the content may be longer. Read it
		// again whole into a larger buffer, since the kernel regenerates
		// it at offset 0 and two partial reads need not agree.
		*buf = make([]byte, 2*len(b))
	}
}

// open opens every file, each directory through one descriptor so that all
// files of a directory come from the same cgroup even if its path is
// removed and recreated meanwhile. On error nothing stays open.
func (r *Reader) open() (retErr error) {
	if r.src.Memory == "" {
		return fmt.Errorf("open memory statistics: %w: the source names no memory directory", cgroups.ErrInvalidPath)
	}
	defer func() {
		if retErr != nil {
			r.closeFiles()
		}
	}()
	if err := r.openDir(r.src.Memory, fileUsage, fileMemsw); err != nil {
		return err
	}
	if err := r.openDir(r.src.PSI, filePSI, filePSI); err != nil {
		return err
	}
	r.opened = true
	return nil
}

// openDir opens the files first..last that are not skipped, which all live
// in dir. An optional file that does not exist is skipped from then on.
func (r *Reader) openDir(dir string, first, last int) error {
	need := false
	for i := first; i <= last; i++ {
		need = need || !r.files[i].skip
	}
	if !need {
		return nil
	}
	dfd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOENT || err == unix.ENODEV {
			return fmt.Errorf("open %s: %w: %w", dir, ErrGone, err)
		}
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	for i := first; i <= last; i++ {
		f := &r.files[i]
		if f.skip {
			continue
		}
		fd, err := openBeneath(dfd, f.name)
		if err == nil {
			f.fd = fd
			continue
		}
		if err != unix.ENOENT && err != unix.ENODEV {
			return fmt.Errorf("open %s: %w", f.path, err)
		}
		if !sameDirAt(dfd, dir) {
			return fmt.Errorf("open %s: %w: %w", f.path, ErrGone, err)
		}
		if optionalFiles&(1<<i) != 0 {
			// No swap accounting, or a kernel without PSI
			// (CONFIG_PSI=n, psi=0): read without it from now on;
			// Fields says so.
			f.skip = true
			continue
		}
		return fmt.Errorf("open %s: %w: %w", f.path, ErrUnsupported, err)
	}
	return nil
}

// openBeneath opens name read-only in the directory dfd, refusing to leave
// it or to follow symbolic links. It falls back to openat with O_NOFOLLOW
// on kernels without openat2 (before 5.6).
func openBeneath(dfd int, name string) (int, error) {
	how := unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	for {
		fd, err := unix.Openat2(dfd, name, &how)
		switch err {
		case unix.EINTR, unix.EAGAIN:
			continue // EAGAIN: a concurrent rename; retry as advised
		case unix.ENOSYS:
			return unix.Openat(dfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		}
		return fd, err
	}
}

// sameDirAt reports whether path still names the directory open as dfd.
// A removed cgroup directory is gone from its path (or replaced by a new
// one with another inode).
func sameDirAt(dfd int, path string) bool {
	var a, b unix.Stat_t
	if unix.Fstat(dfd, &a) != nil || unix.Stat(path, &b) != nil {
		return false
	}
	return a.Dev == b.Dev && a.Ino == b.Ino
}

// Close closes the files r keeps open. Read fails after Close; Close again
// does nothing.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.closeFiles()
}

func (r *Reader) closeFiles() error {
	var errs []error
	for i := range r.files {
		f := &r.files[i]
		if f.fd < 0 {
			continue
		}
		if err := unix.Close(f.fd); err != nil {
			errs = append(errs, &os.PathError{Op: "close", Path: f.path, Err: err})
		}
		f.fd = -1
	}
	r.opened = false
	return errors.Join(errs...)
}
