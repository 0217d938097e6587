package cgroups

import (
	"bufio"
	"bytes"
	"strings"
)

// mountEntry is the part of one /proc/<pid>/mountinfo line that discovery
// needs.
type mountEntry struct {
	root       string   // field 4: the mount's root within its filesystem
	mountPoint string   // field 5, unescaped
	fsType     string   // first field after the "-" separator
	superOpts  []string // third field after the separator, split on ","
}

// parseMountinfo parses the mountinfo format described in proc(5). name is
// the file's path, used in errors. Every line must be well formed: a
// malformed line is an error, even if it is not a cgroup mount, because it
// means the format is not what this parser believes.
func parseMountinfo(data []byte, name string) ([]mountEntry, error) {
	var out []mountEntry
	err := eachLine(data, name, func(n int, line string) error {
		// Split on single spaces, not runs of them: the source field may
		// be empty, and collapsing would shift the fields after it.
		f := strings.Split(line, " ")
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 {
			return &ParseError{File: name, Line: n, Msg: `no "-" separator after the sixth field`}
		}
		if len(f) != sep+4 {
			return &ParseError{File: name, Line: n, Msg: "want 3 fields after the separator, have " + itoa(len(f)-sep-1)}
		}
		root, ok := unescapeOctal(f[3])
		fsType := ""
		if sep+1 < len(f) {
			fsType = f[sep+1]
		}
		// Roots are paths, except for pseudo filesystems whose root names
		// an object: a bind-mounted namespace file (nsfs) reads
		// "net:[4026532246]". Only cgroup roots matter here.
		if !ok || (!strings.HasPrefix(root, "/") && (fsType == "cgroup" || fsType == "cgroup2")) {
			return &ParseError{File: name, Line: n, Msg: "bad root " + quote(f[3])}
		}
		mp, ok := unescapeOctal(f[4])
		if !ok || !strings.HasPrefix(mp, "/") {
			return &ParseError{File: name, Line: n, Msg: "bad mount point " + quote(f[4])}
		}
		if f[sep+1] == "" {
			return &ParseError{File: name, Line: n, Msg: "empty filesystem type"}
		}
		out = append(out, mountEntry{
			root:       root,
			mountPoint: mp,
			fsType:     f[sep+1],
			superOpts:  strings.Split(f[sep+3], ","),
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// unescapeOctal undoes the kernel's mangling of space, tab, newline and
// backslash as \ooo. It reports false for a backslash not followed by three
// octal digits.
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

// MountPoints parses mountinfo data (the format of /proc/self/mountinfo,
// named name in errors) and returns every mount point, in file order. It
// is the one mountinfo parser of the project: cgroup discovery uses the
// same lines, the test environment finds its own mounts with it.
func MountPoints(data []byte, name string) ([]string, error) {
	entries, err := parseMountinfo(data, name)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.mountPoint
	}
	return out, nil
}

// eachLine calls fn with every non-empty line of the host file data and
// its 1-based number, and stops at fn's first error. name is the file's
// path, for the error of a line too long to scan (over 1 MiB).
func eachLine(data []byte, name string, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		if line := sc.Text(); line != "" {
			if err := fn(n, line); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return &ParseError{File: name, Line: n + 1, Msg: err.Error()}
	}
	return nil
}
