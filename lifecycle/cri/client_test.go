package cri

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// dialTimeout bounds every Dial in these tests; the in-process servers
// answer in microseconds.
const dialTimeout = 5 * time.Second

// socketDir returns a short directory for unix sockets (sun_path holds 108
// bytes; t.TempDir's paths can be longer).
func socketDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "ngcri")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// fakeRuntime is an in-process CRI v1 server that records what it was asked.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	mu       sync.Mutex
	calls    []string
	lastList *runtimeapi.ListPodSandboxRequest
	images   map[string]string // name -> id
	// pullErr, when set, is what PullImage answers.
	pullErr  error
	pullAuth *runtimeapi.AuthConfig // the last PullImage's
	// driver is what RuntimeConfig reports; nil answers Unimplemented,
	// as containerd 1.6 does.
	driver *runtimeapi.CgroupDriver
}

func (f *fakeRuntime) RuntimeConfig(context.Context, *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	f.record("RuntimeConfig")
	f.mu.Lock()
	d := f.driver
	f.mu.Unlock()
	if d == nil {
		return nil, status.Error(codes.Unimplemented, "unknown method RuntimeConfig")
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: *d}}, nil
}

func (f *fakeRuntime) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeRuntime) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeRuntime) Version(_ context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	f.record("Version " + req.GetVersion())
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "9.9.9", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeRuntime) RunPodSandbox(_ context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	f.record("RunPodSandbox " + req.GetConfig().GetLinux().GetCgroupParent())
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: "sb1"}, nil
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	f.lastList = req
	f.mu.Unlock()
	return &runtimeapi.ListPodSandboxResponse{}, nil
}

func (f *fakeRuntime) ContainerStatus(_ context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	return nil, status.Errorf(codes.NotFound, "an error occurred when try to find container %q: not found", req.GetContainerId())
}

func (f *fakeRuntime) StopContainer(ctx context.Context, _ *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	<-ctx.Done() // a runtime that hangs
	return nil, status.FromContextError(ctx.Err()).Err()
}

func (f *fakeRuntime) ImageStatus(_ context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if id, ok := f.images[req.GetImage().GetImage()]; ok {
		return &runtimeapi.ImageStatusResponse{Image: &runtimeapi.Image{Id: id}}, nil
	}
	return &runtimeapi.ImageStatusResponse{}, nil
}

func (f *fakeRuntime) PullImage(_ context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	f.record("PullImage " + req.GetImage().GetImage())
	f.mu.Lock()
	err := f.pullErr
	f.pullAuth = req.GetAuth()
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PullImageResponse{ImageRef: "sha256:pulled"}, nil
}

// serve runs a gRPC server with register's services on a new socket and
// returns the socket's path.
func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	sock := filepath.Join(socketDir(t), "cri.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return sock
}

func serveFake(t *testing.T) (*fakeRuntime, string) {
	f := &fakeRuntime{images: map[string]string{"busybox:local": "sha256:busybox"}}
	sock := serve(t, func(s *grpc.Server) {
		runtimeapi.RegisterRuntimeServiceServer(s, f)
		runtimeapi.RegisterImageServiceServer(s, f)
	})
	return f, sock
}

