package crienv

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"sort"
	"strings"
)

// mountsUnder returns the mount points in mountinfo data (the format of
// /proc/self/mountinfo) that are dir itself or beneath it, deepest first,
// then newest first: the order to unmount them in. dir must be clean and
// absolute.
func mountsUnder(data []byte, dir string) ([]string, error) {
	type mp struct {
		path  string
		order int
	}
	var found []mp
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		f := strings.Split(sc.Text(), " ")
		if len(f) < 5 {
			if sc.Text() == "" {
				continue
			}
			return nil, fmt.Errorf("parse mountinfo line %d: %d fields, want at least 5", n, len(f))
		}
		p, ok := unescapeOctal(f[4])
		if !ok || !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("parse mountinfo line %d: bad mount point %q", n, f[4])
		}
		if p == dir || strings.HasPrefix(p, dir+"/") {
			found = append(found, mp{p, n})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse mountinfo: %w", err)
	}
	sort.SliceStable(found, func(i, j int) bool {
		di, dj := strings.Count(found[i].path, "/"), strings.Count(found[j].path, "/")
		if di != dj {
			return di > dj
		}
		return found[i].order > found[j].order
	})
	out := make([]string, len(found))
	for i, m := range found {
		out[i] = m.path
	}
	return out, nil
}

// selfMountsUnder reads /proc/self/mountinfo and returns mountsUnder dir.
func selfMountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return mountsUnder(data, dir)
}

// unescapeOctal undoes the kernel's \ooo mangling of space, tab, newline
// and backslash in mountinfo paths.
func unescapeOctal(s string) (string, bool) {
	if !strings.Contains(s, `\`) {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", false
		}
		v := 0
		for _, c := range []byte(s[i+1 : i+4]) {
			if c < '0' || c > '7' {
				return "", false
			}
			v = v*8 + int(c-'0')
		}
		if v > 0xff {
			return "", false
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), true
}
