package logs

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Defaults, the kubelet's.
const (
	// DefaultMaxSize is containerLogMaxSize's default (10Mi).
	DefaultMaxSize = 10 << 20
	// DefaultMaxFiles is containerLogMaxFiles' default.
	DefaultMaxFiles = 5
	// DefaultInterval is the kubelet's containerLogMonitorInterval: a log
	// can overshoot MaxSize by what the container writes in it.
	DefaultInterval = 10 * time.Second
	// callTimeout bounds one CRI call of a rotation pass.
	callTimeout = 10 * time.Second
)

// ErrInvalidPolicy is wrapped by Policy.Validate.
var ErrInvalidPolicy = errors.New("invalid container log policy")

// Policy bounds each container's log files: the kubelet's
// containerLogMaxSize and containerLogMaxFiles.
type Policy struct {
	// MaxSize is the live file's size, in bytes, that makes it rotate.
	MaxSize int64
	// MaxFiles is how many files a container's log keeps, the live one
	// included: at least 2 (the live file and the one being rotated).
	MaxFiles int
}

// Validate says whether the policy can be enforced; the error names the
// config key (the kubelet's name).
func (p Policy) Validate() error {
	if p.MaxSize <= 0 {
		return fmt.Errorf("%w: containerLogMaxSize %d: must be positive", ErrInvalidPolicy, p.MaxSize)
	}
	if p.MaxFiles < 2 {
		return fmt.Errorf("%w: containerLogMaxFiles %d: must be at least 2 (the live file and the newest rotated one)", ErrInvalidPolicy, p.MaxFiles)
	}
	return nil
}

// Runtime is what a Rotator asks of the container runtime; *cri.Client is
// one.
type Runtime interface {
	ListContainers(ctx context.Context, sandboxID string, labels map[string]string) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatus, error)
	ReopenContainerLog(ctx context.Context, id string) error
}

// Rotator rotates the logs of the runtime's running containers, as the
// kubelet's container log manager: containerd never does.
type Rotator struct {
	rt       Runtime
	policy   Policy
	interval time.Duration
	now      func() time.Time
	log      *slog.Logger

	// mu serialises passes; paths is the live log path of each running
	// container a pass saw, by container ID: a container's log path is
	// fixed at its creation, so each is asked of the runtime once, not
	// once a pass (at 250 pods the kubelet's way, a ContainerStatus of
	// every container every 10 s, was 5% of the agent's idle CPU).
	mu    sync.Mutex
	paths map[string]string
}

// RotatorConfig wires a Rotator.
type RotatorConfig struct {
	Runtime Runtime
	Policy  Policy
	// Interval between passes; DefaultInterval when zero.
	Interval time.Duration
	// Now names the rotated files; time.Now when nil.
	Now    func() time.Time
	Logger *slog.Logger
}

// NewRotator returns a Rotator, or an error wrapping ErrInvalidPolicy.
func NewRotator(cfg RotatorConfig) (*Rotator, error) {
	if err := cfg.Policy.Validate(); err != nil {
		return nil, err
	}
	r := &Rotator{rt: cfg.Runtime, policy: cfg.Policy, interval: cfg.Interval, now: cfg.Now, log: cfg.Logger, paths: map[string]string{}}
	if r.interval <= 0 {
		r.interval = DefaultInterval
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// Run rotates every Interval until ctx ends. A failed pass is logged and
// the next one tries again.
func (r *Rotator) Run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.RotateAll(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("container log rotation", "err", err)
		}
	}
}

// RotateAll makes one pass: every running container whose live log file
// is at least MaxSize is rotated. The errors of containers are joined; one
// container's failure does not stop the others.
func (r *Rotator) RotateAll(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	ctrs, err := r.rt.ListContainers(cctx, "", nil)
	cancel()
	if err != nil {
		return fmt.Errorf("rotate container logs: %w", err)
	}
	var errs []error
	running := make(map[string]bool, len(ctrs))
	for _, c := range ctrs {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue // an exited container writes no more
		}
		id := c.GetId()
		running[id] = true
		path, known := r.paths[id]
		if !known {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			s, err := r.rt.ContainerStatus(cctx, id)
			cancel()
			if err != nil {
				errs = append(errs, fmt.Errorf("rotate log of container %s: %w", id, err))
				continue
			}
			if s.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
				continue
			}
			path = s.GetLogPath()
			r.paths[id] = path // "" too: a container without a log file
		}
		if path == "" {
			continue
		}
		if err := r.Rotate(ctx, id, path); err != nil {
			errs = append(errs, err)
		}
	}
	for id := range r.paths {
		if !running[id] {
			delete(r.paths, id)
		}
	}
	return errors.Join(errs...)
}

