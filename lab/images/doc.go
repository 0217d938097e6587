// Package images builds the container images of nodeguard's test
// environment and benchmarks locally, with no registry and no network: a pause image and a
// busybox image, each written as an OCI image-layout tarball that
// `ctr -n k8s.io images import` accepts and names.
//
//   - Pause (PauseName): one static binary, /pause, built with
//     `CGO_ENABLED=0 go build -trimpath` from pause/main.go, which is
//     embedded in this package. It sleeps, reaps the children it inherits,
//     and exits 0 on SIGTERM or SIGINT. Entrypoint ["/pause"].
//   - Busybox (BusyboxName): Debian's static /bin/busybox (package
//     busybox-static) with a symlink for every applet that the binary lists
//     (`busybox --list-full`: sh, ls, cat, sleep, wget, nc, ip, ping, awk,
//     ps, ...), a minimal /etc (passwd, group) and /tmp. Cmd ["sh"]. It
//     also has /bin/grpchealth, built like pause from grpchealth/main.go: a
//     gRPC health server whose services' status follows files, the far end
//     of the tests' gRPC probes.
//   - Hog (HogName): one static binary, /hog, built like pause from the
//     source that package lab/hog embeds: the memory hog of `nodeguard
//     bench eviction`. Entrypoint ["/hog"].
//
// All names live under registry.local, which no registry answers, so a
// runtime can never pull them: they exist only where they were imported.
//
// Invariants:
//
//   - Output is deterministic: the same inputs (pause, hog and grpchealth sources, Go toolchain
//     version, busybox binary) give byte-identical archives. Tar entries
//     are sorted with parents first, owned by 0:0, dated Epoch; gzip
//     headers carry no name or time; JSON comes from structs.
//   - An archive is written to a temporary file in its directory and
//     renamed into place, so a reader never sees half of one.
//   - Cached builds into a directory named by a hash of the inputs and
//     publishes it with one rename under an flock, so parallel test
//     binaries share one build and never see a partial one.
//   - A build's go output goes to a file (BuildLog in the cache
//     directory for Cached), and a failed build's error (BuildError) names
//     that file and says why the build stopped when the compiler did not
//     stop it: a timeout, its caller's cancellation (a process shutting
//     down), or a kill from outside. The cache directory is
//     DefaultCacheDir unless NODEGUARD_IMAGE_CACHE names another (CacheDir).
//   - Nothing here uses the network: the pause, hog and grpchealth builds are modules
//     without dependencies, run with GOTOOLCHAIN=local, GOPROXY=off and GOFLAGS
//     cleared.
package images
