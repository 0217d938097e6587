// The OOM race's ground truth, read from the kernel and never from a
// strategy: when the hog's memory was released, and whether the kernel OOM
// killer fired.

package bench

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
)

// releaseSample is one look at the pod root: at At, its working set was
// below the line, or the hog's container cgroup was gone.
type releaseSample struct {
	At      time.Time
	below   bool
	hogGone bool
}

func (s releaseSample) released() bool { return s.below || s.hogGone }

// releaseWatch samples the pod root for the release of a kill. A sample
// reads the usage counter (one pread of a descriptor kept open), and the
// working set (memory.stat) only when usage is at or above the line: the
// working set never exceeds usage. The samples are kept for the trial
// (at most one per millisecond).
type releaseWatch struct {
	mem     cgroups.Dir
	usage   *os.File
	hogMem  string
	line    uint64
	buf     []byte
	samples []releaseSample
}

func newReleaseWatch(mem cgroups.Dir, hogMem string, line uint64) (*releaseWatch, error) {
	name := "memory.usage_in_bytes"
	if mem.Hierarchy.V2() {
		name = "memory.current"
	}
	f, err := os.Open(filepath.Join(mem.Path, name))
	if err != nil {
		return nil, fmt.Errorf("watch the release: %w", err)
	}
	return &releaseWatch{mem: mem, usage: f, hogMem: hogMem, line: line, buf: make([]byte, 32)}, nil
}

func (w *releaseWatch) close() { w.usage.Close() }

func (w *releaseWatch) sample() (releaseSample, error) {
	n, err := w.usage.ReadAt(w.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return releaseSample{}, fmt.Errorf("read %s: %w", w.usage.Name(), err)
	}
	usage, err := strconv.ParseUint(strings.TrimSpace(string(w.buf[:n])), 10, 64)
	if err != nil {
		return releaseSample{}, fmt.Errorf("read %s: %q: %w", w.usage.Name(), w.buf[:n], err)
	}
	below := usage < w.line
	if !below {
		m, err := readCgroupMemory(w.mem)
		if err != nil {
			return releaseSample{}, err
		}
		below = m.WorkingSet() < w.line
	}
	_, err = os.Stat(w.hogMem)
	s := releaseSample{At: time.Now(), below: below, hogGone: errors.Is(err, fs.ErrNotExist)}
	w.samples = append(w.samples, s)
	return s, nil
}

// releasedAfter is the first sample at or after kill that saw the memory
// released.
func (w *releaseWatch) releasedAfter(kill time.Time) (time.Time, bool) {
	return firstReleased(w.samples, kill)
}

// firstReleased returns the time of the first sample (in time order) at or
// after kill that saw the memory released.
func firstReleased(samples []releaseSample, kill time.Time) (time.Time, bool) {
	i, _ := slices.BinarySearchFunc(samples, kill, func(s releaseSample, t time.Time) int { return s.At.Compare(t) })
	for _, s := range samples[i:] {
		if s.released() {
			return s.At, true
		}
	}
	return time.Time{}, false
}

// findLeaf returns the cgroup directory beneath dir whose cgroup.procs
// holds a process named comm.
func findLeaf(dir, comm string) (string, error) {
	found := ""
	err := cgroups.Walk(dir, func(p string) error {
		pids, err := cgroups.Procs(p)
		if err != nil {
			return nil // removed meanwhile
		}
		for _, pid := range pids {
			c, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
			if err == nil && strings.TrimSpace(string(c)) == comm {
				found = p
				return fs.SkipAll
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("find the %s process's cgroup beneath %s: %w", comm, dir, err)
	}
	if found == "" {
		return "", fmt.Errorf("find the %s process's cgroup beneath %s: none", comm, dir)
	}
	return found, nil
}

// procsEmpty reports whether no process is left in the cgroup dir or
// beneath it.
func procsEmpty(dir string) bool {
	pids, _ := cgroups.TreeProcs(dir)
	return len(pids) == 0
}

// oomCounter sums oom_kill over the pod root's subtree: v1 counts an OOM
// kill only in the victim's own memcg (memory.oom_control), so every
// descendant is read; v2's memory.events of the pod root is hierarchical.
type oomCounter struct {
	mu   sync.Mutex // init runs while a strategy may already evict
	v2   bool
	dirs []string
	// last is each directory's last count: a container cgroup removed
	// after its task was OOM-killed takes its count with it, so a
	// vanished directory keeps its last value.
	last map[string]uint64
	base uint64
}

func (o *oomCounter) init(root cgroups.Dir) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.v2 = root.Hierarchy.V2()
	o.dirs, o.last = nil, map[string]uint64{}
	if o.v2 {
		o.dirs = []string{root.Path}
	} else if err := cgroups.Walk(root.Path, func(p string) error {
		o.dirs = append(o.dirs, p)
		return nil
	}); err != nil {
		return fmt.Errorf("list the pod root's memory cgroups: %w", err)
	}
	n, err := o.sum()
	if err != nil {
		return err
	}
	o.base = n
	return nil
}

func (o *oomCounter) sum() (uint64, error) {
	file := "memory.oom_control"
	if o.v2 {
		file = "memory.events"
	}
	var total uint64
	for _, d := range o.dirs {
		b, err := os.ReadFile(filepath.Join(d, file))
		if cgroups.Gone(err) {
			total += o.last[d]
			continue
		}
		if err != nil {
			return 0, err
		}
		n, err := ParseOOMKill(b)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", filepath.Join(d, file), err)
		}
		o.last[d] = n
		total += n
	}
	return total, nil
}

// fired reports whether any OOM kill happened in the subtree since init.
func (o *oomCounter) fired() (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dirs == nil {
		return false, nil
	}
	n, err := o.sum()
	return err == nil && n > o.base, err
}

// ParseOOMKill reads the "oom_kill N" line of memory.oom_control (v1) or
// memory.events (v2). A file without one is malformed: every kernel since
// 4.13 writes it.
func ParseOOMKill(b []byte) (uint64, error) {
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), " ")
		if !ok || k != "oom_kill" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("oom_kill %q: %w", v, err)
		}
		return n, nil
	}
	return 0, errors.New("no oom_kill line")
}
