package cgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nodeguard/nodeguard/cgroups"
)

// gateShell runs the gate script that holds a command until Start has moved
// it into the v1 memory cgroup.
const gateShell = "/bin/sh"

// Start starts cmd inside the sandbox from its first instruction on, in
// both the memory and the cgroup2 directory:
//
//   - The cgroup2 directory (the memory cgroup on pure v2) is entered at
//     birth with clone3(CLONE_INTO_CGROUP) through SysProcAttr.UseCgroupFD.
//   - A v1 memory cgroup cannot be entered at birth. cmd is started through
//     /bin/sh, which waits on a pipe; Start writes the shell's pid into the
//     sandbox's memory cgroup.procs and only then lets the shell exec the
//     command (argv[0] becomes cmd.Path). If the move fails, the shell exits
//     with status 125 without running the command, and Start reaps it and
//     returns the error.
//
// cmd must not set SysProcAttr.UseCgroupFD. On success the caller owns cmd
// as after cmd.Start: it must Wait for it. On error nothing is left running:
// cmd was never started, or has been reaped.
func (s *Sandbox) Start(t testing.TB, cmd *exec.Cmd) error {
	t.Helper()
	if cmd.Process != nil {
		return errors.New("start in sandbox: command already started")
	}
	if cmd.Err != nil {
		return fmt.Errorf("start in sandbox: %w", cmd.Err)
	}
	if cmd.SysProcAttr != nil && cmd.SysProcAttr.UseCgroupFD {
		return errors.New("start in sandbox: SysProcAttr.UseCgroupFD is already set")
	}

	origAttr, origPath, origArgs, origExtra := cmd.SysProcAttr, cmd.Path, cmd.Args, cmd.ExtraFiles
	defer func() {
		cmd.SysProcAttr, cmd.Path, cmd.Args, cmd.ExtraFiles = origAttr, origPath, origArgs, origExtra
	}()
	attr := &syscall.SysProcAttr{}
	if origAttr != nil {
		*attr = *origAttr
	}
	cmd.SysProcAttr = attr

	if s.unified != nil {
		fd, err := unix.Open(s.unified.Path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("start in sandbox: open %s: %w", s.unified.Path, err)
		}
		defer unix.Close(fd)
		attr.UseCgroupFD, attr.CgroupFD = true, fd
	}
	if s.memory == nil || s.memory.Hierarchy.V2() {
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start in sandbox %s: %w", s.rel, err)
		}
		return nil
	}
	return s.startGated(cmd)
}

// startGated starts cmd behind the gate shell and moves it into the v1
// memory cgroup before opening the gate.
func (s *Sandbox) startGated(cmd *exec.Cmd) error {
	gateR, gateW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start in sandbox: %w", err)
	}
	defer gateW.Close() // closing without "go" makes the shell exit 125
	// The gate is the child's fd 3+len(ExtraFiles). The script closes it
	// before exec so the command never sees it. Only the fd number is
	// formatted in; the command and its arguments pass as "$@".
	n := 3 + len(cmd.ExtraFiles)
	script := fmt.Sprintf(`read -r gate <&%[1]d || exit 125; [ "$gate" = go ] || exit 125; exec %[1]d<&-; exec "$@"`, n)
	cmd.ExtraFiles = append(append([]*os.File(nil), cmd.ExtraFiles...), gateR)
	cmd.Args = append([]string{"sh", "-c", script, "sh", cmd.Path}, cmd.Args[1:]...)
	cmd.Path = gateShell
	err = cmd.Start()
	gateR.Close()
	if err != nil {
		return fmt.Errorf("start in sandbox %s: %w", s.rel, err)
	}
	if err := cgroups.WriteFile(s.memory.Path, cgroups.FileProcs, strconv.Itoa(cmd.Process.Pid)); err != nil {
		gateW.Close()
		_ = cmd.Wait() // exits 125 on the closed gate
		return fmt.Errorf("start in sandbox %s: move pid %d: %w", s.rel, cmd.Process.Pid, err)
	}
	if _, err := gateW.WriteString("go\n"); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("start in sandbox %s: open gate: %w", s.rel, err)
	}
	return nil
}
