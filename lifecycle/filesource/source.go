package filesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
	// SourceUnavailable says that a file's pods could not be loaded
	// (err), or are again (nil): until then its pods' sandboxes are not
	// orphans, even those the Manager never learnt of (a file broken
	// when nodeguard started).
	SourceUnavailable(source string, err error)
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

const (
	// DefaultResync is how often the directory is read again without an
	// event: a safety net (the kubelet's file source lists its
	// directory every 20 s besides its inotify watch), slow because the
	// watch does the work.
	DefaultResync = time.Minute
	// Debounce is how long after an event the directory is read, so
	// that one save's events make one pass.
	Debounce = 100 * time.Millisecond
)

// Source applies the manifests of one directory.
type Source struct {
	cfg Config
	// loaded is closed once the directory was read (Loaded).
	loaded     chan struct{}
	loadedOnce sync.Once

	mu sync.Mutex
	// broken: the sources whose file did not load or apply at the last
	// pass, as told to Pods.SourceUnavailable.
	broken map[string]bool
}

// New returns the source of cfg.Dir; Run keeps it applied.
func New(cfg Config) *Source {
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Source{cfg: cfg, loaded: make(chan struct{}), broken: map[string]bool{}}
}

// Loaded is closed once a Sync has read the directory: every file of it
// is then applied, or told unavailable. Until then nothing says which
// sandboxes are the directory's pods' (the kubelet's sources-ready rule:
// lifecycle.Manager.SourcesReady waits for it).
func (s *Source) Loaded() <-chan struct{} { return s.loaded }

// Sync applies every manifest in the directory and forgets pods whose
// file went away. A file that does not load or apply is reported, told
// to Pods.SourceUnavailable, and its pods are left as they were: nothing
// running is lost to a typo, nor, after a restart, to a file torn by a
// crash (the Manager keeps the sandboxes of an unavailable source).
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
		if err == nil {
			var applied []*corev1.Pod
			if applied, err = s.cfg.Pods.Apply(ctx, pods, src); err == nil {
				for _, p := range applied {
					keep[p.UID] = true
				}
				continue
			}
			err = fmt.Errorf("%s: %w", path, err)
		}
		errs = append(errs, err)
		broken[src] = true
		s.cfg.Pods.SourceUnavailable(src, err)
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
	// Files that load again, or are gone: their sources say so.
	s.mu.Lock()
	for src := range s.broken {
		if !broken[src] {
			s.cfg.Pods.SourceUnavailable(src, nil)
		}
	}
	s.broken = broken
	s.mu.Unlock()
	s.loadedOnce.Do(func() { close(s.loaded) })
	return errors.Join(errs...)
}

// isManifest says whether a directory entry holds pods: a *.yaml, *.yml
// or *.json name not starting with a dot. Hidden files are left out as
// the kubelet leaves them out (its file source reads [^.]*): a tool that
// writes a temporary file beside the manifest and renames it into place
// (mkstemp, Ansible, an editor's swap file) never has it run as pods.
func isManifest(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch filepath.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// Run keeps the directory applied until ctx ends: it watches the
// directory with inotify and applies a new manifest that is complete (moved
// in, or created, written and closed) at once, anything else Debounce after
// its first event, so that the several events of one save (an editor
// writes a temporary file, renames the old one away and the new one in)
// make one pass, not a pass per event. Every Resync it reads the directory again
// anyway, the safety net for what inotify does not see (a change on
// another mount's side of a bind mount or on a network filesystem) and
// for a watch that could not be made or went away with the directory: it
// is made again at the next resync. A failure is logged when it changes,
// not every pass.
func (s *Source) Run(ctx context.Context) error {
	changed := make(chan bool, 1)
	var (
		w     *watch
		ended chan error // the watch's reader returned
		last  string     // the last pass's error
		werr  string     // the last watch error logged
	)
	start := func() {
		var err error
		if w, err = openWatch(s.cfg.Dir); err != nil {
			w = nil
			if err.Error() != werr {
				s.cfg.Log.Warn("manifest directory not watched: changes apply at the next resync", "dir", s.cfg.Dir,
					"resync", s.cfg.Resync, "err", err)
				werr = err.Error()
			}
			return
		}
		werr = ""
		ended = make(chan error, 1)
		go func(w *watch) { ended <- w.run(changed) }(w)
	}
	stop := func() {
		if w == nil {
			return
		}
		w.Close()
		<-ended
		w, ended = nil, nil
	}
	defer stop()

	start()
	// What changed before the watch was made.
	last = s.sync(ctx, last)
	lastPass := time.Now()
	resync := time.NewTicker(s.cfg.Resync)
	defer resync.Stop()
	debounce := time.NewTimer(0)
	if !debounce.Stop() {
		<-debounce.C
	}
	pending := false
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case settled := <-changed:
			// A settled batch (new manifests complete, nothing else)
			// is applied at once, unless a pass ran
			// within Debounce or one is already due: a static pod then
			// starts as soon as its file is complete, as the kubelet's
			// do, and a burst of saves still makes one pass more, not
			// one per file. Anything else waits Debounce, not reset by
			// later events, so a stream of them cannot hold a change
			// back and a removal is never applied in the middle of an
			// editor's save.
			if settled && !pending && time.Since(lastPass) >= Debounce {
				break
			}
			if !pending {
				debounce.Reset(Debounce)
				pending = true
			}
			continue
		case <-debounce.C:
			pending = false
		case err := <-ended:
			// The reader is gone: the watch with it.
			w.Close()
			w, ended = nil, nil
			s.cfg.Log.Warn("manifest directory no longer watched: changes apply at the next resync", "dir", s.cfg.Dir,
				"resync", s.cfg.Resync, "err", err)
			werr = err.Error()
		case <-resync.C:
			if w == nil {
				start()
			}
		}
		last = s.sync(ctx, last)
		lastPass = time.Now()
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
