package cgtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nodeguard/nodeguard/cgroups"
)

// Bounds on cleanup. SIGKILLed processes normally leave their cgroup within
// milliseconds; the bounds only keep a stuck cleanup from hanging the test
// binary.
const (
	// killWait bounds how long cleanup waits for killed processes to
	// leave the sandbox.
	killWait = 2 * time.Second
	// rmdirWait bounds how long cleanup retries rmdir on EBUSY (the
	// kernel may still be tearing down an exited task's css_set).
	rmdirWait = 2 * time.Second
)

// namePrefix starts the name of every top-level sandbox, so that leftovers
// are easy to find: find /sys/fs/cgroup -name 'nodeguard-test*'.
const namePrefix = "nodeguard-test-"

// Sandbox is a cgroup created for one test, in the memory hierarchy and in
// the cgroup2 hierarchy (one directory on pure v2, where they are the same;
// the memory one alone on pure v1).
type Sandbox struct {
	layout  *cgroups.Layout
	rel     string        // relative to this process's own cgroups
	dirs    []cgroups.Dir // memory first, then cgroup2 (Layout.Monitored order)
	memory  *cgroups.Dir  // points into dirs; nil without a memory hierarchy
	unified *cgroups.Dir  // points into dirs; nil without cgroup2
}

// Option configures New.
type Option func(*config)

type config struct {
	layout      *cgroups.Layout
	memoryLimit int64
}

// WithLayout makes New use l instead of discovering the host's layout.
func WithLayout(l *cgroups.Layout) Option { return func(c *config) { c.layout = l } }

// WithMemoryLimit makes New set the sandbox's memory limit (see
// SetMemoryLimit).
func WithMemoryLimit(bytes int64) Option { return func(c *config) { c.memoryLimit = bytes } }

// New creates a sandbox named nodeguard-test-<pid>-<random> beneath this
// process's own cgroup and registers a t.Cleanup that kills what is left in
// it and removes it. It skips (or fails, see RequirePrivileged) when not
// root or when the host has no memory controller, and fails t when the
// sandbox cannot be made.
func New(t testing.TB, opts ...Option) *Sandbox {
	t.Helper()
	RequirePrivileged(t)
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.layout == nil {
		l, err := cgroups.Discover()
		if err != nil {
			t.Fatalf("cgtest: %v", err)
		}
		c.layout = l
	}
	Need(t, c.layout.Memory != nil, "cgtest: no hierarchy holds the memory controller")
	name := namePrefix + strconv.Itoa(os.Getpid()) + "-" + fmt.Sprintf("%08x", rand.Uint32())
	s := create(t, c.layout, name)
	if c.memoryLimit != 0 {
		if err := s.SetMemoryLimit(c.memoryLimit); err != nil {
			t.Fatalf("cgtest: %v", err)
		}
	}
	return s
}

// Child creates a sandbox nested in s under name, with its own cleanup
// registered on t (which runs before s's when t is the same test). name is
// one path component.
func (s *Sandbox) Child(t testing.TB, name string) *Sandbox {
	t.Helper()
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		t.Fatalf("cgtest: child name %q is not a single path component", name)
	}
	if err := s.delegate(); err != nil {
		t.Fatalf("cgtest: %v", err)
	}
	return create(t, s.layout, s.rel+"/"+name)
}

// delegate enables, on cgroup2, every controller the sandbox has in its
// cgroup.subtree_control, so that children get memory.max and friends (the
// kernel gives a child only the controllers its parent delegates). v1
// hierarchies need nothing. It fails when the sandbox itself holds
// processes (cgroup2's no-internal-processes rule).
func (s *Sandbox) delegate() error {
	for _, d := range s.dirs {
		if !d.Hierarchy.V2() {
			continue
		}
		all, err := cgroups.Controllers(d.Path)
		if err == nil {
			err = cgroups.EnableControllers(d.Path, all...)
		}
		if err != nil {
			return fmt.Errorf("delegate controllers of %s: %w", d.Path, err)
		}
	}
	return nil
}

// create makes rel in the monitored hierarchies. The cleanup is registered
// before the first mkdir, so a half-made sandbox is removed too.
func create(t testing.TB, l *cgroups.Layout, rel string) *Sandbox {
	t.Helper()
	dirs, err := l.ResolveMonitored(rel)
	if err != nil {
		t.Fatalf("cgtest: %v", err)
	}
	s := &Sandbox{layout: l, rel: rel, dirs: dirs}
	for i := range s.dirs {
		d := &s.dirs[i]
		if d.Hierarchy == l.Memory {
			s.memory = d
		}
		if d.Hierarchy == l.Unified {
			s.unified = d
		}
	}
	t.Cleanup(func() {
		if err := s.destroy(); err != nil {
			t.Errorf("cgtest: clean up sandbox %s: %v", s.rel, err)
		}
	})
	for _, d := range s.dirs {
		if err := os.Mkdir(d.Path, 0o755); err != nil {
			t.Fatalf("cgtest: create sandbox: %v", err)
		}
	}
	return s
}

