package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nodeguard/nodeguard/internal/flock"
	"github.com/nodeguard/nodeguard/lab/hog"
)

// DefaultCacheDir is where Cached keeps built images on the development and
// CI machines.
const DefaultCacheDir = "/var/cache/nodeguard-images"

// EnvCache names the environment variable that overrides DefaultCacheDir
// (see CacheDir): a fresh directory there makes a run build the images as
// on a new machine without touching the shared cache.
const EnvCache = "NODEGUARD_IMAGE_CACHE"

// BuildLog is the file in a cache directory that the last build's go
// output goes to; errors of a failed build name it.
const BuildLog = "build.log"

// CacheDir returns the image cache directory: $NODEGUARD_IMAGE_CACHE, or
// DefaultCacheDir when that is unset or empty.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	return DefaultCacheDir
}

// formatVersion is part of the cache key: bump it whenever this package
// changes what it writes for the same inputs.
const formatVersion = "nodeguard-images/3"

// setFile is the file in a cache directory that lists its images. It is
// written last, so its presence means the directory is complete.
const setFile = "images.json"

// Set is the pause, busybox and hog images of one build.
type Set struct {
	// Dir holds both archives.
	Dir string `json:"-"`
	// Key is the hex hash of the inputs that named Dir.
	Key     string `json:"key"`
	Pause   Image  `json:"pause"`
	Busybox Image  `json:"busybox"`
	Hog     Image  `json:"hog"`
	// Built reports whether this call built the images; false when they
	// came from the cache.
	Built bool `json:"-"`
}

// Cached returns the images built from the current inputs, from
// root/<key>, building them first when that directory does not exist. The
// key hashes formatVersion, the pause, hog and grpchealth sources, the Go toolchain's
// version and the busybox binary. Builds are serialized by an flock on root/.lock
// and published by renaming a complete directory into place. log may be
// nil.
func Cached(ctx context.Context, root string, log *slog.Logger) (Set, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	goBin, err := goTool()
	if err != nil {
		return Set{}, fmt.Errorf("cached images: %w", err)
	}
	key, err := cacheKey(ctx, goBin, BusyboxBinary)
	if err != nil {
		return Set{}, fmt.Errorf("cached images: %w", err)
	}
	dir := filepath.Join(root, key[:32])
	if s, err := loadSet(dir); err == nil {
		return s, nil
	}

	if err := os.MkdirAll(root, 0o755); err != nil {
		return Set{}, fmt.Errorf("cached images: %w", err)
	}
	unlock, err := flock.Lock(ctx, filepath.Join(root, ".lock"))
	if err != nil {
		return Set{}, fmt.Errorf("cached images: %w", err)
	}
	defer unlock()
	if s, err := loadSet(dir); err == nil {
		return s, nil // another process built them while we waited
	} else if !errors.Is(err, fs.ErrNotExist) || dirExists(dir) {
		// Damaged (a truncated archive, a bad images.json): rebuild.
		log.Warn("rebuilding damaged image cache", "dir", dir, "err", err)
		if err := os.RemoveAll(dir); err != nil {
			return Set{}, fmt.Errorf("cached images: %w", err)
		}
	}

	start := time.Now()
	buildLog := filepath.Join(root, BuildLog)
	// Truncated: it holds the output of this build only (we hold the lock).
	if err := os.WriteFile(buildLog, nil, 0o644); err != nil {
		return Set{}, fmt.Errorf("cached images: %w", err)
	}
	log.Info("building test images (first use of this toolchain and busybox; cached afterwards): "+
		"3 static Go programs, ~1-3 min with a cold Go build cache, seconds with a warm one",
		"dir", dir, "build_log", buildLog)
	tmp, err := os.MkdirTemp(root, ".build-")
	if err != nil {
		return Set{}, fmt.Errorf("cached images: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op after the rename
	var pause, busybox, hogImage Image
	steps := []struct {
		what  string
		build func() (Image, error)
		into  *Image
	}{
		{"pause (go build pause)", func() (Image, error) { return buildPause(ctx, tmp, goBin, buildLog) }, &pause},
		{"busybox (go build grpchealth)", func() (Image, error) { return buildBusybox(ctx, tmp, BusyboxBinary, goBin, buildLog) }, &busybox},
		{"hog (go build hog)", func() (Image, error) { return buildHog(ctx, tmp, goBin, buildLog) }, &hogImage},
	}
	for i, st := range steps {
		t0 := time.Now()
		log.Info(fmt.Sprintf("building test image %d/%d: %s", i+1, len(steps), st.what))
		im, err := st.build()
		if err != nil {
			return Set{}, fmt.Errorf("cached images (%d/%d, %s into %s): %w", i+1, len(steps), st.what, dir, err)
		}
		*st.into = im
		log.Info(fmt.Sprintf("built test image %d/%d", i+1, len(steps)), "image", im.Name, "seconds", round(time.Since(t0)))
	}
	s := Set{Key: key, Pause: relImage(pause), Busybox: relImage(busybox), Hog: relImage(hogImage)}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return Set{}, fmt.Errorf("cached images: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(tmp, setFile), append(b, '\n')); err != nil {
		return Set{}, fmt.Errorf("cached images: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Set{}, fmt.Errorf("cached images: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return Set{}, fmt.Errorf("cached images: publish %s: %w", dir, err)
	}
	s, err = loadSet(dir)
	if err != nil {
		return Set{}, err
	}
	s.Built = true
	log.Info("built test images", "dir", dir, "pause_bytes", s.Pause.Size,
		"busybox_bytes", s.Busybox.Size, "hog_bytes", s.Hog.Size, "seconds", round(time.Since(start)))
	return s, nil
}

// relImage makes im's archive path relative to its directory, as setFile
// stores it.
func relImage(im Image) Image {
	im.Archive = filepath.Base(im.Archive)
	return im
}

// loadSet reads dir/images.json and checks that every archive exists with
// their recorded sizes.
func loadSet(dir string) (Set, error) {
	b, err := os.ReadFile(filepath.Join(dir, setFile))
	if err != nil {
		return Set{}, err
	}
	var s Set
	if err := json.Unmarshal(b, &s); err != nil {
		return Set{}, fmt.Errorf("read %s: %w", filepath.Join(dir, setFile), err)
	}
	s.Dir = dir
	for _, im := range []*Image{&s.Pause, &s.Busybox, &s.Hog} {
		if im.Archive == "" || filepath.Base(im.Archive) != im.Archive {
			return Set{}, fmt.Errorf("read %s: bad archive name %q", filepath.Join(dir, setFile), im.Archive)
		}
		im.Archive = filepath.Join(dir, im.Archive)
		fi, err := os.Stat(im.Archive)
		if err != nil {
			return Set{}, err
		}
		if fi.Size() != im.Size {
			return Set{}, fmt.Errorf("%s: size %d, want %d", im.Archive, fi.Size(), im.Size)
		}
	}
	return s, nil
}

// cacheKey hashes everything the archives depend on.
func cacheKey(ctx context.Context, goBin, busybox string) (string, error) {
	v, err := goVersion(ctx, goBin)
	if err != nil {
		return "", err
	}
	f, err := os.Open(busybox)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	for _, part := range [][]byte{[]byte(formatVersion), pauseSource, hog.Source, grpchealthSource, []byte(v)} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", busybox, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func dirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err == nil && fi.IsDir()
}

// round returns d in seconds with millisecond precision, for log lines.
func round(d time.Duration) float64 { return d.Round(time.Millisecond).Seconds() }
