package mounts

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"time"
)

// Names the atomic writer uses in a volume directory. They all start with
// "..", which ValidatePayloadPath refuses as a payload path's first
// component, so a payload can never collide with them.
const (
	dataDirName    = "..data"
	dataTmpName    = "..data_tmp"
	linkTmpPrefix  = "..link_tmp_"
	tsLayout       = "..2006_01_02_15_04_05.000000000"
	tsNameAttempts = 100
)

// writeAtomic makes the directory dir hold exactly pl, so that a reader of
// any payload path sees either the previous complete payload or the new
// complete one, never a mix and never a missing file, as the kubelet's
// AtomicWriter means to (it removes the previous generation at once, so a
// reader whose path walk had just passed "..data" can get ENOENT; here
// that generation stays until the next write):
//
//  1. the payload is written into a new hidden generation directory
//     "..<timestamp>";
//  2. a symlink "..data_tmp" -> that generation is renamed over "..data"
//     (rename(2) replaces it atomically);
//  3. each top-level payload path gets a symlink "<name> -> ..data/<name>"
//     (made once: it points at whatever "..data" points at), and those of
//     paths no longer in the payload are removed;
//  4. the generations before the previous one (and any left by an
//     interrupted write) are removed; the previous one is kept for readers
//     that resolved "..data" just before the switch, until the next write.
//
// When "..data" already holds exactly pl (contents and modes), nothing is
// rewritten and no generation removed: only missing top-level links are
// restored. It reports whether
// a new generation was written. All work is done through an os.Root on dir,
// so nothing in the directory can redirect it outside.
func writeAtomic(dir string, pl payload, now time.Time) (changed bool, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return false, err
	}
	defer root.Close()

	old, err := root.Readlink(dataDirName)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		old = ""
	case err != nil:
		return false, err
	case !isGeneration(old):
		return false, fmt.Errorf("%w: %s points at %q, not a generation", ErrUnsafePath, dataDirName, old)
	}
	if old != "" {
		same, err := generationHolds(root, old, pl)
		if err != nil {
			return false, err
		}
		if same {
			return false, finishGeneration(root, old, pl, nil)
		}
	}

	gen, err := makeGeneration(root, now)
	if err != nil {
		return false, err
	}
	if err := writeGeneration(root, gen, pl); err != nil {
		return false, errors.Join(err, root.RemoveAll(gen))
	}
	if err := root.Remove(dataTmpName); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, errors.Join(err, root.RemoveAll(gen))
	}
	if err := root.Symlink(gen, dataTmpName); err != nil {
		return false, errors.Join(err, root.RemoveAll(gen))
	}
	if err := root.Rename(dataTmpName, dataDirName); err != nil {
		return false, errors.Join(err, root.Remove(dataTmpName), root.RemoveAll(gen))
	}
	return true, finishGeneration(root, gen, pl, map[string]bool{gen: true, old: true})
}

// isGeneration reports whether name is a generation directory's name.
func isGeneration(name string) bool {
	if !strings.HasPrefix(name, "..") || strings.Contains(name, "/") {
		return false
	}
	ts, _, _ := strings.Cut(name, "-")
	_, err := time.Parse(tsLayout, ts)
	return err == nil
}

// makeGeneration makes a new, empty generation directory named after now,
// with a "-N" suffix when that name is taken (a clock that did not move).
func makeGeneration(root *os.Root, now time.Time) (string, error) {
	base := now.UTC().Format(tsLayout)
	for i := range tsNameAttempts {
		name := base
		if i > 0 {
			name += "-" + strconv.Itoa(i)
		}
		err := root.Mkdir(name, payloadDirMode)
		if err == nil {
			return name, root.Chmod(name, payloadDirMode)
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("make generation directory %s: %w", base, fs.ErrExist)
}

// writeGeneration writes every payload file into the generation directory
// gen, with its mode set exactly (not through the umask).
func writeGeneration(root *os.Root, gen string, pl payload) error {
	for p, f := range pl {
		name := gen + "/" + p
		if d := path.Dir(p); d != "." {
			if err := root.MkdirAll(gen+"/"+d, payloadDirMode); err != nil {
				return err
			}
		}
		fh, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.mode)
		if err != nil {
			return err
		}
		_, err = fh.Write(f.data)
		if err == nil {
			err = fh.Chmod(f.mode)
		}
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// generationHolds reports whether the generation gen holds exactly the
// files of pl, with their contents and modes.
func generationHolds(root *os.Root, gen string, pl payload) (bool, error) {
	seen := 0
	err := fs.WalkDir(root.FS(), gen, func(p string, d fs.DirEntry, err error) error {
		if err != nil && p == gen && errors.Is(err, fs.ErrNotExist) {
			return errDiffers // "..data" dangles: write a new generation
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel := strings.TrimPrefix(p, gen+"/")
		want, ok := pl[rel]
		if !ok || !d.Type().IsRegular() {
			return errDiffers
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm() != want.mode || info.Size() != int64(len(want.data)) {
			return errDiffers
		}
		got, err := root.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want.data) {
			return errDiffers
		}
		seen++
		return nil
	})
	switch {
	case errors.Is(err, errDiffers):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read generation %s: %w", gen, err)
	}
	return seen == len(pl), nil
}

var errDiffers = errors.New("generation differs")

// finishGeneration makes the top-level links of pl and removes the links
// of top-level paths that are not in pl; with keep set, it also removes
// every generation not in keep.
func finishGeneration(root *os.Root, gen string, pl payload, keep map[string]bool) error {
	tops := make(map[string]bool, len(pl))
	for p := range pl {
		top, _, _ := strings.Cut(p, "/")
		tops[top] = true
	}
	for top := range tops {
		if err := ensureLink(root, top, dataDirName+"/"+top); err != nil {
			return err
		}
	}
	dir, err := root.Open(".")
	if err != nil {
		return err
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return fmt.Errorf("list volume directory: %w", err)
	}
	var errs []error
	for _, name := range names {
		switch {
		case name == gen || name == dataDirName || tops[name]:
		case isGeneration(name):
			if keep != nil && !keep[name] {
				errs = append(errs, root.RemoveAll(name))
			}
		case strings.HasPrefix(name, linkTmpPrefix) || name == dataTmpName:
			errs = append(errs, root.RemoveAll(name))
		default:
			// A stale top-level link: remove it only if it is one of ours.
			if target, err := root.Readlink(name); err == nil && strings.HasPrefix(target, dataDirName+"/") {
				errs = append(errs, root.Remove(name))
			}
		}
	}
	return errors.Join(errs...)
}

// ensureLink makes name a symlink to target, replacing (atomically, by
// rename) a symlink that points elsewhere. Anything else at name is an
// error: it is not the writer's to remove.
func ensureLink(root *os.Root, name, target string) error {
	got, err := root.Readlink(name)
	switch {
	case err == nil && got == target:
		return nil
	case err == nil:
		tmp := linkTmpPrefix + name
		if err := root.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := root.Symlink(target, tmp); err != nil {
			return err
		}
		return root.Rename(tmp, name)
	case errors.Is(err, fs.ErrNotExist):
		return root.Symlink(target, name)
	default:
		return fmt.Errorf("payload path %q: %w: something other than a link is in the way", name, ErrUnsafePath)
	}
}
