package psi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// SystemDir holds the system-wide pressure files.
const SystemDir = "/proc/pressure"

// Resource names a pressure file: /proc/pressure/<resource>, or
// <resource>.pressure in a cgroup2 directory.
type Resource string

// The resources the kernel reports pressure for.
const (
	CPU    Resource = "cpu"
	Memory Resource = "memory"
	IO     Resource = "io"
	// IRQ needs Linux 6.1 with CONFIG_IRQ_TIME_ACCOUNTING and has only a
	// "full" line.
	IRQ Resource = "irq"
)

// Resources returns every Resource, in a fixed order.
func Resources() []Resource { return []Resource{CPU, Memory, IO, IRQ} }

// CgroupFile returns the name of r's pressure file in a cgroup2 directory,
// e.g. "memory.pressure".
func (r Resource) CgroupFile() string { return string(r) + ".pressure" }

// bufSize is the read buffer of a File. A pressure file has at most two
// lines of at most 72 bytes ("full avg10=100.00 avg60=100.00
// avg300=100.00 total=" and 20 digits); content that fills the buffer is
// rejected as malformed rather than parsed truncated.
const bufSize = 512

// File is an open pressure file that is re-read in place: procfs and
// cgroupfs regenerate the content on every read at offset 0, so one pread
// into a buffer the File owns replaces open, read and close, and allocates
// nothing (BenchmarkFileRead against BenchmarkOpenReadClose; the figures
// are in docs/benchmarks.md). A File is not safe for concurrent use.
type File struct {
	f    *os.File
	rc   syscall.RawConn
	name string
	// systemCPU marks /proc/pressure/cpu, whose "full" line is
	// undefined (always zero) and dropped.
	systemCPU bool

	// State of the read in progress, kept here so that readFn, bound
	// once in OpenFile, needs no closure allocation per Read.
	readFn func(fd uintptr) bool
	n      int
	err    error
	buf    [bufSize]byte
}

// OpenFile opens the pressure file at path (a /proc/pressure file or a
// cgroup2 *.pressure file) for reading. A missing file, or PSI disabled,
// gives an error matching ErrUnsupported. The system-wide cpu file opened
// through OpenFile keeps its all-zero "full" line; OpenSystem drops it.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, openErr(path, err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	pf := &File{f: f, rc: rc, name: path}
	pf.readFn = pf.pread
	return pf, nil
}

// OpenSystem opens dir/r, normally /proc/pressure/<r>. For CPU it drops the
// "full" line, which the kernel reports as zeros at system level.
func OpenSystem(dir string, r Resource) (*File, error) {
	f, err := OpenFile(filepath.Join(dir, string(r)))
	if err != nil {
		return nil, err
	}
	f.systemCPU = r == CPU
	return f, nil
}

// Name returns the path the File was opened with.
func (f *File) Name() string { return f.name }

// Read reads and parses the file's current content. It does not allocate
// unless it fails. A cgroup removed since OpenFile gives an error matching
// ErrGone.
func (f *File) Read() (Stats, error) {
	if f.f == nil {
		return Stats{}, fmt.Errorf("read %s: %w", f.name, ErrClosed)
	}
	f.n, f.err = 0, nil
	if err := f.rc.Read(f.readFn); err != nil {
		return Stats{}, fmt.Errorf("read %s: %w", f.name, err)
	}
	if f.err != nil {
		return Stats{}, readErr(f.name, f.err)
	}
	if f.n == len(f.buf) {
		return Stats{}, &ParseError{File: f.name, Msg: fmt.Sprintf("longer than %d bytes", len(f.buf))}
	}
	s, err := Parse(f.buf[:f.n], f.name)
	if err != nil {
		return Stats{}, err
	}
	if f.systemCPU {
		s.Full, s.HasFull = Line{}, false
	}
	return s, nil
}

// pread is the RawConn callback of Read: one pread at offset 0, retried
// on EINTR.
func (f *File) pread(fd uintptr) bool {
	for {
		n, err := unix.Pread(int(fd), f.buf[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			// cgroupfs files are pollable, so os.File made the fd
			// non-blocking; they never return EAGAIN, but if one
			// did, RawConn waits for readiness and calls again.
			return false
		}
		f.n, f.err = n, err
		return true
	}
}

// Close closes the file. Further Reads fail with ErrClosed.
func (f *File) Close() error {
	if f.f == nil {
		return nil
	}
	err := f.f.Close()
	f.f = nil
	if err != nil {
		return fmt.Errorf("close %s: %w", f.name, err)
	}
	return nil
}

// ReadSystem reads every system-wide pressure file in dir (normally
// SystemDir). The first map holds the resources that were read, the second
// the error of each that was not: one matching ErrUnsupported for a missing
// file (irq on most kernels), a *ParseError for malformed content. No
// resource is in both; together they hold all of Resources(). The cpu "full"
// line is dropped as in OpenSystem.
func ReadSystem(dir string) (map[Resource]Stats, map[Resource]error) {
	rs := Resources()
	stats := make(map[Resource]Stats, len(rs))
	errs := make(map[Resource]error)
	for _, r := range rs {
		name := filepath.Join(dir, string(r))
		b, err := os.ReadFile(name)
		if err != nil {
			errs[r] = readErr(name, err)
			continue
		}
		s, err := Parse(b, name)
		if err != nil {
			errs[r] = err
			continue
		}
		if r == CPU {
			s.Full, s.HasFull = Line{}, false
		}
		stats[r] = s
	}
	return stats, errs
}

// unsupported reports whether err means "no PSI here": ENOENT for a missing
// file, EOPNOTSUPP for PSI compiled in but disabled.
func unsupported(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EOPNOTSUPP)
}

// openErr wraps an error from opening a pressure file.
func openErr(name string, err error) error {
	if unsupported(err) {
		return fmt.Errorf("open %s: %w: %w", name, ErrUnsupported, err)
	}
	return fmt.Errorf("open %s: %w", name, err)
}

// readErr wraps an error from reading a pressure file. ENODEV is what
// cgroupfs answers once the cgroup has been removed.
func readErr(name string, err error) error {
	switch {
	case unsupported(err):
		return fmt.Errorf("read %s: %w: %w", name, ErrUnsupported, err)
	case errors.Is(err, unix.ENODEV):
		return fmt.Errorf("read %s: %w: %w", name, ErrGone, err)
	}
	return fmt.Errorf("read %s: %w", name, err)
}
