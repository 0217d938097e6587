package registry

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// htpasswdLine is user's line of an htpasswd file: distribution's htpasswd
// authenticator accepts bcrypt hashes only.
func htpasswdLine(user, password string) (string, error) {
	if user == "" || strings.ContainsAny(user, ":\n") {
		return "", fmt.Errorf("htpasswd user %q: want a non-empty name without ':' or newlines", user)
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost) // a test secret: speed over strength
	if err != nil {
		return "", fmt.Errorf("hash the password of %s: %w", user, err)
	}
	return user + ":" + string(h) + "\n", nil
}

// configParams are the values of the registry's config.yml.
type configParams struct {
	Addr              string // host:port to listen on
	StorageDir        string
	CertFile, KeyFile string
	HtpasswdFile      string
}

// yamlString quotes s for YAML: a JSON string is a YAML double-quoted
// scalar.
func yamlString(s string) string { return strconv.Quote(s) }

// renderConfig returns a distribution 2.8 config.yml: filesystem storage
// in the registry's directory, deletes allowed (a test may re-push a tag),
// TLS, htpasswd auth, and no debug server (its default listens on another
// port).
func renderConfig(p configParams) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Written by nodeguard lab/registry for a test registry.")
	w("version: 0.1")
	w("log:")
	w("  level: info")
	w("  accesslog:")
	w("    disabled: false")
	w("storage:")
	w("  filesystem:")
	w("    rootdirectory: %s", yamlString(p.StorageDir))
	w("  delete:")
	w("    enabled: true")
	w("http:")
	w("  addr: %s", yamlString(p.Addr))
	w("  tls:")
	w("    certificate: %s", yamlString(p.CertFile))
	w("    key: %s", yamlString(p.KeyFile))
	w("auth:")
	w("  htpasswd:")
	w("    realm: nodeguard-test")
	w("    path: %s", yamlString(p.HtpasswdFile))
	return b.String()
}

// renderHostsTOML is containerd's hosts.toml for the registry at host
// (host:port): HTTPS, trusted through the CA file ca. containerd 1.6 and
// 2.x read it from <config_path>/<host:port>/hosts.toml.
func renderHostsTOML(host, ca string) string {
	server := strconv.Quote("https://" + host)
	return fmt.Sprintf("# Written by nodeguard lab/registry.\nserver = %s\n\n[host.%s]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n  ca = %s\n",
		server, server, strconv.Quote(ca))
}
