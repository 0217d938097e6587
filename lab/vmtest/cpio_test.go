package vmtest

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// cpioEntry is one parsed newc entry.
type cpioEntry struct {
	name        string
	ino, mode   uint32
	nlink, size uint32
	data        string
}

// readCPIO parses concatenated newc archives the way the kernel's
// initramfs unpacker does, checking magic and 4-byte alignment.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	for off < len(b) {
		if off%4 != 0 {
			t.Fatalf("entry at %d is not 4-byte aligned", off)
		}
		if len(b)-off < 110 || string(b[off:off+6]) != "070701" {
			t.Fatalf("no newc header at %d: %q", off, b[off:min(len(b), off+6)])
		}
		field := func(i int) uint32 {
			v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
			if err != nil {
				t.Fatalf("header field %d at %d: %v", i, off, err)
			}
			return uint32(v)
		}
		e := cpioEntry{ino: field(0), mode: field(1), nlink: field(4), size: field(6)}
		namesize := int(field(11))
		nameStart := off + 110
		e.name = string(b[nameStart : nameStart+namesize-1])
		if b[nameStart+namesize-1] != 0 {
			t.Fatalf("name of %q is not NUL-terminated", e.name)
		}
		dataStart := (nameStart + namesize + 3) &^ 3
		e.data = string(b[dataStart : dataStart+int(e.size)])
		off = (dataStart + int(e.size) + 3) &^ 3
		out = append(out, e)
	}
	return out
}

func TestCPIOWriter(t *testing.T) {
	var buf bytes.Buffer
	c := NewCPIOWriter(&buf)
	steps := []error{
		c.File("/etc/passwd", 0o644, 5, strings.NewReader("root\n")),
		c.Symlink("bin/sh", "/bin/busybox"),
		c.Links([]string{"bin/busybox", "bin/sleep", "usr/bin/timeout"}, 0o755, 3, strings.NewReader("ELF")),
		c.Dir("tmp", 0o1777),
		c.File("a/../odd", 0o600, 0, strings.NewReader("")),
		c.Close(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	first := buf.Len()
	// A second archive appended to the first, as Run appends the per-run
	// part to the cached base.
	c2 := NewCPIOWriter(&buf)
	if err := c2.File("vmtest/run", 0o755, 2, strings.NewReader("x\n")); err != nil {
		t.Fatal(err)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	if first%4 != 0 {
		t.Fatalf("first archive is %d bytes, not 4-aligned", first)
	}

	var got []string
	inodes := map[string]uint32{}
	for _, e := range readCPIO(t, buf.Bytes()) {
		got = append(got, fmt.Sprintf("%s %o n%d %q", e.name, e.mode, e.nlink, e.data))
		inodes[e.name] = e.ino
	}
	want := []string{
		`etc 40755 n2 ""`,
		`etc/passwd 100644 n1 "root\n"`,
		`bin 40755 n2 ""`,
		`bin/sh 120777 n1 "/bin/busybox"`,
		`usr 40755 n2 ""`,
		`usr/bin 40755 n2 ""`,
		`bin/busybox 100755 n3 "ELF"`,
		`bin/sleep 100755 n3 ""`,
		`usr/bin/timeout 100755 n3 ""`,
		`tmp 41777 n2 ""`,
		`odd 100600 n1 ""`,
		`TRAILER!!! 0 n1 ""`,
		`vmtest 40755 n2 ""`,
		`vmtest/run 100755 n1 "x\n"`,
		`TRAILER!!! 0 n1 ""`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("archive:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if inodes["bin/busybox"] != inodes["bin/sleep"] || inodes["bin/sleep"] != inodes["usr/bin/timeout"] {
		t.Errorf("hard links do not share an inode: %v", inodes)
	}
	if inodes["bin/busybox"] == inodes["bin/sh"] {
		t.Errorf("the symlink shares the links' inode %d", inodes["bin/sh"])
	}
}

func TestCPIOWriterRejects(t *testing.T) {
	tests := []struct {
		name string
		do   func(c *CPIOWriter) error
	}{
		{"the root itself as a name", func(c *CPIOWriter) error { return c.File("/", 0o644, 0, strings.NewReader("")) }},
		{"a name with a NUL", func(c *CPIOWriter) error { return c.Symlink("a\x00b", "x") }},
		{"a file shorter than its size", func(c *CPIOWriter) error { return c.File("f", 0o644, 10, strings.NewReader("short")) }},
		{"hard links without a name", func(c *CPIOWriter) error { return c.Links(nil, 0o755, 0, strings.NewReader("")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(NewCPIOWriter(&bytes.Buffer{})); err == nil {
				t.Error("got no error")
			}
		})
	}
}
