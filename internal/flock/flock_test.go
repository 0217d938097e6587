package flock

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestLock(t *testing.T) {
	file := filepath.Join(t.TempDir(), "lock")
	unlock, err := Lock(t.Context(), file)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a second holder waits and gives up with its context", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		if _, err := Lock(ctx, file); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the deadline", err)
		}
	})
	t.Run("after unlock the lock is free", func(t *testing.T) {
		unlock()
		u2, err := Lock(t.Context(), file)
		if err != nil {
			t.Fatal(err)
		}
		u2()
	})
	t.Run("a lock in a missing directory says where", func(t *testing.T) {
		if _, err := Lock(t.Context(), "/nonexistent-dir/lock"); err == nil {
			t.Fatal("no error")
		}
	})
}
