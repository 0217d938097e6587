package crienv

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// envProc is a process that belongs to an environment, and why.
type envProc struct {
	pid  int
	why  string
	argv []string
}

func (p envProc) String() string {
	return fmt.Sprintf("pid %d (%s): %s", p.pid, p.why, strings.Join(p.argv, " "))
}

// argvMatch reports why argv belongs to the environment with directory dir
// and socket sock, or "" when it does not: containerd has its config (under
// dir) in argv, its shims have "-address <sock>".
func argvMatch(argv []string, dir, sock string) string {
	for i, a := range argv {
		if (a == "-address" || a == "--address") && i+1 < len(argv) && argv[i+1] == sock {
			return "argv has -address " + sock
		}
		if a == dir || strings.HasPrefix(a, dir+"/") || strings.Contains(a, "="+dir+"/") {
			return "argv names " + dir
		}
	}
	return ""
}

// under reports whether p is dir or beneath it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// procMatch reports why process pid belongs to the environment, or "":
// its argv (argvMatch), or its root or working directory under dir (the
// containers, whose root is an overlay under the state directory).
func procMatch(pid int, dir, sock string) (string, []string) {
	base := "/proc/" + strconv.Itoa(pid)
	raw, err := os.ReadFile(base + "/cmdline")
	if err != nil {
		return "", nil // gone
	}
	argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	if len(raw) == 0 {
		argv = nil
	}
	if why := argvMatch(argv, dir, sock); why != "" {
		return why, argv
	}
	for _, l := range []string{"root", "cwd"} {
		if t, err := os.Readlink(base + "/" + l); err == nil && under(t, dir) {
			return l + " is " + t, argv
		}
	}
	return "", argv
}

// findProcs lists the processes, other than this one, that belong to the
// environment (see procMatch), by pid.
func findProcs(dir, sock string) ([]envProc, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var out []envProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if why, argv := procMatch(pid, dir, sock); why != "" {
			out = append(out, envProc{pid: pid, why: why, argv: argv})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out, nil
}

// killWait bounds how long killProc waits for a SIGKILLed process to exit.
const killWait = 5 * time.Second

// killProc SIGKILLs pid through a pidfd, after checking through that pidfd's
// lifetime that it still belongs to the environment (so a recycled pid is
// never hit), and waits for it to exit. A process that is already gone is
// not an error.
func killProc(pid int, dir, sock string) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kill pid %d: pidfd_open: %w", pid, err)
	}
	defer unix.Close(fd)
	// The pidfd pins the identity: if pid still matches now, the pidfd
	// refers to the process that matched.
	if why, _ := procMatch(pid, dir, sock); why == "" {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("kill pid %d: %w", pid, err)
	}
	return waitPidfd(fd, killWait)
}

// waitPidfd waits until the process of fd has exited (the pidfd becomes
// readable), at most d.
func waitPidfd(fd int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("wait for exit: %w after %v", os.ErrDeadlineExceeded, d)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for exit: poll: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
}
