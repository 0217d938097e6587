package api

import (
	"context"
	"errors"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// PodService is what the API serves: the pod manager satisfies it. The
// server calls it from many goroutines at once.
//
// Errors: wrap ErrNotFound for a pod (or a container of a pod) that does
// not exist, and ErrInvalid for a pod that fails validation, with the field
// errors in the text, one per line, e.g.
//
//	fmt.Errorf("%w: pod default/web:\n%s", api.ErrInvalid, lines)
//
// where lines are the field.Error texts of podspec.Validate. The server
// answers 404 and 422 for them, 500 for anything else, and shows the error
// text to the (root) caller in every case.
type PodService interface {
	// Apply validates the pods (podspec.Validate with the node's policy),
	// and stores them as the desired state, all or none. The pods come
	// from podspec.Parse, so they are defaulted and carry a UID derived from
	// source. It returns the stored pods, and does not wait for them to run.
	Apply(ctx context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error)
	// Delete removes a pod from the desired state: ErrNotFound when absent.
	Delete(ctx context.Context, namespace, name string) error
	// List returns every pod with its Status filled in. The server does not
	// modify what it gets.
	List() []*corev1.Pod
	// Get returns one pod with its Status, or false.
	Get(namespace, name string) (*corev1.Pod, bool)
	// Logs writes a container's log as text to w, as opts select. An
	// empty opts.Container means the pod's default container (the
	// kubectl.kubernetes.io/default-container annotation, else the first),
	// as kubectl chooses. With opts.Follow it returns once the container
	// stopped or ctx ended (the client went away).
	Logs(ctx context.Context, namespace, name string, opts LogOptions, w io.Writer) error
	// Exec runs cmd in a container and waits for it; the runtime kills it
	// after timeout. A command that runs and fails is not an error: see
	// ExecResult.ExitCode. An empty container means the default container,
	// as for Logs.
	Exec(ctx context.Context, namespace, name, container string, cmd []string, timeout time.Duration) (ExecResult, error)
	// Stream asks the runtime to prepare an exec, attach or port-forward
	// session (the CRI's Exec, Attach, PortForward) and returns where its
	// streaming server serves it; the server proxies the client's upgraded
	// connection there. An empty req.Container means the default
	// container, as for Logs.
	Stream(ctx context.Context, namespace, name string, req StreamRequest) (StreamTarget, error)
}

// LogOptions select what PodService.Logs returns: the query parameters of
// the log route, named as the Kubernetes API's PodLogOptions.
type LogOptions struct {
	// Container: "" for the pod's default container (?container=).
	Container string
	// Tail is the last Tail lines, all when < 0 (?tail=).
	Tail int
	// Follow streams the lines written later, across log rotations,
	// until the container stops (?follow=true).
	Follow bool
	// Previous reads the container's previous instance (?previous=true).
	Previous bool
	// Timestamps prefixes each line with its RFC 3339 timestamp
	// (?timestamps=true).
	Timestamps bool
	// SinceSeconds > 0 returns only lines of the last SinceSeconds
	// (?sinceSeconds=).
	SinceSeconds int64
	// SinceTime, when set, returns only lines written at or after it
	// (the kubelet's ?sinceTime=, RFC 3339); SinceSeconds wins when both
	// are given, as they may not be.
	SinceTime time.Time
	// LimitBytes > 0 ends the log after that many bytes (the kubelet's
	// ?limitBytes=).
	LimitBytes int64
}

// ExecResult is the outcome of PodService.Exec, and the JSON body of the
// exec route (stdout and stderr base64-encoded, as encoding/json does for
// bytes: they need not be text).
type ExecResult struct {
	Stdout   []byte `json:"stdout"`
	Stderr   []byte `json:"stderr"`
	ExitCode int32  `json:"exitCode"`
}

// ExecRequest is the JSON body of POST /v1/pods/{namespace}/{name}/exec.
type ExecRequest struct {
	// Command is the argv to run, not a shell line. Required.
	Command []string `json:"command"`
	// TimeoutSeconds bounds the command; 0 means MaxExecTimeout, more than
	// MaxExecTimeout is refused.
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
}

var (
	// ErrNotFound is wrapped by a PodService for a pod or container that
	// does not exist; the server answers 404, and Client errors for a 404
	// unwrap to it.
	ErrNotFound = errors.New("not found")
	// ErrInvalid is wrapped by a PodService for pods that fail validation,
	// and by the server for manifests that do not parse; the server answers
	// 422 with the field errors, and Client errors for a 422 unwrap to it.
	ErrInvalid = errors.New("invalid")
	// ErrTooLarge: a request body above the server's limit (413).
	ErrTooLarge = errors.New("request body too large")
	// ErrBusy: the server runs its maximum of concurrent requests (503); try
	// again shortly.
	ErrBusy = errors.New("API busy")
	// ErrBadRequest: a malformed query parameter or exec body (400).
	ErrBadRequest = errors.New("bad request")
	// ErrAlreadyRunning is wrapped by Listen when a server answers on the
	// socket path.
	ErrAlreadyRunning = errors.New("another nodeguard is running")
)
