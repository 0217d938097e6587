// The node's HTTPS endpoint: the kubelet port, where the API server comes
// for kubectl logs, exec, attach and port-forward. Callers authenticate
// with a client certificate of the cluster's client CA (the API server's
// --kubelet-client-certificate) and are authorized by the API server
// itself, one SubjectAccessReview per user, verb and subresource (nodes/
// proxy), as the kubelet's webhook authorizer; anonymous requests are
// refused, as a kubelet's with anonymous auth off.

package kubenode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/keyutil"

	"github.com/nodeguard/nodeguard/lifecycle/api"
)

// ServerConfig is the node endpoint's.
type ServerConfig struct {
	// Client makes the SubjectAccessReviews, with the node's credentials
	// (the Node authorizer lets a node create them).
	Client kubernetes.Interface
	// NodeName is the Node the reviews ask about (nodes/proxy of it).
	NodeName string
	// Addresses are the IPs to listen on ("": every address, IPv4 and
	// IPv6, as the kubelet's default 0.0.0.0); Port the port (DefaultPort
	// when 0).
	Addresses []string
	Port      int32
	// CertFile and KeyFile are the serving certificate and key (the
	// kubelet's tlsCertFile, tlsPrivateKeyFile). Empty: a self-signed
	// one for the node's name and Addresses, made once in CertDir as the
	// kubelet's kubelet.crt (an API server that verifies kubelets'
	// certificates, --kubelet-certificate-authority, does not take it).
	CertFile, KeyFile string
	CertDir           string
	// Bootstrap (the kubelet's serverTLSBootstrap) asks the API server
	// for the serving certificate instead (servingcert.go), kept in
	// CertDir; until one is approved and issued, handshakes fail (logged
	// once at start). It excludes CertFile.
	Bootstrap bool
	// CertIPs are named in the self-signed certificate besides the
	// Addresses (the node's IPs when it listens on 0.0.0.0).
	CertIPs []string
	// ClientCAFile holds the CAs whose client certificates authenticate
	// (the kubelet's authentication.x509.clientCAFile). Empty: nobody
	// authenticates and every request is refused 401.
	ClientCAFile string
	// Handler serves what is authorized (api.Server.KubeletHandler).
	Handler http.Handler
	// OnStop runs when the server stops (api.Server.CloseSessions): the
	// sessions the handler hijacked outlive http.Server.Shutdown.
	OnStop func()
	Log    *slog.Logger
}

// Server is the node's HTTPS endpoint.
type Server struct {
	cfg ServerConfig
	tls *tls.Config
	// certs is the bootstrapped serving certificate's manager, or nil.
	certs certificate.Manager
	ca    *caFile
	authz *reviewCache
	log   *slog.Logger
	lns   []net.Listener
}

// The SubjectAccessReview cache, the kubelet's defaults
// (authorization.webhook.cacheAuthorizedTTL / cacheUnauthorizedTTL).
const (
	authorizedTTL   = 5 * time.Minute
	unauthorizedTTL = 30 * time.Second
	reviewCacheMax  = 1024
	reviewTimeout   = 10 * time.Second
)