func dialFake(t *testing.T, opts ...Option) (*fakeRuntime, *Client) {
	t.Helper()
	f, sock := serveFake(t)
	c, err := Dial(t.Context(), "unix://"+sock, dialTimeout, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return f, c
}

func TestDialShakesHands(t *testing.T) {
	f, sock := serveFake(t)
	for _, endpoint := range []string{"unix://" + sock, sock} {
		t.Run("endpoint "+strings.Replace(endpoint, sock, "<sock>", 1)+" works", func(t *testing.T) {
			c, err := Dial(t.Context(), endpoint, dialTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got, want := c.Runtime(), (RuntimeInfo{Name: "fake", Version: "9.9.9", APIVersion: "v1"}); got != want {
				t.Errorf("runtime = %+v, want %+v", got, want)
			}
		})
	}
	if calls := f.called(); len(calls) != 2 || calls[0] != "Version v1" {
		t.Errorf("calls = %q, want two Version v1 handshakes", calls)
	}
}

func TestDialErrors(t *testing.T) {
	dir := socketDir(t)

	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// A socket file nobody listens on any more.
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()

	// A gRPC server that is not a CRI runtime: health and reflection only.
	other := serve(t, func(s *grpc.Server) {
		healthpb.RegisterHealthServer(s, health.NewServer())
		reflection.Register(s)
	})

	// A unix socket that speaks something else: it greets like an SSH
	// server and hangs up.
	banner := rawServer(t, func(c net.Conn) { c.Write([]byte("SSH-2.0-OpenSSH_9.2\r\n")); c.Close() })

	// A unix socket that accepts and never says anything.
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	silent := rawServer(t, func(c net.Conn) { <-done; c.Close() })

	tests := []struct {
		name     string
		endpoint string
		timeout  time.Duration
		check    func(t *testing.T, err error)
	}{
		{name: "a missing socket is an EndpointError wrapping fs.ErrNotExist with the path and a hint",
			endpoint: "unix://" + filepath.Join(dir, "missing.sock"),
			check: func(t *testing.T, err error) {
				var ee *EndpointError
				if !errors.As(err, &ee) || !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("err = %v", err)
				}
				if ee.Path != filepath.Join(dir, "missing.sock") || !strings.Contains(err.Error(), "missing.sock") || !strings.Contains(err.Error(), "is containerd running? set its socket with --runtime-endpoint") {
					t.Errorf("message %q lacks the path or hint", err)
				}
			}},
		{name: "a regular file is not a socket",
			endpoint: regular,
			check: func(t *testing.T, err error) {
				var ee *EndpointError
				if !errors.As(err, &ee) || !errors.Is(err, ErrNotSocket) {
					t.Errorf("err = %v", err)
				}
			}},
		{name: "a stale socket refuses connections",
			endpoint: stale,
			check: func(t *testing.T, err error) {
				var ee *EndpointError
				if !errors.As(err, &ee) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "nothing listens") {
					t.Errorf("err = %v", err)
				}
			}},
		{name: "a TCP endpoint is unsupported",
			endpoint: "tcp://127.0.0.1:1",
			check: func(t *testing.T, err error) {
				if !errors.Is(err, ErrUnsupportedEndpoint) {
					t.Errorf("err = %v", err)
				}
			}},
		{name: "an empty endpoint is unsupported",
			endpoint: "unix://",
			check: func(t *testing.T, err error) {
				if !errors.Is(err, ErrUnsupportedEndpoint) {
					t.Errorf("err = %v", err)
				}
			}},
		{name: "a gRPC server without the CRI is ErrNotCRI naming its services",
			endpoint: other,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, ErrNotCRI) || !strings.Contains(err.Error(), "grpc.health.v1.Health") || !strings.Contains(err.Error(), "runtime.v1.RuntimeService") {
					t.Errorf("err = %v", err)
				}
			}},
		{name: "a socket that does not speak gRPC is ErrNotCRI",
			endpoint: banner,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, ErrNotCRI) || !strings.Contains(err.Error(), "does not speak gRPC") {
					t.Errorf("err = %v", err)
				}
			}},
		{name: "a socket that never answers times out with context.DeadlineExceeded",
			endpoint: silent, timeout: 300 * time.Millisecond,
			check: func(t *testing.T, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("err = %v", err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			timeout := tt.timeout
			if timeout == 0 {
				timeout = dialTimeout
			}
			start := time.Now()
			c, err := Dial(t.Context(), tt.endpoint, timeout)
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			if took := time.Since(start); took > timeout+time.Second {
				t.Errorf("Dial took %v with a timeout of %v", took, timeout)
			}
			t.Logf("error: %v", err)
			tt.check(t, err)
		})
	}
}

// rawServer accepts connections on a new socket and hands each to handle.
func rawServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	sock := filepath.Join(socketDir(t), "raw.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return sock
}

