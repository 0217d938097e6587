// Package registry runs a real image registry for nodeguard's pull tests
// and its demo, as lab/crienv runs a real containerd: Debian's
// docker-registry (the CNCF distribution registry, 2.8), with TLS from a
// CA it makes and htpasswd authentication, serving inside the network
// namespace of a crienv environment, where that environment's containerd
// pulls from it.
//
// Start writes, in a temporary directory of its own: a CA and a server
// certificate for 127.0.0.1 (crypto/x509, ECDSA P-256, valid a day), an
// htpasswd file with one bcrypt user, a config.yml with its storage in
// that directory, then starts `nsenter --net=<netns> docker-registry serve
// config.yml` and waits until GET /v2/ answers 401 over TLS checked
// against the CA. With Options.HostsDir (crienv's RegistryHostsDir) it
// writes <host:port>/hosts.toml there, so that containerd trusts the CA;
// containerd 1.6 and 2.x read the same hosts.toml.
//
// Push copies an image from the environment's containerd to the registry
// with `nsenter --net=<netns> ctr images push --user --tlscacert`, so that
// the images the tests pull are the ones lab/images builds.
//
// Invariants (the rules of the shared development machines):
//
//   - The registry listens on 127.0.0.1 of the given namespace, never in
//     the host's: Start refuses an empty NetNS, and every connection this
//     package makes (the readiness probe, ctr's push) is opened inside
//     that namespace.
//   - Only its own process is signalled, by pid (our unreaped child), and
//     it gets a parent-death signal, so a test binary killed at its
//     timeout takes it along.
//   - Every wait is bounded; Close removes the directory and the
//     hosts.toml it wrote, and nothing else.
//   - Start fails with an error matching crienv.ErrUnsupported when this
//     host cannot run it (not root, no apt-get to install
//     docker-registry): New skips then, or fails when
//     NODEGUARD_REQUIRE_PRIVILEGED=1.
package registry
