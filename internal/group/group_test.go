package group

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

type events struct {
	mu  sync.Mutex
	all []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, s)
}

func TestShutdownClosesOnlyAfterEveryGoroutineReturned(t *testing.T) {
	var ev events
	g, ctx := New(context.Background())
	g.Cleanup(func() { ev.add("close first resource") })
	started := make(chan struct{})
	g.Go("slow loop", func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		// Still using the resources after the cancel: a loop finishing
		// its pass.
		ev.add("slow loop uses resources")
		ev.add("slow loop returns")
		return ctx.Err()
	})
	g.Cleanup(func() { ev.add("close second resource") })
	<-started
	if err := g.Shutdown(); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	want := []string{"slow loop uses resources", "slow loop returns", "close second resource", "close first resource"}
	if !slices.Equal(ev.all, want) {
		t.Errorf("events %q, want %q", ev.all, want)
	}
	if ctx.Err() == nil {
		t.Error("the Group's context is still live after Shutdown")
	}
	if err := g.Shutdown(); err != nil || len(ev.all) != len(want) {
		t.Errorf("a second Shutdown: %v, events %q", err, ev.all)
	}
}

func TestAGoroutineThatReturnsEarlyEndsTheGroup(t *testing.T) {
	boom := errors.New("accept: invalid argument")
	cases := []struct {
		name string
		ret  error
		want error
		text string
	}{
		{"an error is named and kept", boom, boom, "metrics server: accept: invalid argument"},
		{"a nil return is a failure too", nil, ErrStopped, "metrics server: stopped unexpectedly"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, ctx := New(context.Background())
			others := make(chan error, 1)
			g.Go("sensing", func(ctx context.Context) error {
				<-ctx.Done()
				others <- ctx.Err()
				return ctx.Err()
			})
			g.Go("metrics server", func(context.Context) error { return c.ret })
			err := g.Wait()
			if !errors.Is(err, c.want) || err.Error() != c.text {
				t.Fatalf("Wait: %v, want %q", err, c.text)
			}
			if ctx.Err() == nil || <-others == nil {
				t.Error("the other goroutines were not ended")
			}
			if err := g.Shutdown(); !errors.Is(err, c.want) {
				t.Errorf("Shutdown: %v", err)
			}
		})
	}
}

func TestTheParentsEndIsNoFailure(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	g, _ := New(parent)
	g.Go("loop", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	cancel()
	if err := g.Wait(); err != nil {
		t.Errorf("Wait after the parent's end: %v", err)
	}
}
