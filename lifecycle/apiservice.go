package lifecycle

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	corev1 "k8s.io/api/core/v1"
)

// APIService is the Manager as the local API's PodService: its errors
// carry the API's kinds, and the events are those of events.
func (m *Manager) APIService(events *api.EventLog) api.PodService {
	return apiService{m: m, EventLog: events}
}

// apiService adapts the Manager to the local API.
type apiService struct {
	m *Manager
	*api.EventLog
}

// mapErr gives a lifecycle error the API's kind (which picks the status
// code) and keeps its text as it is: "pod not found: default/x", not
// "not found: pod not found: default/x".
func mapErr(err error) error {
	switch {
	case errors.Is(err, ErrNotFound):
		return apiError{kind: api.ErrNotFound, err: err}
	case errors.Is(err, ErrInvalid):
		return apiError{kind: api.ErrInvalid, err: err}
	case errors.Is(err, ErrRejected):
		// Admission under node pressure: transient, try again later.
		return apiError{kind: api.ErrBusy, err: err}
	}
	return err
}

// apiError is err, of the API's kind.
type apiError struct{ kind, err error }

func (e apiError) Error() string   { return e.err.Error() }
func (e apiError) Unwrap() []error { return []error{e.kind, e.err} }

func (s apiService) Apply(ctx context.Context, pods []*corev1.Pod, _ string) ([]*corev1.Pod, error) {
	out, err := s.m.Apply(ctx, pods, SourceAPI)
	return out, mapErr(err)
}
func (s apiService) Delete(ctx context.Context, ns, name string) error {
	return mapErr(s.m.Delete(ctx, ns, name))
}
func (s apiService) List() []*corev1.Pod                     { return s.m.List() }
func (s apiService) Get(ns, name string) (*corev1.Pod, bool) { return s.m.Get(ns, name) }
func (s apiService) Logs(ctx context.Context, ns, name string, o api.LogOptions, w io.Writer) error {
	opts := LogOptions{Container: o.Container, Previous: o.Previous, Tail: o.Tail, Timestamps: o.Timestamps, Follow: o.Follow}
	if o.SinceSeconds > 0 {
		opts.Since = s.m.now().Add(-time.Duration(o.SinceSeconds) * time.Second)
	} else if !o.SinceTime.IsZero() {
		opts.Since = o.SinceTime
	}
	return mapErr(s.m.Logs(ctx, ns, name, opts, w))
}
func (s apiService) Stream(ctx context.Context, ns, name string, req api.StreamRequest) (api.StreamTarget, error) {
	t, err := s.m.Stream(ctx, ns, name, req)
	return t, mapErr(err)
}
func (s apiService) Exec(ctx context.Context, ns, name, c string, cmd []string, timeout time.Duration) (api.ExecResult, error) {
	r, err := s.m.Exec(ctx, ns, name, c, cmd, timeout)
	return api.ExecResult{Stdout: r.Stdout, Stderr: r.Stderr, ExitCode: r.ExitCode}, mapErr(err)
}