// Rotate rotates the live log path of container id if it reached
// MaxSize, as the kubelet's rotateLog: leftovers of an interrupted
// compression are removed, then the oldest rotated files beyond
// MaxFiles-2 (the rotation adds one, and the live file is one), then the
// remaining rotated files but the newest are gzipped, and the live file
// is renamed and the runtime told to reopen it. A missing live file (a
// reopen that failed before) is reopened.
func (r *Rotator) Rotate(ctx context.Context, id, path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		if err := r.reopen(ctx, id); err != nil {
			return fmt.Errorf("rotate log %s: it is missing, and %w", path, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("rotate log %s: %w", path, err)
	}
	if fi.Size() < r.policy.MaxSize {
		return nil
	}
	if err := removeTmp(path); err != nil {
		return err
	}
	files, err := rotated(path)
	if err != nil {
		return err
	}
	if excess := len(files) - (r.policy.MaxFiles - 2); excess > 0 {
		for _, f := range files[:excess] {
			if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("rotate log %s: remove the oldest: %w", path, err)
			}
		}
		files = files[excess:]
	}
	// The newest rotated file stays plain: it is the one the last rotation
	// renamed, and the runtime may have written to it until its reopen.
	for i := 0; i < len(files)-1; i++ {
		if !files[i].compressed {
			if err := compress(files[i].path); err != nil {
				return fmt.Errorf("rotate log %s: %w", path, err)
			}
		}
	}
	return r.rotateLive(ctx, id, path)
}

// rotateLive renames the live file and has the runtime reopen it; a failed
// reopen renames it back, so that the runtime's file is the live one.
func (r *Rotator) rotateLive(ctx context.Context, id, path string) error {
	at := r.now()
	to := path + "." + at.Format(stampFormat)
	// Two rotations within a microsecond (a fake clock): the next name.
	for {
		if _, err := os.Lstat(to); errors.Is(err, os.ErrNotExist) {
			break
		}
		at = at.Add(time.Microsecond)
		to = path + "." + at.Format(stampFormat)
	}
	if err := os.Rename(path, to); err != nil {
		return fmt.Errorf("rotate log %s: %w", path, err)
	}
	if err := r.reopen(ctx, id); err != nil {
		if rerr := os.Rename(to, path); rerr != nil {
			return fmt.Errorf("rotate log %s: %w; and renaming %s back failed: %w", path, err, to, rerr)
		}
		return fmt.Errorf("rotate log %s: %w (renamed back)", path, err)
	}
	r.log.Debug("container log rotated", "container", id, "path", path, "rotated", to)
	return nil
}

func (r *Rotator) reopen(ctx context.Context, id string) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if err := r.rt.ReopenContainerLog(cctx, id); err != nil {
		return fmt.Errorf("reopen log of container %s: %w", id, err)
	}
	return nil
}

// compress gzips path into path.gz through path.gz.tmp and removes path.
func compress(path string) (retErr error) {
	in, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	defer in.Close()
	tmp := path + gzSuffix + tmpSuffix
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			out.Close()
			os.Remove(tmp)
		}
	}()
	zw := gzip.NewWriter(out)
	if _, err := io.Copy(zw, in); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	if err := os.Rename(tmp, path+gzSuffix); err != nil {
		return fmt.Errorf("compress %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("compress %s: remove the plain file: %w", path, err)
	}
	return nil
}

// removeTmp removes what interrupted compressions of path's rotated files
// left.
func removeTmp(path string) error {
	tmps, err := tmpFiles(path)
	if err != nil {
		return err
	}
	for _, t := range tmps {
		if err := os.Remove(t); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", t, err)
		}
	}
	return nil
}

// Clean removes the live log path and its rotated files, for a container
// that is removed (the kubelet's ContainerLogManager.Clean).
func Clean(path string) error {
	files, err := rotated(path)
	if err != nil {
		return err
	}
	tmps, err := tmpFiles(path)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range append(append([]string{path}, tmps...), paths(files)...) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("clean container log: %w", err))
		}
	}
	return errors.Join(errs...)
}

func paths(files []rotatedFile) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.path
	}
	return out
}
