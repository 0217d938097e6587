// Package credentials is the kubelet's docker keyring for image pulls
// (pkg/credentialprovider): registry credentials from a pod's
// imagePullSecrets (kubernetes.io/dockerconfigjson and
// kubernetes.io/dockercfg Secrets) and from the node's own file (the
// config.json or .dockercfg the kubelet looks up), matched to an image the
// way the kubelet matches them. It is pure: no files but the one ReadFile
// is given, no clock, no logging.
//
// Matching, as BasicDockerKeyring.Lookup:
//
//   - a key is a registry host with an optional port and path
//     ("registry.example:5000/team"), a scheme and a /v1/ or /v2/ prefix of
//     the path dropped ("https://index.docker.io/v1/" is index.docker.io);
//   - a key matches an image whose repository (the image without tag and
//     digest, normalized as the kubelet normalizes it: "busybox" is
//     docker.io/library/busybox) has the same number of host labels, each
//     matching the key's label as a glob ("*.example.com"), the same port
//     (none matches none only), and a path that starts with the key's;
//   - the keys are tried in reverse lexical order, so that a longer path
//     comes before its prefix; every match's credentials are returned, in
//     that order, for the puller to try one after the other;
//   - an image of Docker Hub with no matching key takes the credentials of
//     index.docker.io;
//   - Lookup over several keyrings returns the first keyring's matches
//     first: the pod's Secrets in their order, then the node's file (the
//     kubelet's UnionDockerKeyring).
//
// Malformed input (a Secret without its key, JSON that does not parse, an
// auth field that is not base64 of "user:password") is an error wrapping
// ErrMalformed and naming what is wrong; nothing is silently dropped but
// a key that is not a URL, which the kubelet skips too.
package credentials
