package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// scrapeMetrics scrapes /metrics on its interval until stopped, counts
// what a failing scrape (a 500, then no server) is apart from a good one,
// and the bytes of the good ones.
func TestScrapeMetricsCountsScrapesAndFailures(t *testing.T) {
	var calls atomic.Int32
	body := strings.Repeat("x", 2048)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1)%2 == 0 {
			http.Error(w, "collector failed", http.StatusInternalServerError)
			return
		}
		w.Write([]byte(body))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan scrapeCount, 1)
	go func() { done <- scrapeMetrics(ctx, addr, 20*time.Millisecond) }()
	deadline := time.After(10 * time.Second)
	for calls.Load() < 6 {
		select {
		case <-deadline:
			t.Fatalf("only %d scrapes in 10 s at a 20 ms interval", calls.Load())
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	n := <-done
	if n.ok < 3 || n.failed < 2 || n.ok+n.failed > int(calls.Load()) {
		t.Errorf("counted %d good and %d failed of %d scrapes served (every other one a 500)", n.ok, n.failed, calls.Load())
	}
	if n.kib() != 2 {
		t.Errorf("%.2f KiB a good scrape, want the 2 KiB served", n.kib())
	}

	srv.Close()
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	n = scrapeMetrics(ctx, addr, 20*time.Millisecond)
	if n.ok != 0 || n.failed == 0 {
		t.Errorf("with no server: %d good, %d failed scrapes, want only failures", n.ok, n.failed)
	}
}
