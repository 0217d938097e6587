package kubeletproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// kernelDefaults are the sysctls the kubelet checks with
// protectKernelDefaults, at the values it requires
// (pkg/kubelet/cm/container_manager_linux.go, setupKernelTunables). The
// wrapper shows it these values in its mount namespace; the host's stay.
var kernelDefaults = []struct {
	path  string // beneath /proc/sys
	value int
}{
	{"vm/overcommit_memory", 1},
	{"vm/panic_on_oom", 0},
	{"kernel/panic", 10},
	{"kernel/panic_on_oops", 1},
	{"kernel/keys/root_maxkeys", 1000000},
	{"kernel/keys/root_maxbytes", 25000000},
}

// Host paths the wrapper mounts over in the kubelet's mount namespace.
const (
	// hostLogDir gets a tmpfs: the kubelet links every container's log
	// into /var/log/containers.
	hostLogDir = "/var/log"
	// hostContainerdDir gets a tmpfs with the private containerd's socket
	// bound at containerd.sock, where cAdvisor looks for containerd.
	hostContainerdDir = "/run/containerd"
	// hostVarLib gets the run's own directory: the kubelet puts its
	// device-plugin socket in /var/lib/kubelet/device-plugins whatever
	// its root directory.
	hostVarLib = "/var/lib/kubelet"
)

// Sizes of the wrapper's tmpfs mounts: they hold links and one socket.
const (
	logTmpfsSize = "64m"
	runTmpfsSize = "1m"
)

// sysctlFile is the file beneath Dir/sysctl that holds the value shown at
// /proc/sys/<path>.
func sysctlFile(dir, path string) string {
	return filepath.Join(dir, sysctlName, strings.ReplaceAll(path, "/", "."))
}

// writeSysctls writes the files kernelDefaults are shown from.
func writeSysctls(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, sysctlName), 0o755); err != nil {
		return err
	}
	for _, s := range kernelDefaults {
		if err := os.WriteFile(sysctlFile(dir, s.path), []byte(strconv.Itoa(s.value)+"\n"), 0o444); err != nil {
			return err
		}
	}
	return nil
}

// wrapperScript is the shell script that runs as the first process of
// the kubelet's private mount namespace: it makes the mounts, then execs
// the kubelet with its own arguments, so that the namespace's first pid
// is the kubelet's. Every path is quoted; mount failures end it (set -e)
// with the failed command in the log.
func wrapperScript(o Options, sock string) string {
	var b strings.Builder
	line := func(words ...string) {
		b.WriteString(strings.Join(words, " "))
		b.WriteByte('\n')
	}
	line("#!/bin/sh")
	line("# Written by bench/kubeletproc: the kubelet's private mount namespace.")
	line("set -eu")
	line("mount -t tmpfs -o mode=0755,size="+logTmpfsSize, "kubeletproc", quote(hostLogDir))
	line("mount -t tmpfs -o mode=0700,size="+runTmpfsSize, "kubeletproc", quote(hostContainerdDir))
	line(":", ">", quote(hostContainerdDir+"/containerd.sock"))
	line("mount --bind", quote(sock), quote(hostContainerdDir+"/containerd.sock"))
	line("mount --bind", quote(filepath.Join(o.Dir, varLibName)), quote(hostVarLib))
	for _, s := range kernelDefaults {
		line("mount --bind", quote(sysctlFile(o.Dir, s.path)), quote("/proc/sys/"+s.path))
	}
	line("exec", quote(o.Bin), `"$@"`)
	return b.String()
}

// quote is s as one shell word.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// hostDirs are the host directories the wrapper mounts over that Start
// created because they were absent, to remove once empty again.
type hostDirs []string

// ensureHostDirs makes the mount points the wrapper needs that the host
// lacks (/run/containerd goes when no containerd has run; /var/lib/kubelet
// when no kubelet ever ran) and returns those it made.
func ensureHostDirs() (hostDirs, error) {
	var made hostDirs
	for _, d := range []string{hostContainerdDir, hostVarLib} {
		if _, err := os.Stat(d); err == nil {
			continue
		} else if !errors.Is(err, os.ErrNotExist) {
			return made, fmt.Errorf("mount point %s: %w", d, err)
		}
		// Their parents, /run and /var/lib, exist on every host.
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return made, fmt.Errorf("make mount point %s: %w", d, err)
		} else if err == nil {
			made = append(made, d)
		}
	}
	return made, nil
}

// remove removes the directories made, when they are empty: containerd
// may have put its shim sockets into /run/containerd meanwhile (crienv
// removes those, and the directory, itself).
func (h hostDirs) remove() error {
	var errs []error
	for _, d := range h {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}
