// The kubelet's routes, for the node's HTTPS endpoint in node mode: what
// the API server proxies for kubectl logs, exec, attach and port-forward.
// They serve the same PodService as the local API, with the kubelet's
// paths and parameter names; who may call them is decided in front of
// this handler (kubenode.Server: client certificates and
// SubjectAccessReviews).

package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// KubeletHandler routes the kubelet's paths, as the API server calls them
// (pkg/kubelet/server):
//
//	GET      /healthz
//	GET      /containerLogs/{namespace}/{pod}/{container}
//	GET|POST /exec/{namespace}/{pod}[/{uid}]/{container}
//	GET|POST /attach/{namespace}/{pod}[/{uid}]/{container}
//	GET|POST /portForward/{namespace}/{pod}[/{uid}]
//
// A path with a UID answers 404 when the pod of that name has another.
// Requests share the local API's in-flight bound and body limit, and its
// sessions end when either server stops (CloseSessions).
func (s *Server) KubeletHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /containerLogs/{namespace}/{name}/{container}", s.logsWith(func(r *http.Request) (LogOptions, error) {
		return parseKubeletLogOptions(r.URL.Query(), r.PathValue("container"))
	}))
	for _, k := range []struct {
		path string
		kind StreamKind
	}{
		{"/exec/{namespace}/{name}/{container}", StreamExec},
		{"/exec/{namespace}/{name}/{uid}/{container}", StreamExec},
		{"/attach/{namespace}/{name}/{container}", StreamAttach},
		{"/attach/{namespace}/{name}/{uid}/{container}", StreamAttach},
		{"/portForward/{namespace}/{name}", StreamPortForward},
		{"/portForward/{namespace}/{name}/{uid}", StreamPortForward},
	} {
		h := s.uidChecked(s.streamWith(k.kind, func(r *http.Request) (StreamRequest, error) {
			return parseKubeletStreamRequest(k.kind, r.URL.Query(), r.PathValue("container"))
		}))
		mux.HandleFunc("GET "+k.path, h)
		mux.HandleFunc("POST "+k.path, h)
		mux.HandleFunc(k.path, methodNotAllowed("GET, POST"))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no route %s %s", r.Method, r.URL.Path))
	})
	return s.limitWith(make(chan struct{}, KubeletMaxInFlight), mux)
}

// KubeletMaxInFlight bounds the kubelet routes' requests and sessions at
// once, apart from the local API's MaxInFlight.
const KubeletMaxInFlight = 512

// CloseSessions cuts every running exec, attach and port-forward session,
// those of the kubelet routes too: the HTTPS server calls it when it
// stops, as Serve does for the socket.
func (s *Server) CloseSessions() { s.sessions.closeAll() }

// uidChecked answers 404 for a path whose {uid} is not the named pod's:
// the API server names the pod it means, and a pod recreated under the
// same name since is another.
func (s *Server) uidChecked(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if uid := r.PathValue("uid"); uid != "" {
			ns, name := r.PathValue("namespace"), r.PathValue("name")
			if p, ok := s.svc.Get(ns, name); !ok || p.UID != types.UID(uid) {
				writeError(w, http.StatusNotFound, fmt.Sprintf("pod %s/%s with UID %s %s", ns, name, uid, ErrNotFound))
				return
			}
		}
		next(w, r)
	}
}

// parseKubeletStreamRequest reads the query the API server sends a
// kubelet for a session: input, output, error and tty are "1" when on
// (and off when absent), command is repeated, as pkg/registry/core/pod's
// streamParams writes them; port-forward takes its ports from the
// streams' headers (SPDY), or from repeated port= (websockets).
func parseKubeletStreamRequest(kind StreamKind, q url.Values, container string) (StreamRequest, error) {
	req := StreamRequest{Kind: kind, Container: container}
	switch kind {
	case StreamExec, StreamAttach:
		req.Stdin, req.Stdout, req.Stderr, req.TTY = q.Get("input") == "1", q.Get("output") == "1", q.Get("error") == "1", q.Get("tty") == "1"
		if req.TTY {
			req.Stderr = false
		}
		if !req.Stdin && !req.Stdout && !req.Stderr {
			return StreamRequest{}, fmt.Errorf("%w: input, output, error: Required value: at least one of them must be 1", ErrBadRequest)
		}
		if kind == StreamExec {
			if req.Command = q["command"]; len(req.Command) == 0 {
				return StreamRequest{}, fmt.Errorf("%w: command: Required value", ErrBadRequest)
			}
		}
	case StreamPortForward:
		// The API server joins them with commas in one value.
		for _, v := range q["port"] {
			for _, f := range strings.Split(v, ",") {
				p, err := strconv.ParseUint(strings.TrimSpace(f), 10, 16)
				if err != nil || p == 0 {
					return StreamRequest{}, fmt.Errorf("%w: port: Invalid value: %q: want a port number between 1 and 65535", ErrBadRequest, f)
				}
				req.Ports = append(req.Ports, int32(p))
			}
		}
	}
	return req, nil
}

// parseKubeletLogOptions reads /containerLogs' query, the PodLogOptions
// the API server encodes: follow, previous and timestamps ("true" or
// "false"), tailLines, sinceSeconds, sinceTime (RFC 3339) and limitBytes,
// checked as the API's validation does (at most one of sinceSeconds and
// sinceTime; counts not negative).
func parseKubeletLogOptions(q url.Values, container string) (LogOptions, error) {
	o := LogOptions{Container: container, Tail: -1}
	for k, p := range map[string]*bool{"follow": &o.Follow, "previous": &o.Previous, "timestamps": &o.Timestamps} {
		if v := q.Get(k); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return o, fmt.Errorf("%w: %s: Invalid value: %q: want true or false", ErrBadRequest, k, v)
			}
			*p = b
		}
	}
	count := func(name string, positive bool) (int64, bool, error) {
		v := q.Get(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || (positive && n == 0) {
			want := "a non-negative integer"
			if positive {
				want = "a positive integer"
			}
			return 0, false, fmt.Errorf("%w: %s: Invalid value: %q: want %s", ErrBadRequest, name, v, want)
		}
		return n, true, nil
	}
	if n, ok, err := count("tailLines", false); err != nil {
		return o, err
	} else if ok {
		o.Tail = int(min(n, 1<<31-1))
	}
	if n, ok, err := count("limitBytes", true); err != nil {
		return o, err
	} else if ok {
		o.LimitBytes = n
	}
	n, hasSeconds, err := count("sinceSeconds", true)
	if err != nil {
		return o, err
	}
	o.SinceSeconds = n
	if v := q.Get("sinceTime"); v != "" {
		if hasSeconds {
			return o, fmt.Errorf("%w: sinceSeconds, sinceTime: at most one may be given", ErrBadRequest)
		}
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return o, fmt.Errorf("%w: sinceTime: Invalid value: %q: want an RFC 3339 time", ErrBadRequest, v)
		}
		o.SinceTime = t
	}
	return o, nil
}

// userKey carries the authenticated caller of a kubelet route into the
// audit lines.
type userKey struct{}

// WithUser returns ctx carrying the name of the request's authenticated
// user, for the log lines that record what a caller did.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

// UserFrom returns the user WithUser put in ctx.
func UserFrom(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok
}
