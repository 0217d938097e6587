package lifecycle

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodeguard/nodeguard/lifecycle/cri"
	"github.com/nodeguard/nodeguard/lifecycle/prober"
)

// hookRuntime is the part of the runtime hooks use: ExecSync runs exec
// (nil: exits 0 at once), StopContainer is recorded.
type hookRuntime struct {
	Runtime // nil: any other call panics
	exec    func(ctx context.Context, cmd []string, timeout time.Duration) (cri.ExecResult, error)

	// exitCode is the stopped container's, for ContainerStatus.
	exitCode int32

	mu        sync.Mutex
	execs     int
	stopGrace []time.Duration
}

func (h *hookRuntime) ContainerStatus(context.Context, string) (*runtimeapi.ContainerStatus, error) {
	return &runtimeapi.ContainerStatus{State: runtimeapi.ContainerState_CONTAINER_EXITED, ExitCode: h.exitCode}, nil
}

func (h *hookRuntime) ExecSync(ctx context.Context, _ string, cmd []string, timeout time.Duration) (cri.ExecResult, error) {
	h.mu.Lock()
	h.execs++
	h.mu.Unlock()
	if h.exec == nil {
		return cri.ExecResult{}, nil
	}
	return h.exec(ctx, cmd, timeout)
}

func (h *hookRuntime) StopContainer(_ context.Context, _ string, timeout time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopGrace = append(h.stopGrace, timeout)
	return nil
}

type eventList struct {
	mu   sync.Mutex
	list []PodEvent
}

func (e *eventList) Append(_ time.Time, _ string, obj any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, obj.(PodEvent))
}

func hookManager(rt Runtime, ev EventRecorder) *Manager {
	var d net.Dialer
	return &Manager{cfg: Config{Runtime: rt, Events: ev}, log: slog.New(slog.DiscardHandler), now: time.Now,
		hookHTTP: prober.Handlers{Dial: d.DialContext}}
}

func hookPod(preStop *corev1.LifecycleHandler) (*corev1.Pod, *corev1.Container) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: "p-uid"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
	c := &pod.Spec.Containers[0]
	if preStop != nil {
		c.Lifecycle = &corev1.Lifecycle{PreStop: preStop}
	}
	return pod, c
}

