package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"

	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// handler routes the API. Every path also has a method-less pattern so
// that a wrong method gets a JSON 405 with Allow, and "/" answers a JSON
// 404: clients only ever see {"error": ...} bodies.
func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/pods", s.apply)
	mux.HandleFunc("GET /v1/pods", s.list)
	mux.HandleFunc("/v1/pods", methodNotAllowed("GET, POST"))
	mux.HandleFunc("GET /v1/pods/{namespace}/{name}", s.get)
	mux.HandleFunc("DELETE /v1/pods/{namespace}/{name}", s.delete)
	mux.HandleFunc("/v1/pods/{namespace}/{name}", methodNotAllowed("GET, DELETE"))
	mux.HandleFunc("GET /v1/pods/{namespace}/{name}/log", s.logs)
	mux.HandleFunc("/v1/pods/{namespace}/{name}/log", methodNotAllowed("GET"))
	mux.HandleFunc("POST /v1/pods/{namespace}/{name}/exec", s.exec)
	mux.HandleFunc("GET /v1/pods/{namespace}/{name}/exec", s.stream(StreamExec))
	mux.HandleFunc("/v1/pods/{namespace}/{name}/exec", methodNotAllowed("GET, POST"))
	// Sessions are GET or POST, as the API server's pods/attach and
	// pods/portforward (client-go's SPDY executor sends POST).
	for _, kind := range []StreamKind{StreamAttach, StreamPortForward} {
		route := "/v1/pods/{namespace}/{name}/" + string(kind)
		mux.HandleFunc("GET "+route, s.stream(kind))
		mux.HandleFunc("POST "+route, s.stream(kind))
		mux.HandleFunc(route, methodNotAllowed("GET, POST"))
	}
	mux.HandleFunc("GET /v1/events", s.events)
	mux.HandleFunc("/v1/events", methodNotAllowed("GET"))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	return s.limit(mux)
}

// apply: POST /v1/pods?source=S with a YAML or JSON manifest as the body.
func (s *Server) apply(w http.ResponseWriter, r *http.Request) {
	source := r.URL.Query().Get("source")
	if source == "" {
		source = "api"
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("%s: %s: more than %d bytes", source, ErrTooLarge, mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, fmt.Sprintf("read manifest %s: %v", source, err))
		return
	}
	pods, err := podspec.Parse(bytes.NewReader(body), source)
	if err != nil {
		if errors.Is(err, podspec.ErrTooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, err.Error())
			return
		}
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	if len(pods) == 0 {
		writeError(w, http.StatusUnprocessableEntity, source+": no pods in the manifest")
		return
	}
	applied, err := s.svc.Apply(r.Context(), pods, source)
	if err != nil {
		// Name the source: a CLI applying a directory sends many.
		writeError(w, statusOf(err), source+": "+err.Error())
		return
	}
	for _, p := range applied {
		s.log.Info("pod applied through the API", s.audit(r, "namespace", p.Namespace, "pod", p.Name, "uid", p.UID, "source", source)...)
	}
	writeJSON(w, http.StatusOK, podList(applied))
}

// list: GET /v1/pods.
func (s *Server) list(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, podList(s.svc.List()))
}

// get: GET /v1/pods/{namespace}/{name}.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	p, ok := s.svc.Get(ns, name)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("pod %s/%s %s", ns, name, ErrNotFound))
		return
	}
	writeJSON(w, http.StatusOK, typedPod(p))
}

// delete: DELETE /v1/pods/{namespace}/{name}; 204 when done.
func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	if err := s.svc.Delete(r.Context(), ns, name); err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("pod deleted through the API", s.audit(r, "namespace", ns, "pod", name)...)
	w.WriteHeader(http.StatusNoContent)
}

// logs: GET /v1/pods/{namespace}/{name}/log?container=C&tail=N&follow=
// true&previous=true&timestamps=true&sinceSeconds=S streams text. An error before the first byte is a JSON error with its status; an
// error after it ends the stream with the Nodeguard-Error trailer, so that
// a truncated log is never mistaken for a whole one.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	s.logsWith(func(r *http.Request) (LogOptions, error) { return parseLogOptions(r.URL.Query()) })(w, r)
}

// logsWith is logs with the query read by parse: the kubelet's
// /containerLogs route names its parameters otherwise (kubelet.go).
func (s *Server) logsWith(parse func(*http.Request) (LogOptions, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { s.serveLogs(w, r, parse) }
}

func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request, parse func(*http.Request) (LogOptions, error)) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	opts, err := parse(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Trailer", errorTrailer)
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), timeout: s.opts.WriteTimeout}
	// The deadlines are this response's: a connection the client reuses
	// (the API server's to the kubelet routes, on a server without a
	// WriteTimeout of its own) must not keep the last one.
	defer sw.rc.SetWriteDeadline(time.Time{})
	var out io.Writer = sw
	ctx := r.Context()
	if opts.LimitBytes > 0 {
		// The kubelet's limitBytes: the log is cut after that many bytes,
		// mid-line if need be, and the stream ends there, a follow too.
		lctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ctx = lctx
		out = &limitWriter{w: sw, left: opts.LimitBytes, done: cancel}
	}
	err = s.svc.Logs(ctx, ns, name, opts, out)
	if lw, ok := out.(*limitWriter); ok && lw.left == 0 && (err == nil || errors.Is(err, errLimitReached) || errors.Is(err, context.Canceled)) && r.Context().Err() == nil {
		err = nil
	}
	// The end of the stream (last chunk, trailer) is written after Logs
	// returns, which may be long after the last write's deadline.
	if err := sw.rc.SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout)); err != nil {
		s.log.Warn("API log stream: set write deadline", "err", err)
	}
	switch {
	case err == nil && !sw.started:
		h.Del("Trailer")
		w.WriteHeader(http.StatusOK)
	case err == nil:
	case !sw.started:
		h.Del("Trailer")
		h.Del("X-Content-Type-Options")
		s.fail(w, err)
	default:
		// Header values are one line.
		h.Set(errorTrailer, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
}

// streamWriter sends each write at once, and gives each write its own
// deadline: a log stream has no total deadline, but a reader that stops
// reading is dropped after timeout.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	started bool
}

