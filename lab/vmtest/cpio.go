package vmtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// cpioTrailer names the entry that ends a newc archive.
const cpioTrailer = "TRAILER!!!"

// Mode bits of a newc header (the kernel's S_IF* values).
const (
	cpioModeDir     = 0o040000
	cpioModeRegular = 0o100000
	cpioModeSymlink = 0o120000
)

// CPIOWriter writes a cpio archive in the "newc" format (SVR4 without
// checksums, magic 070701), the one the kernel unpacks as an initramfs.
// Entries belong to root; inode numbers are assigned in order. Paths are
// written without a leading slash. Close writes the trailer; several closed
// archives may be concatenated and the kernel unpacks them in order.
type CPIOWriter struct {
	w     *bufio.Writer
	ino   uint32
	off   int64
	err   error
	dirs  map[string]bool
	close bool
}

// NewCPIOWriter returns a writer that writes the archive to w.
func NewCPIOWriter(w io.Writer) *CPIOWriter {
	return &CPIOWriter{w: bufio.NewWriterSize(w, 1<<16), ino: 1, dirs: map[string]bool{"": true, ".": true}}
}

// Dir adds a directory and, first, any of its parents not yet added.
func (c *CPIOWriter) Dir(name string, perm uint32) error {
	name, err := cleanArchivePath(name)
	if err != nil {
		return err
	}
	if c.dirs[name] {
		return nil
	}
	if err := c.parents(name); err != nil {
		return err
	}
	c.dirs[name] = true
	return c.entry(name, cpioModeDir|perm&0o7777, 2, 0, nil)
}

// File adds a regular file of size bytes read from r, creating missing
// parent directories with mode 0755.
func (c *CPIOWriter) File(name string, perm uint32, size int64, r io.Reader) error {
	name, err := cleanArchivePath(name)
	if err != nil {
		return err
	}
	if err := c.parents(name); err != nil {
		return err
	}
	return c.entry(name, cpioModeRegular|perm&0o7777, 1, size, r)
}

// Links adds one regular file of size bytes read from r under every name in
// names, as hard links to one inode (so /proc/PID/exe of a process started
// through any name shows that name). The data goes with the first name.
func (c *CPIOWriter) Links(names []string, perm uint32, size int64, r io.Reader) error {
	if len(names) == 0 {
		return errors.New("cpio hard links: no names")
	}
	clean := make([]string, len(names))
	for i, n := range names {
		n, err := cleanArchivePath(n)
		if err != nil {
			return err
		}
		if err := c.parents(n); err != nil {
			return err
		}
		clean[i] = n
	}
	ino := c.ino
	for i, n := range clean {
		c.ino = ino // every name shares the first name's inode
		var body io.Reader
		sz := int64(0)
		if i == 0 {
			body, sz = r, size
		}
		if err := c.entry(n, cpioModeRegular|perm&0o7777, uint32(len(clean)), sz, body); err != nil {
			return err
		}
	}
	return nil
}

// Symlink adds a symbolic link name pointing at target.
func (c *CPIOWriter) Symlink(name, target string) error {
	name, err := cleanArchivePath(name)
	if err != nil {
		return err
	}
	if err := c.parents(name); err != nil {
		return err
	}
	return c.entry(name, cpioModeSymlink|0o777, 1, int64(len(target)), strings.NewReader(target))
}

// Close writes the trailer and flushes. It does not close the underlying
// writer.
func (c *CPIOWriter) Close() error {
	if c.close {
		return c.err
	}
	c.close = true
	if err := c.entry(cpioTrailer, 0, 1, 0, nil); err != nil {
		return err
	}
	if err := c.w.Flush(); err != nil {
		c.err = fmt.Errorf("write cpio archive: %w", err)
	}
	return c.err
}

func (c *CPIOWriter) parents(name string) error {
	if d := path.Dir(name); !c.dirs[d] {
		return c.Dir(d, 0o755)
	}
	return nil
}

func (c *CPIOWriter) entry(name string, mode uint32, nlink uint32, size int64, r io.Reader) error {
	if c.err != nil {
		return c.err
	}
	if size < 0 || size > 0xffffffff {
		c.err = fmt.Errorf("write cpio entry %s: size %d does not fit a newc header", name, size)
		return c.err
	}
	ino := c.ino
	c.ino++
	if name == cpioTrailer {
		ino = 0
	}
	// magic, ino, mode, uid, gid, nlink, mtime, filesize, devmajor,
	// devminor, rdevmajor, rdevminor, namesize (with NUL), check.
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name))
	c.write([]byte{0})
	c.pad()
	if r != nil {
		n, err := io.CopyN(c.w, r, size)
		c.off += n
		if err != nil && c.err == nil {
			c.err = fmt.Errorf("write cpio entry %s: %w", name, err)
		}
	}
	c.pad()
	return c.err
}

func (c *CPIOWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.off += int64(n)
	if err != nil {
		c.err = fmt.Errorf("write cpio archive: %w", err)
	}
}

// pad aligns the archive to 4 bytes, as newc requires after the name and
// after the data.
func (c *CPIOWriter) pad() {
	if n := c.off % 4; n != 0 {
		c.write(make([]byte, 4-n))
	}
}

// cleanArchivePath returns name as a clean relative path, rejecting ones that
// climb out of the archive's root.
func cleanArchivePath(name string) (string, error) {
	p := path.Clean("/" + name)
	if p == "/" || strings.Contains(name, "\x00") {
		return "", fmt.Errorf("cpio entry name %q is not a path below the root", name)
	}
	return p[1:], nil
}
