package vmtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"os/exec"
	"testing"
)

// fakeVmlinux returns a minimal ELF64 executable: a header, one PT_LOAD
// program header, and payload bytes that the segment covers.
func fakeVmlinux(payload int) []byte {
	const ehsize, phsize = 64, 56
	b := make([]byte, ehsize+phsize+payload)
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1}) // 64-bit, little-endian, v1
	le := binary.LittleEndian
	le.PutUint16(b[16:], 2)      // ET_EXEC
	le.PutUint16(b[18:], 62)     // EM_X86_64
	le.PutUint32(b[20:], 1)      // EV_CURRENT
	le.PutUint64(b[32:], ehsize) // e_phoff
	le.PutUint16(b[52:], ehsize) // e_ehsize
	le.PutUint16(b[54:], phsize) // e_phentsize
	le.PutUint16(b[56:], 1)      // e_phnum
	ph := b[ehsize:]
	le.PutUint32(ph[0:], 1)                // PT_LOAD
	le.PutUint32(ph[4:], 5)                // R+X
	le.PutUint64(ph[8:], ehsize+phsize)    // p_offset
	le.PutUint64(ph[32:], uint64(payload)) // p_filesz
	le.PutUint64(ph[40:], uint64(payload)) // p_memsz
	for i := range payload {
		b[ehsize+phsize+i] = byte(i * 7)
	}
	return b
}

// bzImage wraps a compressed payload the way a bzImage does: setup code
// before, a trailer after.
func bzImage(compressed []byte) []byte {
	setup := bytes.Repeat([]byte{0x90, 0x1f, 0xfd, 0x28}, 4096) // near-misses of every magic
	return append(append(setup, compressed...), bytes.Repeat([]byte{0xAA}, 512)...)
}

func compressCLI(t *testing.T, name string, data []byte, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed (vmrun installs it when it runs)", name)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

func TestExtractVmlinux(t *testing.T) {
	elf := fakeVmlinux(1 << 16)
	tests := []struct {
		name     string
		compress func(t *testing.T) []byte
		want     string
	}{
		{"gzip, as older Debian kernels", func(t *testing.T) []byte {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(elf)
			zw.Close()
			return b.Bytes()
		}, "gzip"},
		{"xz, as Debian 12's 6.1", func(t *testing.T) []byte {
			return compressCLI(t, "xz", elf, "-c", "--check=crc32")
		}, "xz"},
		{"zstd, as Debian's 6.12", func(t *testing.T) []byte {
			return compressCLI(t, "zstd", elf, "-c", "-q")
		}, "zstd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, format, err := ExtractVmlinux(context.Background(), bzImage(tt.compress(t)))
			if err != nil {
				t.Fatal(err)
			}
			if format != tt.want {
				t.Errorf("format %q, want %q", format, tt.want)
			}
			if !bytes.Equal(got, elf) {
				t.Errorf("extracted %d bytes that differ from the %d-byte ELF", len(got), len(elf))
			}
		})
	}
}

func TestExtractVmlinuxRejects(t *testing.T) {
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	truncated := fakeVmlinux(4096)[:2000]
	tests := []struct {
		name  string
		image []byte
	}{
		{"an image without any compression magic", bytes.Repeat([]byte{1, 2, 3}, 1000)},
		{"a compressed payload that is not ELF", bzImage(gz([]byte("not a kernel")))},
		{"a compressed ELF that is truncated", bzImage(gz(truncated))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := ExtractVmlinux(context.Background(), tt.image); !errors.Is(err, ErrNoVmlinux) {
				t.Errorf("err = %v, want ErrNoVmlinux", err)
			}
		})
	}
}
