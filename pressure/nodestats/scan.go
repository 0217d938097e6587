package nodestats

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// lines iterates over the newline-separated lines of a kernel text file
// without allocating. A final line without a newline is still a line.
type lines struct {
	rest []byte
	n    int // number of the line last returned, 1-based
}

// next returns the next line without its newline, and false at the end.
func (l *lines) next() ([]byte, bool) {
	if len(l.rest) == 0 {
		return nil, false
	}
	l.n++
	i := bytes.IndexByte(l.rest, '\n')
	if i < 0 {
		line := l.rest
		l.rest = nil
		return line, true
	}
	line := l.rest[:i]
	l.rest = l.rest[i+1:]
	return line, true
}

// splitFlat splits a line of a flat-keyed file ("key value", one space, as
// in /proc/vmstat and memory.stat) into its key and numeric value.
func splitFlat(line []byte) (key []byte, v uint64, ok bool) {
	i := bytes.IndexByte(line, ' ')
	if i <= 0 {
		return nil, 0, false
	}
	v, ok = cgstat.ParseUint(line[i+1:])
	return line[:i], v, ok
}

// readKernelFile reads a whole kernel file. A missing file is
// ErrUnsupported (the kernel or the mount does not provide it); other
// failures keep their cause.
func readKernelFile(name string) ([]byte, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, readError(name, err)
	}
	return b, nil
}

// readError wraps a failure to open or read name.
func readError(name string, err error) error {
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("read %s: %w: %w", name, ErrUnsupported, err)
	}
	return fmt.Errorf("read %s: %w", name, err)
}

// readSingleUint reads a kernel file holding one unsigned decimal, such as
// /proc/sys/kernel/pid_max.
func readSingleUint(name string) (uint64, error) {
	b, err := readKernelFile(name)
	if err != nil {
		return 0, err
	}
	v, ok := cgstat.ParseUint(bytes.TrimSuffix(b, []byte("\n")))
	if !ok {
		return 0, &ParseError{File: name, Line: 1, Msg: fmt.Sprintf("not an unsigned decimal number: %q", bytes.TrimSpace(b))}
	}
	return v, nil
}
