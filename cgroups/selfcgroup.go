package cgroups

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// membership is one line of /proc/<pid>/cgroup: the process's cgroup in one
// hierarchy.
type membership struct {
	id          uint32   // hierarchy id; 0 is the cgroup2 hierarchy
	controllers []string // v1 controllers (and "name=x"); empty for cgroup2
	path        string   // the cgroup's path within the hierarchy
}

// parseSelfCgroup parses the /proc/<pid>/cgroup format described in
// cgroups(7). name is the file's path, used in errors.
func parseSelfCgroup(data []byte, name string) ([]membership, error) {
	var out []membership
	seen := make(map[uint32]bool)
	err := eachLine(data, name, func(n int, line string) error {
		// The path may itself contain ':', so split at most twice.
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			return &ParseError{File: name, Line: n, Msg: `want "id:controllers:path"`}
		}
		id, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil {
			return &ParseError{File: name, Line: n, Msg: "bad hierarchy id " + quote(f[0])}
		}
		if !strings.HasPrefix(f[2], "/") {
			return &ParseError{File: name, Line: n, Msg: "cgroup path " + quote(f[2]) + " is not absolute"}
		}
		if seen[uint32(id)] {
			return &ParseError{File: name, Line: n, Msg: "hierarchy id " + f[0] + " listed twice"}
		}
		seen[uint32(id)] = true
		m := membership{id: uint32(id), path: f[2]}
		if f[1] != "" {
			m.controllers = strings.Split(f[1], ",")
		}
		if m.id != 0 && len(m.controllers) == 0 {
			return &ParseError{File: name, Line: n, Msg: "v1 hierarchy " + f[0] + " has no controllers"}
		}
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

func quote(s string) string { return strconv.Quote(s) }

// ProcessCgroup returns the cgroup path of process pid in hierarchy h (its
// line of /proc/<pid>/cgroup), for comparing another process's place with
// this one's h.Own. The process's own cgroup namespace is not considered:
// nodeguard compares processes of the host's namespace.
func ProcessCgroup(pid int, h *Hierarchy) (string, error) {
	name := "/proc/" + itoa(pid) + "/cgroup"
	b, err := readHostFile(os.DirFS("/"), name)
	if err != nil {
		return "", err
	}
	ms, err := parseSelfCgroup(b, name)
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.id == h.ID {
			return m.path, nil
		}
	}
	return "", fmt.Errorf("read %s: %w: no line for hierarchy %d", name, ErrUnsupported, h.ID)
}