func (sw *streamWriter) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout)); err != nil {
		return 0, fmt.Errorf("set write deadline: %w", err)
	}
	sw.started = true
	n, err := sw.w.Write(b)
	if err != nil {
		return n, err
	}
	return n, sw.rc.Flush()
}

// errLimitReached ends a log stream at its limitBytes.
var errLimitReached = errors.New("limitBytes reached")

// limitWriter passes at most left bytes to w, then fails every write and
// calls done (which cancels a follow that would otherwise wait for the
// container's next line).
type limitWriter struct {
	w    io.Writer
	left int64
	done func()
}

func (l *limitWriter) Write(b []byte) (int, error) {
	if l.left <= 0 {
		l.done()
		return 0, errLimitReached
	}
	cut := false
	if int64(len(b)) > l.left {
		b, cut = b[:l.left], true
	}
	n, err := l.w.Write(b)
	l.left -= int64(n)
	if err != nil {
		return n, err
	}
	if cut || l.left == 0 {
		l.done()
		return n, errLimitReached
	}
	return n, nil
}

// exec: POST /v1/pods/{namespace}/{name}/exec?container=C with an
// ExecRequest body; answers an ExecResult, whatever the exit code. An
// upgrade request is an interactive session instead (stream).
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	if httpstream.IsUpgradeRequest(r) {
		s.stream(StreamExec)(w, r)
		return
	}
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	var req ExecRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if mbe, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("exec body: %s: more than %d bytes", ErrTooLarge, mbe.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: exec body: %v", ErrBadRequest, err))
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: exec body: more than one JSON value", ErrBadRequest))
		return
	}
	if len(req.Command) == 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: command: Required value", ErrBadRequest))
		return
	}
	maxSeconds := int64(MaxExecTimeout / time.Second)
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxSeconds {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: timeoutSeconds: Invalid value: %d: must be between 0 (meaning %d) and %d",
			ErrBadRequest, req.TimeoutSeconds, maxSeconds, maxSeconds))
		return
	}
	timeout := time.Duration(req.TimeoutSeconds) * time.Second
	if timeout == 0 {
		timeout = MaxExecTimeout
	}
	// The command may run for its whole timeout before the answer is
	// written: extend the write deadline past it.
	if err := http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout + execGrace + s.opts.WriteTimeout)); err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("set write deadline: %v", err))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout+execGrace)
	defer cancel()
	res, err := s.svc.Exec(ctx, ns, name, r.URL.Query().Get("container"), req.Command, timeout)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.log.Info("exec in pod through the API", s.audit(r, "namespace", ns, "pod", name,
		"container", r.URL.Query().Get("container"), "command", req.Command, "exit_code", res.ExitCode)...)
	writeJSON(w, http.StatusOK, res)
}

// fail answers a PodService error with its status.
func (s *Server) fail(w http.ResponseWriter, err error) {
	writeError(w, statusOf(err), err.Error())
}

func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, ErrInvalid):
		return http.StatusUnprocessableEntity
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// audit appends the peer's credentials to the attributes of a log line
// about a change.
func (s *Server) audit(r *http.Request, attrs ...any) []any {
	if cred, ok := peerFrom(r.Context()); ok {
		attrs = append(attrs, "peer_uid", cred.Uid, "peer_pid", cred.Pid)
	}
	if u, ok := UserFrom(r.Context()); ok {
		attrs = append(attrs, "user", u)
	}
	return attrs
}

// errorBody is every error response: {"error": "..."}.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code = http.StatusInternalServerError
		b, _ = json.Marshal(errorBody{Error: fmt.Sprintf("encode response: %v", err)})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow))
	}
}

// typedPod is a shallow copy of p with kind and apiVersion set, as kubectl
// prints it: the service's pod is not modified.
func typedPod(p *corev1.Pod) corev1.Pod {
	c := *p
	c.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	return c
}

// podList is a v1 PodList of pods, ordered by namespace and name (the key
// is unique, so the order is total).
func podList(pods []*corev1.Pod) corev1.PodList {
	l := corev1.PodList{
		TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"},
		Items:    make([]corev1.Pod, 0, len(pods)),
	}
	for _, p := range pods {
		l.Items = append(l.Items, typedPod(p))
	}
	slices.SortFunc(l.Items, func(a, b corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return l
}
