package group

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrStopped is the failure of a goroutine that returned nil before its
// Group ended: a loop that should have run on.
var ErrStopped = errors.New("stopped unexpectedly")

// A Group is a set of goroutines with one lifetime. The zero value is not
// usable: call New.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	err      error    // the first failure
	cleanups []func() // run by Shutdown, newest first

	shutdown sync.Once
}

// New returns a Group and its context, which ends when parent does, when
// a goroutine fails, or on Shutdown.
func New(parent context.Context) (*Group, context.Context) {
	ctx, cancel := context.WithCancel(parent)
	return &Group{ctx: ctx, cancel: cancel}, ctx
}

// Go runs fn in a goroutine with the Group's context. name says what it
// is in the error that a failure of fn ends the Group with.
func (g *Group) Go(name string, fn func(ctx context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		err := fn(g.ctx)
		if g.ctx.Err() != nil {
			// Returned because the Group ends: what it returns now
			// (context.Canceled, mostly) is not the cause.
			return
		}
		if err == nil {
			err = ErrStopped
		}
		g.fail(fmt.Errorf("%s: %w", name, err))
	}()
}

func (g *Group) fail(err error) {
	g.mu.Lock()
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
	g.cancel()
}

// Cleanup registers f to run after every goroutine of the Group has
// returned: closing what they use. Cleanups run newest first, the reverse
// of the order in which their resources were made.
func (g *Group) Cleanup(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cleanups = append(g.cleanups, f)
}

// Wait waits for every goroutine to return and reports the first failure
// (nil when the Group ended by its parent context or Shutdown). It does
// not end the Group.
func (g *Group) Wait() error {
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Shutdown ends the Group: it cancels its context, waits for every
// goroutine, runs the cleanups, and returns Wait's error. Calls after the
// first only return that error.
func (g *Group) Shutdown() error {
	g.shutdown.Do(func() {
		g.cancel()
		g.wg.Wait()
		g.mu.Lock()
		cleanups := g.cleanups
		g.cleanups = nil
		g.mu.Unlock()
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	})
	return g.Wait()
}
