// Command mkimages builds the test environment's pause, busybox and hog images
// (see lab/images) as OCI image-layout tarballs into a directory:
//
//	go run ./lab/images/cmd/mkimages -o DIR
//
// It prints one line per image: name, archive, manifest digest. Import them
// with `ctr -n k8s.io images import DIR/pause.tar`.
//
// With -cache it builds them into the image cache instead, as the private
// runtime (`nodeguard run --private-runtime`, lab/crienv) does when it
// starts, and with -packages it first installs the private runtime's
// Debian packages (containerd, runc, busybox-static, ...) as that runtime
// would: scripts/demo.sh runs both before it starts the agent, so that the
// slow first steps of a fresh machine happen where it shows their progress
// rather than inside the agent's start:
//
//	go run ./lab/images/cmd/mkimages -packages -cache "${NODEGUARD_IMAGE_CACHE:-/var/cache/nodeguard-images}"
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodeguard/nodeguard/lab/crienv"
	"github.com/nodeguard/nodeguard/lab/images"
)

func main() {
	out := flag.String("o", ".", "directory to write pause.tar, busybox.tar and hog.tar into")
	cache := flag.String("cache", "", "build into this image cache directory (as the private runtime does) instead of -o")
	packages := flag.Bool("packages", false, "first install the private runtime's Debian packages through apt-get when missing (root)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	var err error
	if *cache != "" {
		err = runCached(ctx, log, *cache, *packages)
	} else if *packages {
		err = fmt.Errorf("-packages goes with -cache (the apt lock is kept in the cache directory)")
	} else {
		err = run(ctx, *out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkimages:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, build := range []func(context.Context, string) (images.Image, error){images.BuildPause, images.BuildBusybox, images.BuildHog} {
		im, err := build(ctx, dir)
		if err != nil {
			return err
		}
		fmt.Printf("%s %s %s\n", im.Name, im.Archive, im.Digest)
	}
	return nil
}

// runCached installs the private runtime's packages when asked, then
// builds the images into the cache at dir (or finds them there).
func runCached(ctx context.Context, log *slog.Logger, dir string, packages bool) error {
	if packages {
		if err := crienv.EnsurePackages(ctx, log, dir); err != nil {
			return err
		}
	}
	set, err := images.Cached(ctx, dir, log)
	if err != nil {
		return err
	}
	for _, im := range []images.Image{set.Pause, set.Busybox, set.Hog} {
		fmt.Printf("%s %s %s\n", im.Name, im.Archive, im.Digest)
	}
	return nil
}
