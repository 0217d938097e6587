package nodevm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The output disk: a small writable ext4 image made per run, the guest's
// third disk (vdc), which the lane script mounts read-write at OutMount;
// the checks write there what the host keeps (the OOM race's CSV, plot,
// report and agent log), and the runner copies its files out after the
// guest ended, without mounting it on the host.
const (
	// OutImageSize: the quick race writes ~1 MB, the full one a few
	// (most of it the agent's log); the image is sparse, so room costs
	// nothing until it is used.
	OutImageSize = 64 << 20
	// copyOutTimeout bounds debugfs reading the image (a fraction of a
	// second for a few MB).
	copyOutTimeout = 2 * time.Minute
	// lostFound is what mkfs.ext4 makes in every root: not the guest's.
	lostFound = "lost+found"
)

// MakeOutImage makes the empty output disk at image. It has no journal:
// debugfs reads an image as it lies and replays no journal, so metadata
// that a guest killed midway had committed to a journal and not yet
// written home would be lost; without one, the lane script's sync (and its
// umount) put everything where debugfs reads it.
func MakeOutImage(ctx context.Context, log *slog.Logger, image string) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := runLogged(ctx, mkfsTimeout, log, "mkfs.ext4", "", nil, "mkfs.ext4", "-q", "-F", "-L", OutLabel,
		"-O", "^has_journal", "-E", "lazy_itable_init=1", image, fmt.Sprintf("%dk", OutImageSize/1024)); err != nil {
		return fmt.Errorf("make the output disk: %w", err)
	}
	return nil
}

// CopyOut copies the files of the ext4 image to dir (made if missing) and
// returns their paths beneath it, sorted. Nothing is mounted: debugfs
// (`rdump / <stage>`) dumps the image into a fresh directory beside the
// image, and from there directories and regular files are copied beneath
// dir through os.Root, replacing files of the same name and keeping
// others. What the guest wrote is not trusted: symbolic links, devices,
// fifos and sockets are left out (and counted in the error when there are
// any), and nothing is written outside dir.
func CopyOut(ctx context.Context, image, dir string) ([]string, error) {
	stage, err := os.MkdirTemp(filepath.Dir(image), "out-")
	if err != nil {
		return nil, fmt.Errorf("copy the output disk out: %w", err)
	}
	defer os.RemoveAll(stage)
	if err := rdump(ctx, image, stage); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("copy the output disk out: %w", err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("copy the output disk out: %w", err)
	}
	defer r.Close()
	var files, skipped []string
	err = filepath.WalkDir(stage, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(stage, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ".":
			return nil
		case rel == lostFound && d.IsDir():
			return fs.SkipDir
		case d.IsDir():
			return r.MkdirAll(rel, 0o755)
		case d.Type().IsRegular():
			if err := copyFileInto(r, p, rel); err != nil {
				return err
			}
			files = append(files, rel)
			return nil
		}
		skipped = append(skipped, rel)
		return nil
	})
	if err != nil {
		return files, fmt.Errorf("copy the output disk out to %s: %w", dir, err)
	}
	slices.Sort(files)
	if len(skipped) > 0 {
		return files, fmt.Errorf("copy the output disk out to %s: %w: %s", dir, errNotRegular, strings.Join(skipped, ", "))
	}
	return files, nil
}

// errNotRegular is wrapped by CopyOut for what it left out.
var errNotRegular = errors.New("left out what is neither a directory nor a regular file")

// rdump runs `debugfs -R 'rdump / <stage>' <image>`. debugfs exits 0
// whatever happened: anything it prints besides its version banner is an
// error.
func rdump(ctx context.Context, image, stage string) error {
	if strings.ContainsAny(stage, " \t\n\"'\\") {
		return fmt.Errorf("copy the output disk out: the directory %q has characters debugfs's command line splits on", stage)
	}
	ctx, cancel := context.WithTimeout(ctx, copyOutTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "debugfs", "-R", "rdump / "+stage, image)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return fmt.Errorf("debugfs rdump %s: stopped after %s: %w", image, copyOutTimeout, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("debugfs rdump %s: %w: %s", image, err, bytes.TrimSpace(out))
	}
	var msgs []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !debugfsBanner(l) {
			msgs = append(msgs, l)
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("debugfs rdump %s: %s", image, strings.Join(msgs, "; "))
	}
	return nil
}

// debugfsBanner reports debugfs's first line, "debugfs 1.47.0 (5-Feb-2023)".
func debugfsBanner(l string) bool {
	f := strings.Fields(l)
	return len(f) == 3 && f[0] == "debugfs" && strings.HasPrefix(f[2], "(") && strings.HasSuffix(f[2], ")")
}

// copyFileInto copies the host file src to rel beneath r, replacing what
// is there, with mode 0644 (the guest's modes do not matter here).
func copyFileInto(r *os.Root, src, rel string) error {
	if err := r.MkdirAll(path.Dir(rel), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
