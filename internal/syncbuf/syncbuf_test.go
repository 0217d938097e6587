package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Writers and a reader at once: every line arrives whole (run under -race).
func TestConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				fmt.Fprintf(&b, "w%d-%03d\n", w, i)
			}
		}()
	}
	for range 50 {
		_ = b.String()
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 400 {
		t.Fatalf("%d lines, want 400", len(lines))
	}
	for _, l := range lines {
		if len(l) != len("w0-000") {
			t.Errorf("torn line %q", l)
		}
	}
}