// NewServer loads or makes the serving certificate, reads the client
// CAs and listens on every address: a port taken is an error now, not
// after the node registered.
func NewServer(cfg ServerConfig) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultPort
	}
	if cfg.Handler == nil || cfg.Client == nil || cfg.NodeName == "" {
		return nil, errors.New("node endpoint: Handler, Client and NodeName are required")
	}
	if len(cfg.Addresses) == 0 {
		return nil, errors.New("node endpoint: no address to listen on")
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	var certs certificate.Manager
	if cfg.Bootstrap {
		if cfg.CertFile != "" || cfg.KeyFile != "" {
			return nil, errors.New("node endpoint: serverTLSBootstrap and tlsCertFile/tlsPrivateKeyFile: one or the other")
		}
		m, err := newServingCertManager(cfg)
		if err != nil {
			return nil, err
		}
		certs = m
		tc.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := m.Current(); c != nil {
				return c, nil
			}
			return nil, errNoServingCert
		}
	} else {
		cert, err := servingCert(cfg)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if cfg.ClientCAFile != "" {
		pool, err := certutil.NewPool(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("node endpoint: clientCAFile: %w", err)
		}
		// Verified when given: a request without one is answered 401 by
		// the handler, with a reason, rather than by a failed handshake.
		tc.ClientAuth, tc.ClientCAs = tls.VerifyClientCertIfGiven, pool
	} else {
		cfg.Log.Warn("node endpoint: no authentication.x509.clientCAFile; every request to it is refused (the API server's kubectl logs, exec and port-forward fail)")
	}
	s := &Server{cfg: cfg, tls: tc, certs: certs, log: cfg.Log, authz: &reviewCache{entries: map[reviewKey]reviewEntry{}}}
	if cfg.ClientCAFile != "" {
		s.ca = &caFile{path: cfg.ClientCAFile, pool: tc.ClientCAs, log: cfg.Log}
		s.ca.stamp, _ = fileStamp(cfg.ClientCAFile)
		// Each handshake takes the CA file as it is now, as the kubelet's
		// dynamic client CA: a rotated CA needs no restart.
		tc.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			c := tc.Clone()
			c.GetConfigForClient = nil
			c.ClientCAs = s.ca.current()
			return c, nil
		}
	}
	for _, a := range cfg.Addresses {
		addr := net.JoinHostPort(a, strconv.Itoa(int(cfg.Port)))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range s.lns {
				l.Close()
			}
			return nil, fmt.Errorf("node endpoint: %w", err)
		}
		s.lns = append(s.lns, ln)
	}
	return s, nil
}

// servingCert is cfg's certificate files, or the self-signed pair in
// CertDir, made when absent.
func servingCert(cfg ServerConfig) (tls.Certificate, error) {
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return tls.Certificate{}, errors.New("node endpoint: tlsCertFile and tlsPrivateKeyFile go together")
	}
	certFile, keyFile := cfg.CertFile, cfg.KeyFile
	if certFile == "" {
		if cfg.CertDir == "" {
			return tls.Certificate{}, errors.New("node endpoint: no tlsCertFile and no certificate directory")
		}
		certFile, keyFile = filepath.Join(cfg.CertDir, "nodeguard.crt"), filepath.Join(cfg.CertDir, "nodeguard.key")
		if !usableSelfSigned(certFile, keyFile, append(slices.Clone(cfg.Addresses), cfg.CertIPs...)) {
			var ips []net.IP
			for _, a := range append(slices.Clone(cfg.Addresses), cfg.CertIPs...) {
				if ip := net.ParseIP(a); ip != nil && !ip.IsUnspecified() && !slices.ContainsFunc(ips, ip.Equal) {
					ips = append(ips, ip)
				}
			}
			crt, key, err := certutil.GenerateSelfSignedCertKey(cfg.NodeName, ips, nil)
			if err != nil {
				return tls.Certificate{}, fmt.Errorf("node endpoint: self-signed certificate: %w", err)
			}
			if err := os.MkdirAll(cfg.CertDir, 0o700); err != nil {
				return tls.Certificate{}, fmt.Errorf("node endpoint: %w", err)
			}
			if err := certutil.WriteCert(certFile, crt); err != nil {
				return tls.Certificate{}, fmt.Errorf("node endpoint: %w", err)
			}
			if err := keyutil.WriteKey(keyFile, key); err != nil {
				return tls.Certificate{}, fmt.Errorf("node endpoint: %w", err)
			}
			cfg.Log.Info("node endpoint: made a self-signed serving certificate", "cert", certFile)
		}
	}
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("node endpoint: serving certificate: %w", err)
	}
	return c, nil
}

// caFile is the client CA file, read again when it changes (size or
// modification time); a new content that does not parse keeps the CAs
// read before, with a warning.
type caFile struct {
	path  string
	log   *slog.Logger
	mu    sync.Mutex
	stamp string
	pool  *x509.CertPool
}

