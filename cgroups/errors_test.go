package cgroups

import (
	"io/fs"
	"syscall"
	"testing"
)

// A cgroup file read while the cgroup is removed answers ENOENT, or ENODEV
// while kernfs tears it down: both mean gone. (CI failed once on the
// second: the OOM race read the oom_control of a container cgroup that the
// runtime was removing.)
func TestGone(t *testing.T) {
	for _, c := range []struct {
		err  error
		gone bool
	}{
		{&fs.PathError{Op: "open", Path: "memory.oom_control", Err: syscall.ENOENT}, true},
		{&fs.PathError{Op: "read", Path: "memory.oom_control", Err: syscall.ENODEV}, true},
		{&fs.PathError{Op: "open", Path: "memory.oom_control", Err: syscall.EACCES}, false},
		{nil, false},
	} {
		if got := Gone(c.err); got != c.gone {
			t.Errorf("Gone(%v) = %v, want %v", c.err, got, c.gone)
		}
	}
}