func TestStopContainerRunsPreStopInsideTheGrace(t *testing.T) {
	blockUntilDone := func(ctx context.Context, _ []string, _ time.Duration) (cri.ExecResult, error) {
		<-ctx.Done()
		return cri.ExecResult{}, ctx.Err()
	}
	exec := &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"drain"}}}
	tests := []struct {
		name    string
		preStop *corev1.LifecycleHandler
		exec    func(ctx context.Context, cmd []string, timeout time.Duration) (cri.ExecResult, error)
		grace   time.Duration
		// check gets the grace StopContainer was given.
		check     func(t *testing.T, stop time.Duration)
		wantExecs int
		// wantEvent is a FailedPreStopHook message's part; "" for none.
		wantEvent string
	}{
		{
			name: "without a preStop hook TERM gets the whole grace", grace: 10 * time.Second,
			check: func(t *testing.T, stop time.Duration) {
				if stop != 10*time.Second {
					t.Errorf("stop grace %v, want 10s", stop)
				}
			},
		},
		{
			name: "a preStop exec that returns leaves what is left of the grace to TERM", preStop: exec, grace: 10 * time.Second,
			wantExecs: 1,
			check: func(t *testing.T, stop time.Duration) {
				if stop > 10*time.Second || stop < minStopGrace {
					t.Errorf("stop grace %v, want the grace less the hook's time", stop)
				}
			},
		},
		{
			name: "a preStop exec that outlives the grace is cut off, and TERM gets the kubelet's minimum of 2 s", preStop: exec,
			exec: blockUntilDone, grace: 50 * time.Millisecond, wantExecs: 1, wantEvent: "context deadline exceeded",
			check: func(t *testing.T, stop time.Duration) {
				if stop != minStopGrace {
					t.Errorf("stop grace %v, want %v", stop, minStopGrace)
				}
			},
		},
		{
			name: "a failing preStop exec is an event, and the stop goes on", preStop: exec, grace: 10 * time.Second, wantExecs: 1,
			exec: func(context.Context, []string, time.Duration) (cri.ExecResult, error) {
				return cri.ExecResult{ExitCode: 1, Stderr: []byte("nope")}, nil
			},
			wantEvent: `Exec lifecycle hook ([drain]) for Container "app" in Pod "default/p" failed - error: command 'drain' exited with 1: nope`,
			check:     func(t *testing.T, stop time.Duration) {},
		},
		{
			name: "a preStop sleep past a shorter grace (an eviction's) is cut off", grace: 50 * time.Millisecond,
			preStop:   &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 30}},
			wantEvent: "container terminated before sleep hook finished",
			check: func(t *testing.T, stop time.Duration) {
				if stop != minStopGrace {
					t.Errorf("stop grace %v, want %v", stop, minStopGrace)
				}
			},
		},
		{
			name: "a tcpSocket preStop fails when it runs, as the kubelet's, and the stop goes on", grace: time.Second,
			preStop:   &corev1.LifecycleHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}},
			wantEvent: "Cannot run handler: tcpSocket",
			check:     func(t *testing.T, stop time.Duration) {},
		},
		{
			name: "no grace, no hook: the kubelet runs preStop only with a grace period", preStop: exec, grace: 0,
			check: func(t *testing.T, stop time.Duration) {
				if stop != 0 {
					t.Errorf("stop grace %v, want 0", stop)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &hookRuntime{exec: tt.exec}
			ev := &eventList{}
			m := hookManager(rt, ev)
			pod, c := hookPod(tt.preStop)
			if err := m.stopContainer(t.Context(), pod, "10.0.0.1", c, "ctr", tt.grace); err != nil {
				t.Fatal(err)
			}
			if rt.execs != tt.wantExecs {
				t.Errorf("%d ExecSync calls, want %d", rt.execs, tt.wantExecs)
			}
			if len(rt.stopGrace) != 1 {
				t.Fatalf("%d StopContainer calls, want 1", len(rt.stopGrace))
			}
			tt.check(t, rt.stopGrace[0])
			switch {
			case tt.wantEvent == "" && len(ev.list) > 0:
				t.Errorf("events %+v, want none", ev.list)
			case tt.wantEvent != "" && (len(ev.list) != 1 || ev.list[0].Reason != EventFailedPreStopHook ||
				ev.list[0].Type != corev1.EventTypeWarning || !strings.Contains(ev.list[0].Message, tt.wantEvent)):
				t.Errorf("events %+v, want one Warning FailedPreStopHook with %q", ev.list, tt.wantEvent)
			}
		})
	}
}

func TestHTTPGetHooks(t *testing.T) {
	type seen struct {
		path, hook, auth string
	}
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{path: r.URL.RequestURI(), hook: r.Header.Get("X-Hook"), auth: r.Header.Get("Authorization")})
		mu.Unlock()
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer srv.Close()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	m := hookManager(&hookRuntime{}, nil)
	pod, c := hookPod(nil)
	c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}
	run := func(a *corev1.HTTPGetAction) error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return m.runHook(ctx, pod, "127.0.0.1", c, "ctr", &corev1.LifecycleHandler{HTTPGet: a})
	}

	t.Run("any answer passes, a 500 too, as the kubelet's", func(t *testing.T) {
		mu.Lock()
		got = nil
		mu.Unlock()
		err := run(&corev1.HTTPGetAction{Path: "/drain?now=1", Port: intstr.FromString("http"),
			HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Hook", Value: "pre"}}})
		if err != nil {
			t.Fatalf("hook answered 500: %v, want it passed", err)
		}
		if len(got) != 1 || got[0].path != "/drain?now=1" || got[0].hook != "pre" {
			t.Errorf("the server saw %+v, want one GET /drain?now=1 with X-Hook pre", got)
		}
	})
	t.Run("no answer fails with the kubelet's message", func(t *testing.T) {
		err := run(&corev1.HTTPGetAction{Path: "/x", Port: intstr.FromInt32(int32(closedPort))})
		if err == nil || !strings.Contains(err.Error(), `HTTP lifecycle hook (/x) for Container "app" in Pod "default/p" failed - error: `) {
			t.Errorf("err %v, want the kubelet's failed HTTP hook", err)
		}
	})
	t.Run("https answered in plain HTTP is sent again over HTTP, without its Authorization", func(t *testing.T) {
		mu.Lock()
		got = nil
		mu.Unlock()
		err := run(&corev1.HTTPGetAction{Path: "/tls", Port: intstr.FromInt32(int32(port)), Scheme: corev1.URISchemeHTTPS,
			HTTPHeaders: []corev1.HTTPHeader{{Name: "Authorization", Value: "Bearer x"}, {Name: "X-Hook", Value: "tls"}}})
		if err != nil {
			t.Fatalf("hook: %v, want it passed over HTTP", err)
		}
		if len(got) != 1 || got[0].path != "/tls" || got[0].auth != "" || got[0].hook != "tls" {
			t.Errorf("the server saw %+v, want one GET /tls with X-Hook and no Authorization", got)
		}
	})
	t.Run("a pod without an IP has nothing to send to", func(t *testing.T) {
		err := m.runHook(t.Context(), pod, "", c, "ctr", &corev1.LifecycleHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromInt32(80)}})
		if err == nil || !strings.Contains(err.Error(), "no IP") {
			t.Errorf("err %v, want no IP to send to", err)
		}
	})
}

