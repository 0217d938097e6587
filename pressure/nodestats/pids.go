package nodestats

import (
	"bytes"
	"path/filepath"

	"github.com/nodeguard/nodeguard/cgroups/cgstat"
)

// ProcDir is where procfs is mounted on a live host.
const ProcDir = "/proc"

// PIDStats holds the kubelet's pid.available inputs, read the way the
// kubelet reads them (kubernetes pkg/kubelet/stats/pidlimit/pidlimit_linux.go,
// Stats and runningTaskCount).
type PIDStats struct {
	// PIDMax is /proc/sys/kernel/pid_max: one more than the largest PID.
	PIDMax int64
	// ThreadsMax is /proc/sys/kernel/threads-max: the most tasks the
	// kernel will create.
	ThreadsMax int64
	// Running is the denominator of the fourth field of /proc/loadavg
	// ("1/91" gives 91): the number of tasks (threads, not processes) that
	// exist, whatever their state. The name is the kubelet's
	// (NumOfRunningProcesses). The kubelet falls back to sysinfo(2)'s
	// procs when /proc/loadavg fails; that value is 16 bits wide and so
	// wrong past 65535 tasks (kubernetes issue 107107), and nodeguard
	// returns the error instead.
	Running int64
}

// Max returns the node's task limit as the kubelet computes it: the
// smaller of PIDMax and ThreadsMax, "as they both specify the system-wide
// limit on the number of tasks".
func (p PIDStats) Max() int64 { return min(p.PIDMax, p.ThreadsMax) }

// ReadPIDs reads the pid.available inputs from the procfs mounted at
// procDir (ProcDir on a live host): sys/kernel/pid_max,
// sys/kernel/threads-max and loadavg. The kubelet skips a limit file it
// cannot read and uses the other; nodeguard returns the error, as both
// files exist on every Linux it supports.
func ReadPIDs(procDir string) (PIDStats, error) {
	var p PIDStats
	var err error
	if p.PIDMax, err = readSingleInt(filepath.Join(procDir, "sys", "kernel", "pid_max")); err != nil {
		return PIDStats{}, err
	}
	if p.ThreadsMax, err = readSingleInt(filepath.Join(procDir, "sys", "kernel", "threads-max")); err != nil {
		return PIDStats{}, err
	}
	name := filepath.Join(procDir, "loadavg")
	b, err := readKernelFile(name)
	if err != nil {
		return PIDStats{}, err
	}
	if p.Running, err = ParseLoadavgTasks(name, b); err != nil {
		return PIDStats{}, err
	}
	return p, nil
}

// ParseLoadavgTasks returns the total task count from the content b of a
// loadavg file, "0.55 0.34 0.26 1/91 25777": the number after the slash in
// the fourth field. name is used only in errors.
func ParseLoadavgTasks(name string, b []byte) (int64, error) {
	line, rest, _ := bytes.Cut(b, []byte("\n"))
	if len(bytes.TrimSpace(rest)) != 0 {
		return 0, &ParseError{File: name, Line: 2, Msg: "more than one line"}
	}
	f := bytes.Fields(line)
	if len(f) != 5 {
		return 0, &ParseError{File: name, Line: 1, Msg: "want 5 fields"}
	}
	running, total, ok := bytes.Cut(f[3], []byte("/"))
	if !ok {
		return 0, &ParseError{File: name, Line: 1, Msg: "fourth field is not running/total"}
	}
	if _, ok := cgstat.ParseUint(running); !ok {
		return 0, &ParseError{File: name, Line: 1, Msg: "running task count is not a number"}
	}
	n, ok := cgstat.ParseUint(total)
	if !ok || n > 1<<62 {
		return 0, &ParseError{File: name, Line: 1, Msg: "total task count is not a number"}
	}
	return int64(n), nil
}

// readSingleInt reads a file holding one unsigned decimal and a newline,
// as /proc/sys integers are written, small enough for an int64.
func readSingleInt(name string) (int64, error) {
	n, err := readSingleUint(name)
	if err != nil {
		return 0, err
	}
	if n > 1<<62 {
		return 0, &ParseError{File: name, Line: 1, Msg: "value out of range"}
	}
	return int64(n), nil
}
