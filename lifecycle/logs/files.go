package logs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

const (
	// stampFormat names a rotated file: the kubelet's "20060102-150405"
	// plus microseconds, so that rotations less than a second apart (a
	// short check interval) get distinct names that sort as they happened.
	stampFormat = "20060102-150405.000000"
	// gzSuffix ends a compressed rotated file.
	gzSuffix = ".gz"
	// tmpSuffix ends a file being compressed; a crash leaves it behind and
	// the next rotation removes it.
	tmpSuffix = ".tmp"
)

// rotatedFile is one rotated file of a live log.
type rotatedFile struct {
	path       string
	stamp      string // sorts as the files were rotated
	compressed bool
}

// rotated lists the rotated files of the live log path, oldest first. A
// missing directory is no file.
func rotated(path string) ([]rotatedFile, error) {
	dir, base := filepath.Split(path)
	entries, err := os.ReadDir(filepath.Clean(dir))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list rotated logs of %s: %w", path, err)
	}
	var files []rotatedFile
	for _, e := range entries {
		name, ok := strings.CutPrefix(e.Name(), base+".")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		f := rotatedFile{path: filepath.Join(dir, e.Name())}
		name, f.compressed = strings.CutSuffix(name, gzSuffix)
		if _, err := time.Parse(stampFormat, name); err != nil {
			continue // a .tmp, or not ours
		}
		f.stamp = name
		files = append(files, f)
	}
	slices.SortFunc(files, func(a, b rotatedFile) int { return strings.Compare(a.stamp, b.stamp) })
	return files, nil
}

// tmpFiles lists the leftovers of interrupted compressions of path's
// rotated files.
func tmpFiles(path string) ([]string, error) {
	m, err := filepath.Glob(globEscape(path) + ".*" + tmpSuffix)
	if err != nil {
		return nil, fmt.Errorf("list temporary logs of %s: %w", path, err)
	}
	return m, nil
}

// globEscape quotes the glob metacharacters of a path.
func globEscape(p string) string {
	var b strings.Builder
	for _, r := range p {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
