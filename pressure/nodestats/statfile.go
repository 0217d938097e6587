package nodestats

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// maxStatFileSize bounds the buffer a statFile grows to. /proc/meminfo is
// about 1.5 KiB and /proc/vmstat about 5 KiB on Linux 6.x; 1 MiB means
// "something is wrong" long before it means "memory".
const maxStatFileSize = 1 << 20

// statFile re-reads one small kernel text file through a descriptor kept
// open. Each read starts with a pread at offset 0, which makes seq_file
// restart the file from its first record, and continues with preads at the
// offset reached, which seq_file serves from the next record (its read_pos
// matches), exactly as for sequential read(2): lines are never torn, and
// values are as consistent as any reader of the file gets. seq_file hands
// out at most a page per call for multi-record files such as /proc/vmstat,
// so a read costs two or three system calls and, once the buffer has grown
// to fit, no allocation. Regular fixture files behave the same way.
//
// A statFile is not safe for concurrent use.
type statFile struct {
	name string
	f    *os.File
	buf  []byte
}

// openStatFile opens name with a first buffer of size bytes.
func openStatFile(name string, size int) (*statFile, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, readError(name, err)
	}
	return &statFile{name: name, f: f, buf: make([]byte, size)}, nil
}

// read returns the file's current content. The slice is valid until the
// next read. When the content fills the buffer it may have been cut, so the
// buffer doubles and the file is read again from offset 0: the bytes
// returned always come from one pass over the file.
func (s *statFile) read() ([]byte, error) {
	for {
		n, err := s.f.ReadAt(s.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read %s: %w", s.name, err)
		}
		if n < len(s.buf) {
			return s.buf[:n], nil
		}
		if len(s.buf) >= maxStatFileSize {
			return nil, &ParseError{File: s.name, Msg: fmt.Sprintf("larger than %d bytes", maxStatFileSize)}
		}
		s.buf = make([]byte, 2*len(s.buf))
	}
}

// close closes the descriptor.
func (s *statFile) close() error {
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", s.name, err)
	}
	return nil
}