func fileStamp(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%d/%d", fi.Size(), fi.ModTime().UnixNano()), nil
}

func (c *caFile) current() *x509.CertPool {
	c.mu.Lock()
	defer c.mu.Unlock()
	stamp, err := fileStamp(c.path)
	if err != nil || stamp == c.stamp {
		return c.pool
	}
	c.stamp = stamp
	pool, err := certutil.NewPool(c.path)
	if err != nil {
		c.log.Warn("node endpoint: clientCAFile changed and does not load; keeping the CAs read before", "file", c.path, "err", err)
		return c.pool
	}
	c.log.Info("node endpoint: clientCAFile reloaded", "file", c.path)
	c.pool = pool
	return pool
}

// usableSelfSigned says whether the self-signed pair made earlier may
// serve again: readable, valid for another day, and naming every address
// listened on (an address the node has since changed is remade).
func usableSelfSigned(certFile, keyFile string, addrs []string) bool {
	if ok, _ := certutil.CanReadCertAndKey(certFile, keyFile); !ok {
		return false
	}
	certs, err := certutil.CertsFromFile(certFile)
	if err != nil || len(certs) == 0 {
		return false
	}
	leaf := certs[0]
	if time.Now().Add(24 * time.Hour).After(leaf.NotAfter) {
		return false
	}
	for _, a := range addrs {
		ip := net.ParseIP(a)
		if ip == nil || ip.IsUnspecified() {
			continue // "" or 0.0.0.0: the CertIPs name the node
		}
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// Addrs are where the server listens (the port resolved).
func (s *Server) Addrs() []net.Addr {
	out := make([]net.Addr, len(s.lns))
	for i, l := range s.lns {
		out[i] = l.Addr()
	}
	return out
}

// Serve answers until ctx ends, then shuts down (5 s for requests in
// flight) and cuts the sessions.
func (s *Server) Serve(ctx context.Context) error {
	// Requests' contexts end when shutdown starts: a logs -f would
	// otherwise hold Shutdown for its whole bound.
	base, stopBase := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBase()
	srv := &http.Server{
		BaseContext:       func(net.Listener) context.Context { return base },
		Handler:           s.authenticated(s.cfg.Handler),
		TLSConfig:         s.tls,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}

	if s.certs != nil {
		s.certs.Start()
		defer s.certs.Stop()
		if s.certs.Current() == nil {
			s.log.Info("node endpoint: asking the API server for a serving certificate (serverTLSBootstrap); until its CertificateSigningRequest is approved, kubectl logs, exec and port-forward fail",
				"signer", "kubernetes.io/kubelet-serving", "dir", s.cfg.CertDir)
		}
	}
	done := make(chan error, len(s.lns))
	for _, ln := range s.lns {
		go func() { done <- srv.Serve(tls.NewListener(ln, s.tls)) }()
	}
	s.log.Info("node endpoint serving", "addrs", s.Addrs(), "client_ca", s.cfg.ClientCAFile)
	var err error
	select {
	case err = <-done:
		err = fmt.Errorf("node endpoint: %w", err)
	case <-ctx.Done():
	}
	stopBase()
	if s.cfg.OnStop != nil {
		s.cfg.OnStop() // the hijacked sessions, which Shutdown does not end
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		srv.Close()
	}
	return err
}

// authenticated lets through the requests of a verified client
// certificate whose user the API server authorizes; the others are 401
// (no certificate) or 403 (not allowed), with the reason.
func (s *Server) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "Unauthorized: a client certificate of the cluster's client CA is required", http.StatusUnauthorized)
			return
		}
		user := userOf(r.TLS.PeerCertificates[0])
		if user.name == "" {
			// As the API server's x509 authenticator: no user, no access.
			http.Error(w, "Unauthorized: the client certificate has no common name", http.StatusUnauthorized)
			return
		}
		verb, subs, ok := requestAttributes(r)
		if !ok {
			w.Header().Set("Allow", "GET, HEAD, POST")
			http.Error(w, fmt.Sprintf("Method %s not allowed", r.Method), http.StatusMethodNotAllowed)
			return
		}
		var (
			allowed bool
			reason  string
			err     error
		)
		for _, sub := range subs {
			if allowed, reason, err = s.review(r.Context(), user, verb, sub); err != nil || allowed {
				break
			}
		}
		switch {
		case err != nil:
			s.log.Warn("node endpoint: authorization failed", "user", user.name, "verb", verb, "path", r.URL.Path, "err", err)
			http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=nodes, subresource=%s): %v", user.name, verb, subs[0], err), http.StatusInternalServerError)
			return
		case !allowed:
			s.log.Info("node endpoint: request forbidden", "user", user.name, "verb", verb, "path", r.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=%s)", user.name, verb, subs[0]), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r.WithContext(api.WithUser(r.Context(), user.name)))
	})
}