func TestFailedPostStart(t *testing.T) {
	fail := func(context.Context, []string, time.Duration) (cri.ExecResult, error) {
		return cri.ExecResult{ExitCode: 2, Stdout: []byte("not ready")}, nil
	}
	always := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name     string
		policy   corev1.RestartPolicy
		sidecar  bool
		exitCode int32
		// wantWaiting: the container waits as PostStartHookError (it
		// will be restarted), else it stays terminated.
		wantWaiting bool
	}{
		{name: "restartPolicy Always restarts it: it waits as PostStartHookError", policy: corev1.RestartPolicyAlways, exitCode: 137, wantWaiting: true},
		{name: "OnFailure restarts one killed with a non-zero exit", policy: corev1.RestartPolicyOnFailure, exitCode: 137, wantWaiting: true},
		{name: "OnFailure does not restart one that exited 0 on TERM", policy: corev1.RestartPolicyOnFailure, exitCode: 0},
		{name: "Never does not restart it: it stays terminated", policy: corev1.RestartPolicyNever, exitCode: 137},
		{name: "a sidecar is restarted whatever the pod's policy", policy: corev1.RestartPolicyNever, sidecar: true, exitCode: 0, wantWaiting: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &hookRuntime{exec: fail, exitCode: tt.exitCode}
			ev := &eventList{}
			m := hookManager(rt, ev)
			m.slots = newSlots(1, 1)
			pod, c := hookPod(&corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"drain"}}})
			pod.Spec.RestartPolicy = tt.policy
			c.Lifecycle.PostStart = &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"warm", "up"}}}
			if tt.sidecar {
				c.RestartPolicy = &always
			}
			st := &podState{pod: pod, ip: "10.0.0.1"}
			m.slots.acquire() // as the pod's worker holds one
			err := m.postStart(t.Context(), st, c, "ctr")
			m.slots.release()
			ie, waiting := containerError(err)
			if waiting != tt.wantWaiting || (waiting && (ie.reason != ReasonPostStartHookError || ie.container != "app")) {
				t.Fatalf("err %v, want waiting %v as %s", err, tt.wantWaiting, ReasonPostStartHookError)
			}
			if !tt.wantWaiting && err != nil {
				t.Fatalf("err %v, want none for a container that is not restarted", err)
			}
			want := `Exec lifecycle hook ([warm up]) for Container "app" in Pod "default/p" failed - error: command 'warm up' exited with 2: , message: "not ready"`
			if hf := st.hookFailed["app"]; hf.id != "ctr" || hf.message != want {
				t.Errorf("recorded failure %+v, want ctr's with %q", hf, want)
			}
			// The kill: the preStop hook (an exec too), then the stop.
			if rt.execs != 2 || len(rt.stopGrace) != 1 {
				t.Errorf("%d execs and %d stops, want the postStart and preStop hooks and one stop", rt.execs, len(rt.stopGrace))
			}
			var reasons []string
			for _, e := range ev.list {
				reasons = append(reasons, e.Reason)
			}
			// The preStop exec fails as well: both are events.
			if !slices.Equal(reasons, []string{EventFailedPostStartHook, EventFailedPreStopHook}) || ev.list[0].Message != want {
				t.Errorf("events %+v, want FailedPostStartHook with %q, then FailedPreStopHook", ev.list, want)
			}
		})
	}
}
