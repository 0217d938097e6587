// Package flock serialises processes that share a cache or an installer
// (apt, the VM kernel cache, the image cache) with an exclusive flock(2).
//
// Invariants: the lock is released when the returned func is called or
// the process dies (the kernel drops flocks with their file); waiting
// polls and gives up when ctx ends, so a stuck holder fails the caller
// instead of hanging it.
package flock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pollEvery is how often a waiting caller retries: the holders here run
// for seconds (apt, a kernel extraction), so 100 ms adds nothing visible.
const pollEvery = 100 * time.Millisecond

// Lock takes an exclusive lock on file (created when missing), waiting
// until it is free or ctx ends.
func Lock(ctx context.Context, file string) (unlock func(), err error) {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", file, err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", file, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", file, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}
