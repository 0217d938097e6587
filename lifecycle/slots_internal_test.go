package lifecycle

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestSlots(t *testing.T) {
	t.Run("a worker waiting out a grace period gives its work slot to another", func(t *testing.T) {
		s := newSlots(1, 1)
		s.acquire()
		inGrace, graceOver, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
		go func() {
			s.waitOut([]func(){func() { close(inGrace); <-graceOver }})
			s.release()
			close(done)
		}()
		<-inGrace
		s.acquire() // the only work slot, while the stop still waits
		close(graceOver)
		s.release()
		<-done
	})
	t.Run("calls in flight stay within the work and the stop slots", func(t *testing.T) {
		const workers, stops = 2, 3
		s := newSlots(workers, stops)
		var work, stopping, maxWork, maxStopping atomic.Int32
		raise := func(max *atomic.Int32, n int32) {
			for {
				m := max.Load()
				if n <= m || max.CompareAndSwap(m, n) {
					return
				}
			}
		}
		stop := func() {
			raise(&maxStopping, stopping.Add(1))
			stopping.Add(-1)
		}
		var wg sync.WaitGroup
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.acquire()
				raise(&maxWork, work.Add(1))
				work.Add(-1)
				s.waitOut([]func(){stop, stop})
				raise(&maxWork, work.Add(1))
				work.Add(-1)
				s.release()
			}()
		}
		wg.Wait()
		if maxWork.Load() > workers || maxStopping.Load() > stops {
			t.Errorf("at most %d working and %d stopping at once, want at most %d and %d", maxWork.Load(), maxStopping.Load(), workers, stops)
		}
	})
}
