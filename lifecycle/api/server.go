package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// DefaultSocket is where `nodeguard run` serves the API and where
// `nodeguard pod` looks for it (--api-socket).
const DefaultSocket = "/run/nodeguard/api.sock"

// Defaults of Options; each zero field takes the value here.
const (
	// DefaultMaxBodyBytes is podspec's limit on one manifest source: a
	// request body is one manifest file, and the exec body is far smaller.
	DefaultMaxBodyBytes = podspec.MaxManifestBytes
	// DefaultMaxInFlight bounds concurrent requests. The API serves an
	// operator and a few scripts on one node: 64 is far above that, and
	// caps what a runaway loop can make the agent hold at 64 bodies of
	// 8 MiB and 64 blocked log streams or execs.
	DefaultMaxInFlight = 64
	// DefaultReadHeaderTimeout: a local client sends its headers in
	// microseconds; five seconds only bounds a stalled or idle-opened one.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds reading a whole request: 8 MiB over a unix
	// socket takes milliseconds.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds a response. Apply only stores the desired
	// state (it does not wait for images or containers), so every
	// non-streaming route answers well within it. Logs renew it per write
	// (a reader that stops reading is dropped after it); exec extends it
	// by the command's timeout.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout closes keep-alive connections the CLI left open.
	DefaultIdleTimeout = time.Minute
	// DefaultShutdownTimeout is how long Serve lets in-flight requests
	// finish after its context ends, well inside systemd's default 90 s
	// stop timeout; log streams and execs still running are then cut.
	DefaultShutdownTimeout = 5 * time.Second
	// MaxExecTimeout bounds one exec: the request holds a slot of
	// MaxInFlight for as long as the command runs. A timeoutSeconds of 0
	// means this.
	MaxExecTimeout = 10 * time.Minute
)

// execGrace is how long past the command's timeout the server waits for
// the runtime to report the kill before it gives up on the exec.
const execGrace = 10 * time.Second

// errorTrailer carries an error that ends a log stream after the status
// line and some log text were already sent.
const errorTrailer = "Nodeguard-Error"

// Options bound the server's work. The zero value means the defaults.
type Options struct {
	MaxBodyBytes      int64 // DefaultMaxBodyBytes
	MaxInFlight       int   // DefaultMaxInFlight
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	ShutdownTimeout   time.Duration
}

func (o Options) withDefaults() Options {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	set(&o.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	set(&o.ReadTimeout, DefaultReadTimeout)
	set(&o.WriteTimeout, DefaultWriteTimeout)
	set(&o.IdleTimeout, DefaultIdleTimeout)
	set(&o.ShutdownTimeout, DefaultShutdownTimeout)
	return o
}

// Stats counts what the server refused.
type Stats struct {
	// RefusedPeers counts connections closed because the peer was neither
	// root nor the server's user, or had no credentials.
	RefusedPeers uint64
	// Busy counts requests answered 503 because MaxInFlight requests
	// were running.
	Busy uint64
	// Sessions is the number of exec, attach and port-forward sessions
	// running now.
	Sessions int
}

// Server serves a PodService on a unix socket. Use NewServer, then Listen
// and Serve (or ListenAndServe).
type Server struct {
	svc  PodService
	log  *slog.Logger
	opts Options
	euid int
	sem  chan struct{}

	refused  atomic.Uint64
	busy     atomic.Uint64
	sessions sessions

	mu   sync.Mutex
	ln   *net.UnixListener
	path string
	id   fileID
}

// NewServer returns a server for svc. It admits root and the process's
// own effective uid. A nil log discards.
func NewServer(svc PodService, log *slog.Logger, opts Options) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts = opts.withDefaults()
	return &Server{
		svc:  svc,
		log:  log,
		opts: opts,
		euid: os.Geteuid(),
		sem:  make(chan struct{}, opts.MaxInFlight),
	}
}

