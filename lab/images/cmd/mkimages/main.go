// Command mkimages builds the test environment's pause, busybox and hog images
// (see lab/images) as OCI image-layout tarballs into a directory:
//
//	go run ./lab/images/cmd/mkimages -o DIR
//
// It prints one line per image: name, archive, manifest digest. Import them
// with `ctr -n k8s.io images import DIR/pause.tar`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nodeguard/nodeguard/lab/images"
)

func main() {
	out := flag.String("o", ".", "directory to write pause.tar, busybox.tar and hog.tar into")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *out); err != nil {
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
