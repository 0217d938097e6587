package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Event is one thing the agent decided or saw: an eviction decision and
// its completion, an OOM kill attributed to a pod, a node condition
// change. Object is the kind's own JSON.
type Event struct {
	Seq    uint64          `json:"seq"`
	Time   time.Time       `json:"time"`
	Kind   string          `json:"kind"`
	Object json.RawMessage `json:"object"`
}

// EventSource is served on GET /v1/events when the PodService has one.
type EventSource interface {
	// EventsSince returns the events after seq, waiting up to wait for
	// the first one.
	EventsSince(ctx context.Context, seq uint64, wait time.Duration) []Event
}

// EventLog keeps the newest events in memory (a bounded ring: a burst of
// evictions never grows it) and hands them to long-polling readers.
type EventLog struct {
	mu     sync.Mutex
	buf    []Event
	max    int
	seq    uint64
	notify chan struct{} // closed and replaced on every append
}

// NewEventLog keeps the last max events (1024 when max <= 0).
func NewEventLog(max int) *EventLog {
	if max <= 0 {
		max = 1024
	}
	return &EventLog{max: max, notify: make(chan struct{})}
}

// Append records one event; obj is marshalled to JSON.
func (l *EventLog) Append(at time.Time, kind string, obj any) {
	b, err := json.Marshal(obj)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	l.mu.Lock()
	l.seq++
	l.buf = append(l.buf, Event{Seq: l.seq, Time: at, Kind: kind, Object: b})
	if len(l.buf) > l.max {
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-l.max:]...)
	}
	close(l.notify)
	l.notify = make(chan struct{})
	l.mu.Unlock()
}

// EventsSince implements EventSource.
func (l *EventLog) EventsSince(ctx context.Context, seq uint64, wait time.Duration) []Event {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		var out []Event
		for _, e := range l.buf {
			if e.Seq > seq {
				out = append(out, e)
			}
		}
		ch := l.notify
		l.mu.Unlock()
		if len(out) > 0 || wait <= 0 {
			return out
		}
		select {
		case <-ch:
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// maxEventWait bounds one long poll, well inside the write timeout.
const maxEventWait = 20 * time.Second

// events: GET /v1/events?since=N&wait=D.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	src, ok := s.svc.(EventSource)
	if !ok {
		writeError(w, http.StatusNotFound, "this agent keeps no events")
		return
	}
	var since uint64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("since=%q: %v", v, err))
			return
		}
		since = n
	}
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("wait=%q: want a duration like 10s", v))
			return
		}
		wait = min(d, maxEventWait)
	}
	evs := src.EventsSince(r.Context(), since, wait)
	if evs == nil {
		evs = []Event{}
	}
	writeJSON(w, http.StatusOK, evs)
}

// Events returns the agent's events after since, waiting up to wait for
// one (long poll).
func (c *Client) Events(ctx context.Context, since uint64, wait time.Duration) ([]Event, error) {
	var out []Event
	path := fmt.Sprintf("/v1/events?since=%d&wait=%s", since, wait)
	if err := c.do(ctx, http.MethodGet, path, "", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}
