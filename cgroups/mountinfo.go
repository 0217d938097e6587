package cgroups

import (
	"bufio"
	"bytes"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// mountEntry is the part of one /proc/<pid>/mountinfo line that discovery
// needs.
type mountEntry struct {
	root       string   // field 4: the mount's root within its filesystem
	mountPoint string   // field 5, unescaped
	fsType     string   // first field after the "-" separator
	superOpts  []string // third field after the separator, split on ","
}

// parseMountinfo parses the mountinfo format described in proc(5) with
// github.com/moby/sys/mountinfo, one line at a time so that an error names
// its line. name is the file's path, used in errors. Every line must be
// well formed: a malformed line is an error, even if it is not a cgroup
// mount, because it means the format is not what discovery believes. On
// top of the library's checks, a mount point must be absolute, the
// filesystem type must not be empty, and a cgroup mount's root must be a
// path (other pseudo filesystems name an object there: a bind-mounted
// namespace file (nsfs) reads "net:[4026532246]").
func parseMountinfo(data []byte, name string) ([]mountEntry, error) {
	var out []mountEntry
	err := eachLine(data, name, func(n int, line string) error {
		infos, err := mountinfo.GetMountsFromReader(strings.NewReader(line), nil)
		if err != nil {
			return &ParseError{File: name, Line: n, Msg: err.Error()}
		}
		if len(infos) != 1 {
			return &ParseError{File: name, Line: n, Msg: "want one mount, have " + itoa(len(infos))}
		}
		mi := infos[0]
		if mi.FSType == "" {
			return &ParseError{File: name, Line: n, Msg: "empty filesystem type"}
		}
		if (mi.FSType == "cgroup" || mi.FSType == "cgroup2") && !strings.HasPrefix(mi.Root, "/") {
			return &ParseError{File: name, Line: n, Msg: "bad root " + quote(mi.Root)}
		}
		if !strings.HasPrefix(mi.Mountpoint, "/") {
			return &ParseError{File: name, Line: n, Msg: "bad mount point " + quote(mi.Mountpoint)}
		}
		out = append(out, mountEntry{
			root:       mi.Root,
			mountPoint: mi.Mountpoint,
			fsType:     mi.FSType,
			superOpts:  strings.Split(mi.VFSOptions, ","),
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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