func TestOperationErrors(t *testing.T) {
	_, c := dialFake(t)
	t.Run("NotFound wraps ErrNotFound, names the operation and keeps the gRPC status", func(t *testing.T) {
		_, err := c.ContainerStatus(t.Context(), "abc123")
		if !errors.Is(err, ErrNotFound) || !strings.HasPrefix(err.Error(), "container status abc123: ") {
			t.Errorf("err = %v", err)
		}
		if st, ok := status.FromError(err); !ok || st.Code() != codes.NotFound {
			t.Errorf("status = %v, want NotFound", st)
		}
	})
	t.Run("a call cut short by its context wraps context.DeadlineExceeded", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		err := c.StopContainer(ctx, "abc123", 10*time.Second)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "stop container abc123: ") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("DeleteTask is containerd's repair alone", func(t *testing.T) {
		err := c.DeleteTask(t.Context(), "abc123")
		if !errors.Is(err, ErrNotContainerd) || !strings.Contains(err.Error(), `"fake"`) {
			t.Errorf("err = %v, want ErrNotContainerd naming the runtime", err)
		}
	})
	t.Run("an unimplemented call says so", func(t *testing.T) {
		_, err := c.ExecSync(t.Context(), "abc123", []string{"true"}, time.Second)
		if st, _ := status.FromError(err); st.Code() != codes.Unimplemented || !strings.HasPrefix(err.Error(), `exec in container abc123 ["true"]: `) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestRunPodSandboxGuardsTheCgroupParent(t *testing.T) {
	cfg := func(parent string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{
			Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default"},
			Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent},
		}
	}
	tests := []struct {
		name    string
		parent  string
		refused bool
	}{
		{name: "a relative parent is accepted", parent: "ng/kubepods/podx"},
		{name: "an empty parent is refused", parent: "", refused: true},
		{name: "an absolute parent is accepted", parent: "/kubepods/podx"},
		{name: "a parent climbing out is refused", parent: "ng/../../podx", refused: true},
		{name: "an absolute parent climbing out is refused", parent: "/../podx", refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, c := dialFake(t)
			id, err := c.RunPodSandbox(t.Context(), cfg(tt.parent))
			ran := len(f.called()) > 1 // after Version
			if tt.refused {
				if !errors.Is(err, ErrBadCgroupParent) || ran || !strings.HasPrefix(err.Error(), "run pod sandbox default/web: ") {
					t.Errorf("err = %v, runtime called: %v", err, ran)
				}
				return
			}
			if err != nil || id != "sb1" || !ran {
				t.Errorf("id %q err %v ran %v", id, err, ran)
			}
		})
	}
}

func TestListPodSandboxOnlyAsksForManagedSandboxes(t *testing.T) {
	f, c := dialFake(t)
	labels := map[string]string{PodUIDLabel: "u1"}
	if _, err := c.ListPodSandbox(t.Context(), labels); err != nil {
		t.Fatal(err)
	}
	sel := f.lastList.GetFilter().GetLabelSelector()
	if sel[ManagedLabel] != "true" || sel[PodUIDLabel] != "u1" || len(sel) != 2 {
		t.Errorf("selector = %v", sel)
	}
	if len(labels) != 1 {
		t.Errorf("the caller's labels were modified: %v", labels)
	}
}

func TestImages(t *testing.T) {
	t.Run("a present image gives its ID", func(t *testing.T) {
		_, c := dialFake(t)
		id, err := c.EnsureImage(t.Context(), "busybox:local", corev1.PullIfNotPresent, nil)
		if err != nil || id != "sha256:busybox" {
			t.Errorf("id %q err %v", id, err)
		}
	})
	t.Run("a missing image is ErrImageNotPresent naming it and nothing is pulled", func(t *testing.T) {
		f, c := dialFake(t)
		_, err := c.EnsureImage(t.Context(), "registry.test/app:1", corev1.PullIfNotPresent, nil)
		if !errors.Is(err, ErrImageNotPresent) || !strings.Contains(err.Error(), "registry.test/app:1") {
			t.Errorf("err = %v", err)
		}
		if _, err := c.PullImage(t.Context(), "registry.test/app:1", nil, nil); !errors.Is(err, ErrPullDisabled) {
			t.Errorf("PullImage: err = %v, want ErrPullDisabled", err)
		}
		for _, call := range f.called() {
			if strings.HasPrefix(call, "PullImage") {
				t.Errorf("the runtime was asked to pull: %q", call)
			}
		}
	})
	t.Run("with pulls allowed a missing image is pulled", func(t *testing.T) {
		f, c := dialFake(t, WithImagePull())
		id, err := c.EnsureImage(t.Context(), "registry.test/app:1", corev1.PullIfNotPresent, nil)
		if err != nil || id != "sha256:pulled" {
			t.Errorf("id %q err %v", id, err)
		}
		if calls := f.called(); calls[len(calls)-1] != "PullImage registry.test/app:1" {
			t.Errorf("calls = %q", calls)
		}
	})
}

func TestSeconds(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want int64
	}{
		{"zero is no timeout", 0, 0},
		{"negative is no timeout", -time.Second, 0},
		{"a fraction rounds up to a second", 10 * time.Millisecond, 1},
		{"whole seconds stay", 30 * time.Second, 30},
		{"1.5s rounds up", 1500 * time.Millisecond, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := seconds(tt.d); got != tt.want {
				t.Errorf("seconds(%v) = %d, want %d", tt.d, got, tt.want)
			}
		})
	}
}

func TestCgroupDriverIsWhatTheRuntimeReports(t *testing.T) {
	f, c := dialFake(t)
	t.Run("a runtime without RuntimeConfig does not say", func(t *testing.T) {
		d, ok, err := c.CgroupDriver(t.Context())
		if err != nil || ok || d != "" {
			t.Errorf("CgroupDriver = %q, %v, %v; want not reported", d, ok, err)
		}
	})
	for _, tt := range []struct {
		driver runtimeapi.CgroupDriver
		want   string
	}{{runtimeapi.CgroupDriver_SYSTEMD, "systemd"}, {runtimeapi.CgroupDriver_CGROUPFS, "cgroupfs"}} {
		t.Run("a runtime reporting "+tt.want+" says so", func(t *testing.T) {
			f.mu.Lock()
			f.driver = &tt.driver
			f.mu.Unlock()
			d, ok, err := c.CgroupDriver(t.Context())
			if err != nil || !ok || d != tt.want {
				t.Errorf("CgroupDriver = %q, %v, %v; want %q", d, ok, err, tt.want)
			}
		})
	}
	t.Run("the peer of the socket is this process, serving the fake", func(t *testing.T) {
		if got := c.RuntimePID(); got != os.Getpid() {
			t.Errorf("RuntimePID = %d, want %d (SO_PEERCRED)", got, os.Getpid())
		}
	})
}
