package apitest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeguard/nodeguard/lifecycle/api"
)

// SocketDir returns a new empty directory with a short path (t.TempDir
// paths carry the test name and can exceed the 107 bytes of a socket
// path), removed when the test ends.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ngapi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Serve starts an api.Server for svc on a fresh socket, and stops it when
// the test ends, failing the test if Serve did not end cleanly. It returns
// the server and the socket path; clients may connect at once.
func Serve(t testing.TB, svc api.PodService, opts api.Options) (*api.Server, string) {
	t.Helper()
	path := filepath.Join(SocketDir(t), "api.sock")
	srv := api.NewServer(svc, slog.New(slog.DiscardHandler), opts)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	if err := srv.Listen(ctx, path); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve API: %v", err)
		}
	})
	return srv, path
}