type certUser struct {
	name   string
	groups []string
}

// userOf is the kubelet's (and API server's) x509 user: the subject's
// common name, its organizations the groups, and system:authenticated,
// as every authenticated user has.
func userOf(c *x509.Certificate) certUser {
	groups := slices.Clone(c.Subject.Organization)
	if !slices.Contains(groups, "system:authenticated") {
		groups = append(groups, "system:authenticated")
	}
	return certUser{name: c.Subject.CommonName, groups: groups}
}

// requestAttributes are the verb and the nodes subresources a request is
// authorized against, as the kubelet's: GET and HEAD get, POST create;
// the subresource healthz for /healthz (then proxy, the kubelet's
// fallback), proxy for everything else this endpoint serves. Sessions
// (/exec, /attach, /portForward) are create whatever the method: a
// websocket session is a GET, and `get nodes/proxy` (a monitoring
// role's) must not run commands in the node's containers. ok is false
// for a method the endpoint has no use for.
func requestAttributes(r *http.Request) (verb string, subresources []string, ok bool) {
	switch r.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodGet, http.MethodHead:
		verb = "get"
	default:
		return "", nil, false
	}
	p := r.URL.Path
	for _, session := range []string{"/exec/", "/attach/", "/portForward/"} {
		if strings.HasPrefix(p, session) {
			verb = "create"
		}
	}
	if p == "/healthz" || strings.HasPrefix(p, "/healthz/") {
		return verb, []string{"healthz", "proxy"}, true
	}
	return verb, []string{"proxy"}, true
}

type reviewKey struct {
	user, groups, verb, sub string
}

type reviewEntry struct {
	allowed bool
	reason  string
	until   time.Time
}

// reviewCache holds the API server's answers for their TTLs.
type reviewCache struct {
	mu      sync.Mutex
	entries map[reviewKey]reviewEntry
}

// review asks the API server whether user may verb nodes/sub of this
// node, or answers from the cache.
func (s *Server) review(ctx context.Context, u certUser, verb, sub string) (bool, string, error) {
	k := reviewKey{user: u.name, groups: strings.Join(u.groups, "\x00"), verb: verb, sub: sub}
	now := time.Now()
	c := s.authz
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.allowed, e.reason, nil
	}
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	res, err := s.cfg.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: u.name, Groups: u.groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Verb: verb, Group: "", Version: "v1", Resource: "nodes", Subresource: sub, Name: s.cfg.NodeName,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("SubjectAccessReview: %w", err)
	}
	e = reviewEntry{allowed: res.Status.Allowed, reason: res.Status.Reason, until: now.Add(unauthorizedTTL)}
	if e.allowed {
		e.until = now.Add(authorizedTTL)
	}
	c.mu.Lock()
	if len(c.entries) >= reviewCacheMax {
		for k, old := range c.entries {
			if !now.Before(old.until) {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= reviewCacheMax {
			clear(c.entries)
		}
	}
	c.entries[k] = e
	c.mu.Unlock()
	return e.allowed, e.reason, nil
}
