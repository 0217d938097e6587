package filesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodeguard/nodeguard/lifecycle"
	"github.com/nodeguard/nodeguard/lifecycle/podspec"
)

// Prefix starts the source of every pod from a manifest file:
// "file:" and the file's path.
const Prefix = "file:"

// Pods is what the source drives: lifecycle.Manager.
type Pods interface {
	Apply(ctx context.Context, pods []*corev1.Pod, source string) ([]*corev1.Pod, error)
	List() []*corev1.Pod
	Forget(source string, keep map[types.UID]bool)
}

// Config is a manifest directory and where its pods go.
type Config struct {
	Dir  string
	Pods Pods
	Log  *slog.Logger
	// Resync is how often the directory is re-read even without an event
	// (0: DefaultResync).
	Resync time.Duration
}

// DefaultResync is the poll behind the watch: 2 s.
const DefaultResync = 2 * time.Second

// Source applies the manifests of one directory.
type Source struct {
	cfg Config
}

// New returns the source of cfg.Dir; Run keeps it applied.
func New(cfg Config) *Source {
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Source{cfg: cfg}
}

// Sync applies every manifest in the directory and forgets pods whose
// file went away. A file that does not load or apply is reported and its
// pods are left as they were: nothing running is lost to a typo.
func (s *Source) Sync(ctx context.Context) error {
	dir := s.cfg.Dir
	entries, err := os.ReadDir(dir)
	if err != nil {
		// Nothing is forgotten: a directory that cannot be read says
		// nothing about the pods in it.
		return fmt.Errorf("read manifest dir: %w", err)
	}
	keep := map[types.UID]bool{}
	broken := map[string]bool{} // sources whose file failed
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !isManifest(name) {
			continue
		}
		path := filepath.Join(dir, name)
		src := Prefix + path
		pods, err := podspec.Load(path)
		if err != nil {
			errs = append(errs, err)
			broken[src] = true
			continue
		}
		applied, err := s.cfg.Pods.Apply(ctx, pods, src)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", path, err))
			broken[src] = true
			continue
		}
		for _, p := range applied {
			keep[p.UID] = true
		}
	}
	sources := map[string]bool{}
	for _, p := range s.cfg.Pods.List() {
		src := p.Annotations[lifecycle.AnnotationSource]
		if !strings.HasPrefix(src, Prefix) {
			continue
		}
		if broken[src] {
			keep[p.UID] = true
		}
		sources[src] = true
	}
	for src := range sources {
		s.cfg.Pods.Forget(src, keep)
	}
	return errors.Join(errs...)
}

func isManifest(name string) bool {
	switch filepath.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// Run re-reads the directory every Resync until ctx ends. A failure is
// logged when it changes, not every pass.
func (s *Source) Run(ctx context.Context) error {
	var last string
	t := time.NewTicker(s.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		last = s.sync(ctx, last)
	}
}

// sync is one pass; last is the previous pass's error text, returned
// updated.
func (s *Source) sync(ctx context.Context, last string) string {
	err := s.Sync(ctx)
	switch {
	case err == nil:
		return ""
	case err.Error() != last:
		s.cfg.Log.Warn("manifest directory", "dir", s.cfg.Dir, "err", err)
	}
	return err.Error()
}
