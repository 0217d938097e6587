package vmtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os/exec"
)

// ErrNoVmlinux reports a kernel image in which no compressed ELF vmlinux was
// found.
var ErrNoVmlinux = errors.New("no compressed ELF vmlinux found in kernel image")

// maxTriesPerMagic bounds how many occurrences of one compression magic are
// tried: the payload follows the setup code within the first few tens of KiB,
// and a magic seen by chance inside compressed data costs a failed
// decompression each.
const maxTriesPerMagic = 8

// decompressor is one compression format a bzImage payload may use.
type decompressor struct {
	name  string
	magic []byte
	// decompress returns what it could decompress from data, which may
	// carry trailing bytes after the stream (the bzImage's tail); an error
	// is returned only when nothing usable came out.
	decompress func(ctx context.Context, data []byte) ([]byte, error)
}

// decompressors are the formats Debian's kernels use (6.1 xz, 6.12 zstd;
// gzip for older and custom builds), in the order they are tried.
var decompressors = []decompressor{
	{"xz", []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}, cliDecompress("xz", "-dcq")},
	{"zstd", []byte{0x28, 0xb5, 0x2f, 0xfd}, cliDecompress("zstd", "-dcq")},
	{"gzip", []byte{0x1f, 0x8b, 0x08}, gunzip},
}

// ExtractVmlinux returns the uncompressed ELF vmlinux inside bzImage, the
// kernel's own extract-vmlinux approach: for each compression magic, try to
// decompress from every offset where it occurs and keep the first result
// that is a complete ELF file. xz and zstd are run through their command-line
// tools, gzip in process.
func ExtractVmlinux(ctx context.Context, bzImage []byte) ([]byte, string, error) {
	var tried []string
	for _, d := range decompressors {
		off, n := 0, 0
		for n < maxTriesPerMagic {
			i := bytes.Index(bzImage[off:], d.magic)
			if i < 0 {
				break
			}
			at := off + i
			off, n = at+1, n+1
			out, err := d.decompress(ctx, bzImage[at:])
			if err != nil {
				if ctx.Err() != nil {
					return nil, "", fmt.Errorf("extract vmlinux: %w", ctx.Err())
				}
				tried = append(tried, fmt.Sprintf("%s at %d: %v", d.name, at, err))
				continue
			}
			if err := checkELF(out); err != nil {
				tried = append(tried, fmt.Sprintf("%s at %d: %v", d.name, at, err))
				continue
			}
			return out, d.name, nil
		}
	}
	if len(tried) == 0 {
		return nil, "", fmt.Errorf("extract vmlinux: %w (no xz, zstd or gzip magic)", ErrNoVmlinux)
	}
	return nil, "", fmt.Errorf("extract vmlinux: %w (tried %q)", ErrNoVmlinux, tried)
}

// checkELF reports whether b is a whole ELF executable: the magic, a header
// that parses, and every loadable segment inside b.
func checkELF(b []byte) error {
	if !bytes.HasPrefix(b, []byte(elf.ELFMAG)) {
		return errors.New("output is not ELF")
	}
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("output is not a valid ELF file: %w", err)
	}
	defer f.Close()
	loads := 0
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		loads++
		if p.Off+p.Filesz > uint64(len(b)) {
			return fmt.Errorf("ELF output is truncated: segment at %d+%d past %d bytes", p.Off, p.Filesz, len(b))
		}
	}
	if loads == 0 {
		return errors.New("ELF output has no loadable segment")
	}
	return nil
}

// cliDecompress runs name with args, data on stdin. The tools exit non-zero
// on the bytes that follow the stream, so their status is not the verdict:
// checkELF is.
func cliDecompress(name string, args ...string) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, data []byte) ([]byte, error) {
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Stdin = bytes.NewReader(data)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if out.Len() == 0 {
			if err == nil {
				err = errors.New("no output")
			}
			return nil, fmt.Errorf("%s: %w: %s", name, err, bytes.TrimSpace(errb.Bytes()))
		}
		return out.Bytes(), nil
	}
}

// gunzip decompresses the one gzip member at the start of data.
func gunzip(_ context.Context, data []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	zr.Multistream(false)
	out, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	return out, nil
}
