package loader

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// MaxBenchBatch is the largest batch bench.bpf.c writes for one trigger.
const MaxBenchBatch = 1 << 20

// BenchTrigger makes bench.bpf.c write n records to the bench ring, in the
// calling thread's syscall, each stamped with bpf_ktime_get_ns(). It needs
// the bench family (Options.Families).
func (p *Pipeline) BenchTrigger(n int) error {
	if p.settings.BenchTgid == 0 {
		return fmt.Errorf("bench trigger: bench family %w", ErrNotLoaded)
	}
	if n <= 0 || n > MaxBenchBatch {
		return fmt.Errorf("bench trigger: batch %d out of range 1..%d", n, MaxBenchBatch)
	}
	// getpgid(-n) fails with ESRCH or EINVAL; the tracepoint fires first.
	_, _, errno := unix.Syscall(unix.SYS_GETPGID, uintptr(-n), 0, 0)
	if errno != 0 && !errors.Is(errno, unix.ESRCH) && !errors.Is(errno, unix.EINVAL) {
		return fmt.Errorf("bench trigger: getpgid: %w", errno)
	}
	return nil
}
