// Command pause is the pause image of nodeguard's test environment: the
// process that holds a pod sandbox's namespaces. It sleeps until SIGTERM or
// SIGINT, then exits 0, and reaps every child it inherits (as PID 1 of the
// pod's PID namespace it is every orphan's parent).
//
// lab/images builds it statically (CGO_ENABLED=0, -trimpath, no build
// id) from this file, embedded in that package, so the image needs nothing
// else from the host. It uses only the syscall package, to stay small.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	reap() // children that exited before Notify was in place
	for s := range sig {
		if s == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every exited child without blocking. Several exits can
// share one SIGCHLD, so it loops until none is left.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