// Stats returns the refusal counters.
func (s *Server) Stats() Stats {
	return Stats{RefusedPeers: s.refused.Load(), Busy: s.busy.Load(), Sessions: s.sessions.count()}
}

// Listen creates the socket at path (mode 0600, see the package
// documentation) and starts accepting connections into the kernel backlog:
// clients can connect when it returns. A stale socket at path is replaced;
// a live one is an error wrapping ErrAlreadyRunning.
func (s *Server) Listen(ctx context.Context, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil {
		return fmt.Errorf("listen on %s: already listening on %s", path, s.path)
	}
	ln, id, err := listenUnix(ctx, path)
	if err != nil {
		return err
	}
	s.ln, s.path, s.id = ln, path, id
	return nil
}

// Serve answers requests on the socket Listen created until ctx ends, then
// shuts down gracefully (ShutdownTimeout), removes the socket if the path
// still names it, and returns nil. Any other end is an error.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	ln, path, id := s.ln, s.path, s.id
	s.mu.Unlock()
	if ln == nil {
		return errors.New("serve API: Listen was not called")
	}
	defer s.removeSocket(path, id)
	srv := &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10, // a few short headers; 1 MiB is the default
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if pc, ok := c.(*peerConn); ok {
				return context.WithValue(ctx, peerKey{}, pc.cred)
			}
			return ctx
		},
	}
	// Shutdown neither waits for nor ends hijacked connections: the
	// sessions are cut when it starts.
	srv.RegisterOnShutdown(s.sessions.closeAll)
	cl := &credListener{
		Listener: ln,
		allow:    func(uid uint32) bool { return allowedPeer(uid, s.euid) },
		refused:  &s.refused,
		log:      s.log,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(cl) }()
	s.log.Info("API serving", "socket", path, "max_in_flight", s.opts.MaxInFlight)

	select {
	case err := <-done:
		return fmt.Errorf("serve API on %s: %w", path, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("API shutdown cut requests still running", "err", err, "timeout", s.opts.ShutdownTimeout)
		srv.Close()
	}
	<-done // http.ErrServerClosed
	s.log.Info("API stopped", "socket", path)
	return nil
}

// ListenAndServe is Listen then Serve.
func (s *Server) ListenAndServe(ctx context.Context, path string) error {
	if err := s.Listen(ctx, path); err != nil {
		return err
	}
	return s.Serve(ctx)
}

// removeSocket removes path if it still names the socket Listen created:
// another server may have replaced it since.
func (s *Server) removeSocket(path string, id fileID) {
	if cur, ok := statID(path); ok && cur == id {
		if err := os.Remove(path); err != nil {
			s.log.Warn("remove API socket", "socket", path, "err", err)
		}
	}
}

// limit admits at most MaxInFlight requests at once, answers the rest 503
// at once (never queues them), and bounds every body.
func (s *Server) limit(next http.Handler) http.Handler {
	return s.limitWith(s.sem, next)
}

// limitWith is limit with a bound of its own: the kubelet routes' sessions
// (logs -f, exec, port-forward) hold their slots while they last, and must
// not take the local API's.
func (s *Server) limitWith(sem chan struct{}, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
			defer func() { <-sem }()
		default:
			s.busy.Add(1)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("%s: %d requests in flight, retry shortly", ErrBusy, cap(sem)))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		attrs := []any{"method", r.Method, "path", r.URL.Path, "status", rec.status(), "duration", time.Since(start)}
		if cred, ok := peerFrom(r.Context()); ok {
			attrs = append(attrs, "peer_uid", cred.Uid, "peer_pid", cred.Pid)
		}
		if rec.status() >= 500 {
			s.log.Warn("API request failed", attrs...)
		} else {
			s.log.Debug("API request", attrs...)
		}
	})
}

// statusRecorder remembers the status code for the request log. Unwrap
// lets http.ResponseController reach the connection (flush, deadlines).
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *statusRecorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}
