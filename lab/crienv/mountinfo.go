package crienv

import (
	"os"
	"sort"
	"strings"

	"github.com/nodeguard/nodeguard/cgroups"
)

// mountsUnder returns the mount points in mountinfo data (the format of
// /proc/self/mountinfo) that are dir itself or beneath it, deepest first,
// then newest first: the order to unmount them in. dir must be clean and
// absolute.
func mountsUnder(data []byte, dir string) ([]string, error) {
	all, err := cgroups.MountPoints(data, "mountinfo")
	if err != nil {
		return nil, err
	}
	type mp struct {
		path  string
		order int
	}
	var found []mp
	for n, p := range all {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			found = append(found, mp{p, n})
		}
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
