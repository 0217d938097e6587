package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodeguard/nodeguard/lifecycle/api"
	"github.com/nodeguard/nodeguard/lifecycle/api/apitest"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

const webYAML = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: nginx
    image: nginx:1.27
    resources:
      limits: {cpu: 100m, memory: 64Mi}
  - name: sidecar
    image: busybox:1.36
---
apiVersion: v1
kind: Pod
metadata:
  name: db
  namespace: data
spec:
  containers:
  - name: pg
    image: postgres:17
`

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newFake() *apitest.Fake { return apitest.NewFake(func() time.Time { return epoch }) }

// start serves a fake with default options and returns a client.
func start(t *testing.T, f *apitest.Fake, opts api.Options) (*api.Server, *api.Client, string) {
	t.Helper()
	srv, path := apitest.Serve(t, f, opts)
	c := api.NewClient(path)
	t.Cleanup(func() { c.Close() })
	return srv, c, path
}

// raw sends one request over the socket and returns the status, headers
// and body, for what the Client hides (status codes, raw JSON).
func raw(t *testing.T, path, method, target string, body io.Reader) (int, http.Header, []byte) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://nodeguard"+target, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func TestRoutes(t *testing.T) {
	f := newFake()
	f.ExecFunc = func(_ context.Context, ns, name, container string, cmd []string, timeout time.Duration) (api.ExecResult, error) {
		return api.ExecResult{
			Stdout:   fmt.Appendf(nil, "%s/%s/%s %q %v\n", ns, name, container, cmd, timeout),
			Stderr:   []byte{0xff, 0x00, 'e'}, // not text: must survive the trip
			ExitCode: 3,
		}, nil
	}
	_, c, path := start(t, f, api.Options{})
	ctx := t.Context()

	t.Run("apply returns the applied pods, defaulted and with UIDs", func(t *testing.T) {
		l, err := c.Apply(ctx, []byte(webYAML), "/etc/pods/web.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if l.Kind != "PodList" || l.APIVersion != "v1" || len(l.Items) != 2 {
			t.Fatalf("got %s %s with %d items", l.APIVersion, l.Kind, len(l.Items))
		}
		for _, p := range l.Items {
			if p.UID == "" || p.Kind != "Pod" || p.APIVersion != "v1" {
				t.Errorf("%s/%s: uid %q kind %q apiVersion %q", p.Namespace, p.Name, p.UID, p.Kind, p.APIVersion)
			}
		}
		if l.Items[1].Namespace != "default" || l.Items[1].Spec.RestartPolicy != corev1.RestartPolicyAlways {
			t.Errorf("web not defaulted: namespace %q restartPolicy %q", l.Items[1].Namespace, l.Items[1].Spec.RestartPolicy)
		}
		if src, _ := f.Source("default", "web"); src != "/etc/pods/web.yaml" {
			t.Errorf("the service got source %q", src)
		}
	})

	t.Run("apply of the same manifest again keeps the UIDs", func(t *testing.T) {
		before, _ := c.Get(ctx, "default", "web")
		if _, err := c.Apply(ctx, []byte(webYAML), "/etc/pods/web.yaml"); err != nil {
			t.Fatal(err)
		}
		after, _ := c.Get(ctx, "default", "web")
		if before.UID != after.UID {
			t.Errorf("uid changed from %s to %s", before.UID, after.UID)
		}
	})

	t.Run("list answers a v1 PodList ordered by namespace and name", func(t *testing.T) {
		code, h, body := raw(t, path, "GET", "/v1/pods", nil)
		if code != 200 || h.Get("Content-Type") != "application/json" {
			t.Fatalf("status %d, content type %q", code, h.Get("Content-Type"))
		}
		var l corev1.PodList
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range l.Items {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		if l.Kind != "PodList" || l.APIVersion != "v1" || strings.Join(names, " ") != "data/db default/web" {
			t.Fatalf("got %s %s %v", l.APIVersion, l.Kind, names)
		}
	})

	t.Run("get answers a v1 Pod with its status", func(t *testing.T) {
		p, err := c.Get(ctx, "default", "web")
		if err != nil {
			t.Fatal(err)
		}
		if p.Kind != "Pod" || p.APIVersion != "v1" || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.Status.QOSClass != corev1.PodQOSBurstable {
			t.Fatalf("got kind %q apiVersion %q phase %q ip %q qos %q", p.Kind, p.APIVersion, p.Status.Phase, p.Status.PodIP, p.Status.QOSClass)
		}
	})

	t.Run("logs stream the last lines of the chosen container", func(t *testing.T) {
		f.SetLogs("default", "web", "sidecar", "one\ntwo\nthree\n")
		var b bytes.Buffer
		if err := c.Logs(ctx, "default", "web", api.LogOptions{Container: "sidecar", Tail: 2}, &b); err != nil {
			t.Fatal(err)
		}
		if b.String() != "two\nthree\n" {
			t.Fatalf("got %q", b.String())
		}
		code, h, _ := raw(t, path, "GET", "/v1/pods/default/web/log?container=sidecar", nil)
		if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
			t.Fatalf("status %d, content type %q", code, h.Get("Content-Type"))
		}
	})

	t.Run("logs of the default container need no container name", func(t *testing.T) {
		f.SetLogs("default", "web", "nginx", "started\n")
		var b bytes.Buffer
		if err := c.Logs(ctx, "default", "web", api.LogOptions{Tail: -1}, &b); err != nil || b.String() != "started\n" {
			t.Fatalf("got %q, %v", b.String(), err)
		}
	})

	t.Run("exec answers output and exit code, and a failing command is not an error", func(t *testing.T) {
		res, err := c.Exec(ctx, "default", "web", "sidecar", []string{"ls", "-l", "/"}, 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if want := "default/web/sidecar [\"ls\" \"-l\" \"/\"] 2s\n"; string(res.Stdout) != want {
			t.Errorf("stdout %q, want %q (the timeout rounds up to whole seconds)", res.Stdout, want)
		}
		if !bytes.Equal(res.Stderr, []byte{0xff, 0x00, 'e'}) || res.ExitCode != 3 {
			t.Errorf("stderr %q exit code %d", res.Stderr, res.ExitCode)
		}
	})

	t.Run("exec without a timeout gets the server's maximum", func(t *testing.T) {
		res, err := c.Exec(ctx, "default", "web", "", []string{"true"}, 0)
		if err != nil || !strings.HasSuffix(string(res.Stdout), " "+api.MaxExecTimeout.String()+"\n") {
			t.Fatalf("got %q, %v", res.Stdout, err)
		}
	})

	t.Run("delete removes the pod and answers 204", func(t *testing.T) {
		code, _, body := raw(t, path, "DELETE", "/v1/pods/data/db", nil)
		if code != http.StatusNoContent || len(body) != 0 {
			t.Fatalf("status %d body %q", code, body)
		}
		if err := c.Delete(ctx, "default", "web"); err != nil {
			t.Fatal(err)
		}
		l, err := c.List(ctx)
		if err != nil || len(l.Items) != 0 {
			t.Fatalf("after delete: %v, %v", l, err)
		}
	})
}

func TestErrorAnswers(t *testing.T) {
	f := newFake()
	_, c, path := start(t, f, api.Options{})
	ctx := t.Context()
	if _, err := c.Apply(ctx, []byte(webYAML), "web.yaml"); err != nil {
		t.Fatal(err)
	}

	clientCases := []struct {
		name   string
		call   func() error
		target error
		code   int
		text   string
	}{
		{"get of an unknown pod is 404", func() error { _, err := c.Get(ctx, "default", "nope"); return err }, api.ErrNotFound, 404, "pod default/nope not found"},
		{"delete of an unknown pod is 404", func() error { return c.Delete(ctx, "default", "nope") }, api.ErrNotFound, 404, "pod default/nope: not found"},
		{"logs of an unknown pod are 404", func() error { return c.Logs(ctx, "other", "web", api.LogOptions{Tail: -1}, io.Discard) }, api.ErrNotFound, 404, "pod other/web: not found"},
		{"logs of an unknown container are 404", func() error {
			return c.Logs(ctx, "default", "web", api.LogOptions{Container: "nope", Tail: -1}, io.Discard)
		}, api.ErrNotFound, 404, "container nope in pod default/web: not found"},
		{"exec in an unknown pod is 404", func() error { _, err := c.Exec(ctx, "default", "nope", "", []string{"ls"}, 0); return err }, api.ErrNotFound, 404, "pod default/nope: not found"},
		{"exec without a command is 400", func() error { _, err := c.Exec(ctx, "default", "web", "", nil, 0); return err }, api.ErrBadRequest, 400, "command: Required value"},
		{"exec above the maximum timeout is 400", func() error {
			_, err := c.Exec(ctx, "default", "web", "", []string{"sleep", "1d"}, api.MaxExecTimeout+time.Second)
			return err
		}, api.ErrBadRequest, 400, "timeoutSeconds: Invalid value: 601"},
		{"a name with a slash is one unknown name, not another route", func() error { _, err := c.Get(ctx, "default", "web/log"); return err }, api.ErrNotFound, 404, "pod default/web/log not found"},
	}
	for _, tc := range clientCases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			se, ok := errors.AsType[*api.StatusError](err)
			if !ok || !errors.Is(err, tc.target) || se.Code != tc.code || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("got %v (%T), want %d wrapping %v and saying %q", err, err, tc.code, tc.target, tc.text)
			}
		})
	}

	rawCases := []struct {
		name, method, target, body string
		code                       int
		text                       string
		allow                      string
	}{
		{"an unknown route is a JSON 404", "GET", "/v1/nodes", "", 404, "no route GET /v1/nodes", ""},
		{"a wrong method is a JSON 405 with Allow", "PUT", "/v1/pods/default/web", "", 405, "method PUT not allowed", "GET, DELETE"},
		{"a wrong method on the list is a JSON 405", "DELETE", "/v1/pods", "", 405, "not allowed", "GET, POST"},
		{"a tail that is not a number is 400", "GET", "/v1/pods/default/web/log?tail=ten", "", 400, `tail "ten"`, ""},
		{"an exec body with an unknown field is 400", "POST", "/v1/pods/default/web/exec", `{"cmd":["ls"]}`, 400, `unknown field "cmd"`, ""},
		{"an exec body of two values is 400", "POST", "/v1/pods/default/web/exec", `{"command":["ls"]}{}`, 400, "more than one JSON value", ""},
	}
	for _, tc := range rawCases {
		t.Run(tc.name, func(t *testing.T) {
			code, h, body := raw(t, path, tc.method, tc.target, strings.NewReader(tc.body))
			var eb struct{ Error string }
			if err := json.Unmarshal(body, &eb); err != nil {
				t.Fatalf("body is not JSON: %q", body)
			}
			if code != tc.code || !strings.Contains(eb.Error, tc.text) || h.Get("Allow") != tc.allow {
				t.Fatalf("got %d %q Allow %q, want %d saying %q Allow %q", code, eb.Error, h.Get("Allow"), tc.code, tc.text, tc.allow)
			}
		})
	}
}

func TestApplyRefusesBadManifests(t *testing.T) {
	const good = "apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\nspec:\n  containers: [{name: c, image: busybox:1.36}]\n"
	cases := []struct {
		name     string
		manifest string
		text     []string
	}{
		{"an unknown field is named with its path",
			"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, imagee: busybox}]\n",
			[]string{"web.yaml: document 1: spec.containers[0].imagee: unknown field"}},
		{"a bad quantity is named with its path",
			"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, image: busybox, resources: {limits: {memory: 12Zi}}}]\n",
			[]string{"spec.containers[0].resources.limits[memory]"}},
		{"a pod that fails validation is refused by the service with its field errors",
			"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c}]\n",
			[]string{"web.yaml: invalid:\npod default/a: spec.containers[0].image: Required value"}},
		{"YAML that does not parse is refused with its line",
			"apiVersion: v1\nkind: Pod\nmetadata: {name: a\n",
			[]string{"web.yaml: document 1:", "line"}},
		{"a manifest without pods is refused",
			"# nothing here\n",
			[]string{"web.yaml: no pods in the manifest"}},
		{"one broken document refuses the good ones beside it",
			good + "---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: c, image: x, bogus: 1}]}\n",
			[]string{"document 2: spec.containers[0].bogus: unknown field"}},
		{"one invalid pod refuses the valid ones beside it",
			good + "---\napiVersion: v1\nkind: Pod\nmetadata: {name: B}\nspec: {containers: [{name: c, image: x}]}\n",
			[]string{"pod default/B: metadata.name: Invalid value: \"B\""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			_, c, path := start(t, f, api.Options{})
			_, err := c.Apply(t.Context(), []byte(tc.manifest), "web.yaml")
			se, ok := errors.AsType[*api.StatusError](err)
			if !ok || se.Code != http.StatusUnprocessableEntity || !errors.Is(err, api.ErrInvalid) {
				t.Fatalf("got %v (%T), want a 422 wrapping ErrInvalid", err, err)
			}
			for _, want := range tc.text {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q:\n%s", want, err)
				}
			}
			if n := len(f.List()); n != 0 {
				t.Errorf("%d pods were stored from a refused manifest", n)
			}
			code, _, _ := raw(t, path, "POST", "/v1/pods", strings.NewReader(tc.manifest))
			if code != http.StatusUnprocessableEntity {
				t.Errorf("raw status %d", code)
			}
		})
	}
}

func TestBodiesAreBounded(t *testing.T) {
	t.Run("a manifest one byte above the default limit is 413", func(t *testing.T) {
		f := newFake()
		_, c, _ := start(t, f, api.Options{})
		body := bytes.Repeat([]byte("#"), podspec.MaxManifestBytes+1)
		_, err := c.Apply(t.Context(), body, "big.yaml")
		se, ok := errors.AsType[*api.StatusError](err)
		if !ok || se.Code != http.StatusRequestEntityTooLarge || !errors.Is(err, api.ErrTooLarge) {
			t.Fatalf("got %v (%T)", err, err)
		}
	})
	t.Run("a manifest at the default limit is read whole", func(t *testing.T) {
		f := newFake()
		_, c, _ := start(t, f, api.Options{})
		good := "apiVersion: v1\nkind: Pod\nmetadata: {name: ok}\nspec:\n  containers: [{name: c, image: busybox:1.36}]\n"
		body := append([]byte(good), bytes.Repeat([]byte("#"), podspec.MaxManifestBytes-len(good))...)
		if _, err := c.Apply(t.Context(), body, "big.yaml"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an exec body above a small limit is 413", func(t *testing.T) {
		f := newFake()
		_, c, _ := start(t, f, api.Options{MaxBodyBytes: 1024})
		if _, err := c.Apply(t.Context(), []byte(webYAML), "web.yaml"); err != nil {
			t.Fatal(err)
		}
		_, err := c.Exec(t.Context(), "default", "web", "", []string{strings.Repeat("x", 2048)}, 0)
		if !errors.Is(err, api.ErrTooLarge) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestConcurrencyIsBounded(t *testing.T) {
	const limit = 2
	f := newFake()
	entered := make(chan struct{}, limit)
	release := make(chan struct{})
	f.LogsFunc = func(ctx context.Context, _, _ string, _ api.LogOptions, w io.Writer) error {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := io.WriteString(w, "done\n")
		return err
	}
	srv, c, _ := start(t, f, api.Options{MaxInFlight: limit})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := c.Apply(ctx, []byte(webYAML), "web.yaml"); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	errs := make([]error, limit)
	for i := range limit {
		wg.Go(func() { errs[i] = c.Logs(ctx, "default", "web", api.LogOptions{Tail: -1}, io.Discard) })
	}
	for range limit {
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("the blocking requests never reached the service")
		}
	}

	_, err := c.List(ctx)
	se, ok := errors.AsType[*api.StatusError](err)
	if !ok || se.Code != http.StatusServiceUnavailable || !errors.Is(err, api.ErrBusy) {
		t.Fatalf("with %d requests in flight, list got %v, want 503 busy", limit, err)
	}
	if got := srv.Stats().Busy; got != 1 {
		t.Errorf("busy count %d, want 1", got)
	}

	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("blocked request %d: %v", i, err)
		}
	}
	if _, err := c.List(ctx); err != nil {
		t.Fatalf("after the slots freed, list: %v", err)
	}
}

func TestLogErrorAfterTheFirstByteReachesTheClient(t *testing.T) {
	f := newFake()
	f.LogsFunc = func(_ context.Context, _, _ string, _ api.LogOptions, w io.Writer) error {
		io.WriteString(w, "partial line\n")
		return errors.New("read CRI log /var/log/pods/x/0.log: line 2: malformed\nsecond line")
	}
	_, c, _ := start(t, f, api.Options{})
	if _, err := c.Apply(t.Context(), []byte(webYAML), "web.yaml"); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	err := c.Logs(t.Context(), "default", "web", api.LogOptions{Tail: -1}, &b)
	if b.String() != "partial line\n" {
		t.Errorf("got text %q", b.String())
	}
	if err == nil || !strings.Contains(err.Error(), "ended early: read CRI log /var/log/pods/x/0.log: line 2: malformed; second line") {
		t.Fatalf("got error %v", err)
	}
}

// sharedPods is a service whose List and Get hand out its own pointers, as
// a manager may: the server must not write into them.
type sharedPods struct {
	*apitest.Fake
	pod *corev1.Pod
}

func (s sharedPods) List() []*corev1.Pod                 { return []*corev1.Pod{s.pod} }
func (s sharedPods) Get(_, _ string) (*corev1.Pod, bool) { return s.pod, true }

func TestTheServerDoesNotModifyTheServicePods(t *testing.T) {
	p := &corev1.Pod{}
	p.Namespace, p.Name = "default", "web"
	_, path := apitest.Serve(t, sharedPods{Fake: newFake(), pod: p}, api.Options{})
	c := api.NewClient(path)
	defer c.Close()
	l, err := c.List(t.Context())
	if err != nil || len(l.Items) != 1 || l.Items[0].Kind != "Pod" {
		t.Fatalf("list: %v, %v", l, err)
	}
	got, err := c.Get(t.Context(), "default", "web")
	if err != nil || got.Kind != "Pod" || got.APIVersion != "v1" {
		t.Fatalf("get: %v, %v", got, err)
	}
	if p.Kind != "" || p.APIVersion != "" {
		t.Fatalf("the service's pod was given kind %q apiVersion %q", p.Kind, p.APIVersion)
	}
}

func TestListen(t *testing.T) {
	t.Run("the socket is mode 0600 even under umask 0", func(t *testing.T) {
		old := syscall.Umask(0)
		defer syscall.Umask(old)
		_, path := apitest.Serve(t, newFake(), api.Options{})
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v", fi.Mode())
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
			t.Errorf("owner %d, want %d", st.Uid, os.Geteuid())
		}
		entries, _ := os.ReadDir(filepath.Dir(path))
		if len(entries) != 1 {
			t.Errorf("the private bind directory was left behind: %v", entries)
		}
	})

	t.Run("a stale socket is replaced", func(t *testing.T) {
		path := filepath.Join(apitest.SocketDir(t), "api.sock")
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		ln.SetUnlinkOnClose(false)
		ln.Close() // the file stays, nobody answers: a crashed agent's socket
		srv := api.NewServer(newFake(), nil, api.Options{})
		if err := srv.Listen(t.Context(), path); err != nil {
			t.Fatalf("listen over a stale socket: %v", err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx) }()
		defer func() { cancel(); <-done }()
		c := api.NewClient(path)
		defer c.Close()
		if _, err := c.List(t.Context()); err != nil {
			t.Fatalf("the new server does not answer: %v", err)
		}
	})

	t.Run("a live socket is refused and keeps serving", func(t *testing.T) {
		f := newFake()
		_, c, path := start(t, f, api.Options{})
		err := api.NewServer(newFake(), nil, api.Options{}).Listen(t.Context(), path)
		if !errors.Is(err, api.ErrAlreadyRunning) || err.Error() != "another nodeguard is running on "+path {
			t.Fatalf("got %v", err)
		}
		if _, err := c.List(t.Context()); err != nil {
			t.Fatalf("the first server stopped answering: %v", err)
		}
	})

	t.Run("a file that is not a socket is left alone", func(t *testing.T) {
		path := filepath.Join(apitest.SocketDir(t), "api.sock")
		if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
			t.Fatal(err)
		}
		err := api.NewServer(newFake(), nil, api.Options{}).Listen(t.Context(), path)
		if err == nil || !strings.Contains(err.Error(), "is not a socket") {
			t.Fatalf("got %v", err)
		}
		if b, _ := os.ReadFile(path); string(b) != "precious" {
			t.Fatalf("the file was changed: %q", b)
		}
	})

	t.Run("a missing directory is created", func(t *testing.T) {
		path := filepath.Join(apitest.SocketDir(t), "run", "api.sock")
		srv := api.NewServer(newFake(), nil, api.Options{})
		if err := srv.Listen(t.Context(), path); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
			t.Fatalf("no socket: %v", err)
		}
		cancel()
		if err := srv.Serve(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a path longer than a socket address is refused before bind", func(t *testing.T) {
		path := "/tmp/" + strings.Repeat("d", 120) + "/api.sock"
		err := api.NewServer(newFake(), nil, api.Options{}).Listen(t.Context(), path)
		if err == nil || !strings.Contains(err.Error(), "longer than 107 bytes") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestServeEnds(t *testing.T) {
	t.Run("on cancel it returns nil and removes its socket", func(t *testing.T) {
		path := filepath.Join(apitest.SocketDir(t), "api.sock")
		srv := api.NewServer(newFake(), nil, api.Options{})
		ctx, cancel := context.WithCancel(t.Context())
		if err := srv.Listen(ctx, path); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx) }()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("socket still there: %v", err)
		}
	})

	t.Run("it leaves a socket that another server put at its path", func(t *testing.T) {
		path := filepath.Join(apitest.SocketDir(t), "api.sock")
		a := api.NewServer(newFake(), nil, api.Options{})
		ctx, cancel := context.WithCancel(t.Context())
		if err := a.Listen(ctx, path); err != nil {
			t.Fatal(err)
		}
		os.Remove(path) // an operator's rm, then a second agent
		b := api.NewServer(newFake(), nil, api.Options{})
		bctx, bcancel := context.WithCancel(t.Context())
		if err := b.Listen(bctx, path); err != nil {
			t.Fatal(err)
		}
		cancel()
		if err := a.Serve(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(path); err != nil {
			t.Fatalf("the first server removed the second's socket: %v", err)
		}
		bcancel()
		if err := b.Serve(bctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("Serve without Listen is an error", func(t *testing.T) {
		if err := api.NewServer(newFake(), nil, api.Options{}).Serve(t.Context()); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestClientExplainsUnusableSockets(t *testing.T) {
	dir := apitest.SocketDir(t)
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	cases := []struct {
		name, path, want string
		cause            error
	}{
		{"a missing socket asks whether the agent runs", filepath.Join(dir, "api.sock"),
			"nodeguard API socket " + filepath.Join(dir, "api.sock") + ": no such file (is `nodeguard run` running? --api-socket)", fs.ErrNotExist},
		{"a stale socket says the connection was refused", stale,
			"nodeguard API socket " + stale + ": connection refused (a stale socket: is `nodeguard run` running? --api-socket)", syscall.ECONNREFUSED},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := api.NewClient(tc.path)
			defer c.Close()
			_, err := c.List(t.Context())
			if _, ok := errors.AsType[*api.SocketError](err); !ok || err.Error() != tc.want || !errors.Is(err, tc.cause) {
				t.Fatalf("got %v (%T)\nwant %s", err, err, tc.want)
			}
		})
	}
}

// TestLongRequestsOutliveTheServerTimeouts runs an exec and a log stream
// longer than the read and write timeouts: those bound stalled peers, not
// long commands or slow logs.
func TestLongRequestsOutliveTheServerTimeouts(t *testing.T) {
	const short = 200 * time.Millisecond
	f := newFake()
	f.ExecFunc = func(ctx context.Context, _, _, _ string, _ []string, _ time.Duration) (api.ExecResult, error) {
		select {
		case <-time.After(3 * short):
			return api.ExecResult{Stdout: []byte("slow\n")}, nil
		case <-ctx.Done():
			return api.ExecResult{}, fmt.Errorf("exec cut: %w", ctx.Err())
		}
	}
	f.LogsFunc = func(ctx context.Context, _, _ string, _ api.LogOptions, w io.Writer) error {
		for _, line := range []string{"a\n", "b\n", "c\n"} {
			if _, err := io.WriteString(w, line); err != nil {
				return err
			}
			select {
			case <-time.After(2 * short):
			case <-ctx.Done():
				return fmt.Errorf("log cut: %w", ctx.Err())
			}
		}
		return nil
	}
	_, c, _ := start(t, f, api.Options{ReadTimeout: short, WriteTimeout: short, ReadHeaderTimeout: short})
	if _, err := c.Apply(t.Context(), []byte(webYAML), "web.yaml"); err != nil {
		t.Fatal(err)
	}
	t.Run("an exec longer than the timeouts is answered", func(t *testing.T) {
		res, err := c.Exec(t.Context(), "default", "web", "", []string{"sleep"}, 0)
		if err != nil || string(res.Stdout) != "slow\n" {
			t.Fatalf("got %q, %v", res.Stdout, err)
		}
	})
	t.Run("a log stream longer than the timeouts is whole", func(t *testing.T) {
		var b bytes.Buffer
		if err := c.Logs(t.Context(), "default", "web", api.LogOptions{Tail: -1}, &b); err != nil || b.String() != "a\nb\nc\n" {
			t.Fatalf("got %q, %v", b.String(), err)
		}
	})
}

func TestALogReaderThatStopsReadingIsDropped(t *testing.T) {
	f := newFake()
	result := make(chan error, 1)
	f.LogsFunc = func(ctx context.Context, _, _ string, _ api.LogOptions, w io.Writer) error {
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for ctx.Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				result <- err
				return err
			}
		}
		result <- ctx.Err()
		return ctx.Err()
	}
	_, c, path := start(t, f, api.Options{WriteTimeout: 200 * time.Millisecond})
	if _, err := c.Apply(t.Context(), []byte(webYAML), "web.yaml"); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Ask for the log and never read the answer.
	if _, err := io.WriteString(conn, "GET /v1/pods/default/web/log HTTP/1.1\r\nHost: nodeguard\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("the stream ended with %v, want a write deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server still writes to a peer that stopped reading")
	}
}

func TestEventLogLongPoll(t *testing.T) {
	l := api.NewEventLog(3)
	ctx := context.Background()
	if got := l.EventsSince(ctx, 0, 0); len(got) != 0 {
		t.Fatalf("empty log returned %v", got)
	}
	done := make(chan []api.Event)
	go func() { done <- l.EventsSince(ctx, 0, 5*time.Second) }()
	time.Sleep(20 * time.Millisecond)
	l.Append(time.Now(), "eviction", map[string]string{"pod": "default/hog"})
	got := <-done
	if len(got) != 1 || got[0].Seq != 1 || got[0].Kind != "eviction" || !strings.Contains(string(got[0].Object), "default/hog") {
		t.Fatalf("long poll got %+v", got)
	}
	for i := 0; i < 5; i++ {
		l.Append(time.Now(), "oom_kill", i)
	}
	got = l.EventsSince(ctx, 0, 0)
	if len(got) != 3 || got[0].Seq != 4 || got[2].Seq != 6 {
		t.Fatalf("bounded ring kept %+v, want seqs 4..6", got)
	}
	if got := l.EventsSince(ctx, 6, 30*time.Millisecond); len(got) != 0 {
		t.Fatalf("nothing new, got %+v", got)
	}
}