// Layout returns the layout the sandbox was made in.
func (s *Sandbox) Layout() *cgroups.Layout { return s.layout }

// Dirs returns the sandbox's directories: memory hierarchy first, then
// cgroup2 when that is a different hierarchy.
func (s *Sandbox) Dirs() []cgroups.Dir { return slices.Clone(s.dirs) }

// MemoryDir returns the sandbox's directory in the memory hierarchy.
func (s *Sandbox) MemoryDir() string {
	if s.memory == nil {
		return ""
	}
	return s.memory.Path
}

// UnifiedDir returns the sandbox's directory in the cgroup2 hierarchy, or ""
// on a host without one.
func (s *Sandbox) UnifiedDir() string {
	if s.unified == nil {
		return ""
	}
	return s.unified.Path
}

// Rel returns the sandbox's path relative to this process's own cgroups,
// as `nodeguard events --cgroup REL` takes it.
func (s *Sandbox) Rel() string { return s.rel }

// ID returns the cgroup id of the sandbox's directory in h.
func (s *Sandbox) ID(h *cgroups.Hierarchy) (uint64, error) {
	for _, d := range s.dirs {
		if d.Hierarchy == h {
			return cgroups.ID(d.Path)
		}
	}
	return 0, fmt.Errorf("cgroup id of sandbox %s: %w: no directory in hierarchy %d", s.rel, cgroups.ErrUnsupported, h.ID)
}

// MemoryID returns the cgroup id of the sandbox's memory cgroup: what BPF
// sees as the memcg id of a task in it. On cgroup2 that holds only when the
// memory controller is enabled in the sandbox (listed in the parent's
// cgroup.subtree_control); otherwise a task's memcg is the nearest ancestor
// that has it.
func (s *Sandbox) MemoryID() (uint64, error) {
	if s.memory == nil {
		return 0, fmt.Errorf("memory cgroup id of sandbox %s: %w: no memory hierarchy", s.rel, cgroups.ErrUnsupported)
	}
	return cgroups.ID(s.memory.Path)
}

// UnifiedID returns the cgroup id of the sandbox's cgroup2 directory: what
// bpf_get_current_cgroup_id() returns for a task in it.
func (s *Sandbox) UnifiedID() (uint64, error) {
	if s.unified == nil {
		return 0, fmt.Errorf("cgroup2 id of sandbox %s: %w: no cgroup2 hierarchy", s.rel, cgroups.ErrUnsupported)
	}
	return cgroups.ID(s.unified.Path)
}

// Procs returns the pids in the sandbox's own cgroup.procs files (not its
// children's), sorted and without duplicates. A directory already removed
// has none.
func (s *Sandbox) Procs() ([]int, error) {
	var out []int
	for _, d := range s.dirs {
		pids, err := cgroups.Procs(d.Path)
		if err != nil && !cgroups.Gone(err) {
			return nil, err
		}
		out = append(out, pids...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Kill sends SIGKILL to every process in the sandbox and its descendants,
// through pidfds (cgroups.SigkillTree), so that a recycled pid is never
// hit. It does not wait for them to exit.
func (s *Sandbox) Kill() error {
	var errs []error
	for _, d := range s.dirs {
		if _, err := cgroups.SigkillTree(d.Path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Remove kills what is left in the sandbox and removes its directories now,
// for tests that watch the removal; the cleanup registered by New then finds
// nothing left to do.
func (s *Sandbox) Remove() error { return s.destroy() }

// destroy kills what is left in the sandbox, waits for it to leave, and
// removes the directories bottom-up (cgroups.EmptyTree, then
// cgroups.RemoveTree). It removes the sandbox's path in every hierarchy of
// the layout, not only in those it made: code under test that takes the
// sandbox as its cgroup root (the pod cgroup manager) makes the same path
// in the cpu, pids and other v1 hierarchies, and those must go too. The
// name is the test's own (nodeguard-test-<pid>-<random>), so nothing else
// lives there. A sandbox already gone is fine.
func (s *Sandbox) destroy() error {
	all, err := s.layout.Resolve(s.rel)
	if err != nil {
		return fmt.Errorf("resolve sandbox %s in every hierarchy: %w", s.rel, err)
	}
	dirs := slices.Clone(s.dirs)
	for _, d := range all {
		if !slices.ContainsFunc(dirs, func(o cgroups.Dir) bool { return o.Path == d.Path }) {
			dirs = append(dirs, d)
		}
	}
	deadline := time.Now().Add(killWait)
	for _, d := range dirs {
		if err := cgroups.EmptyTree(d.Path, deadline); err != nil && !cgroups.Gone(err) {
			return err
		}
	}
	deadline = time.Now().Add(rmdirWait)
	for _, d := range dirs {
		if err := cgroups.RemoveTree(d.Path, deadline); err != nil {
			return err
		}
	}
	return nil
}
