package credentials

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrMalformed is wrapped by every error about credentials that do not
// parse.
var ErrMalformed = errors.New("malformed registry credentials")

// The keys of the two Secret types' data (k8s.io/api/core/v1
// DockerConfigJsonKey and DockerConfigKey).
const (
	DockerConfigJSONKey = ".dockerconfigjson"
	DockerConfigKey     = ".dockercfg"
)

// defaultRegistryHost is Docker Hub's registry as docker config files name
// it ("https://index.docker.io/v1/").
const defaultRegistryHost = "index.docker.io"

// Credential is one registry login.
type Credential struct {
	Username, Password string
	// IdentityToken and RegistryToken are the OAuth tokens a docker
	// config may hold instead of a password.
	IdentityToken, RegistryToken string
	// Key is the registry key it was found under ("host:port/path").
	Key string
	// Source says where it comes from, for logs: `secret default/regcred`
	// or `node file /etc/nodeguard/config.json`. Never the secret itself.
	Source string
}

// AuthConfig is c as the CRI's PullImageRequest carries it. Its
// ServerAddress stays empty, as the kubelet leaves it for docker config
// credentials: the keyring has already matched them to the image, and
// containerd parses a ServerAddress as a URL, failing on "host:port" and
// dropping the credentials for "host/path".
func (c Credential) AuthConfig() *runtimeapi.AuthConfig {
	return &runtimeapi.AuthConfig{
		Username: c.Username, Password: c.Password,
		IdentityToken: c.IdentityToken, RegistryToken: c.RegistryToken,
	}
}

// entry is one registry's entry in a docker config file.
type entry struct {
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	Email         string `json:"email,omitempty"`
	Auth          string `json:"auth,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
}

// Config is the registries of a docker config: key to entry, as a
// .dockercfg is and config.json's "auths" is.
type Config map[string]entry

// ParseDockerConfigJSON parses config.json's format ({"auths": {...}}),
// a kubernetes.io/dockerconfigjson Secret's .dockerconfigjson.
func ParseDockerConfigJSON(b []byte) (Config, error) {
	var f struct {
		Auths Config `json:"auths"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if f.Auths == nil {
		return nil, fmt.Errorf(`%w: no "auths" object`, ErrMalformed)
	}
	return f.Auths, f.Auths.decode()
}

// ParseDockercfg parses the legacy .dockercfg format (the registries at
// top level), a kubernetes.io/dockercfg Secret's .dockercfg.
func ParseDockercfg(b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return c, c.decode()
}

// decode fills username and password from each entry's auth field, as the
// kubelet's DockerConfigEntry.UnmarshalJSON does (auth wins).
func (c Config) decode() error {
	for key, e := range c {
		if e.Auth == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(e.Auth)
		if err != nil {
			return fmt.Errorf("%w: registry %q: auth is not base64: %w", ErrMalformed, key, err)
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			return fmt.Errorf(`%w: registry %q: auth is not base64 of "username:password"`, ErrMalformed, key)
		}
		e.Username, e.Password = user, strings.Trim(pass, "\x00")
		c[key] = e
	}
	return nil
}

// FromSecret parses a pull Secret's data: .dockerconfigjson
// (kubernetes.io/dockerconfigjson) or .dockercfg (kubernetes.io/dockercfg).
// source names the Secret in errors and in its credentials.
func FromSecret(source string, data map[string][]byte) (*Keyring, error) {
	var cfg Config
	var err error
	switch {
	case data[DockerConfigJSONKey] != nil:
		cfg, err = ParseDockerConfigJSON(data[DockerConfigJSONKey])
	case data[DockerConfigKey] != nil:
		cfg, err = ParseDockercfg(data[DockerConfigKey])
	default:
		return nil, fmt.Errorf("%s: %w: neither %s (kubernetes.io/dockerconfigjson) nor %s (kubernetes.io/dockercfg) in its data",
			source, ErrMalformed, DockerConfigJSONKey, DockerConfigKey)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	k := &Keyring{}
	k.Add(source, cfg)
	return k, nil
}

// ReadFile reads the node's credentials from path: config.json's format
// when it has an "auths" object, else the legacy .dockercfg (the kubelet
// reads both, by name; the content tells them apart as well).
func ReadFile(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read registry credentials: %w", err)
	}
	return parseFile(b, path)
}

// parseFile is ReadFile's parser: b is the content of the file at path.
func parseFile(b []byte, path string) (*Keyring, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("read registry credentials %s: %w: %w", path, ErrMalformed, err)
	}
	parse := ParseDockercfg
	if _, ok := probe["auths"]; ok {
		parse = ParseDockerConfigJSON
	}
	cfg, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("read registry credentials %s: %w", path, err)
	}
	k := &Keyring{}
	k.Add("node file "+filepath.Clean(path), cfg)
	return k, nil
}

// Keyring is credentials by registry key. The zero value is empty and
// ready.
type Keyring struct {
	index []string // keys, reverse-sorted: longer paths first
	creds map[string][]Credential
}

// Add adds cfg's registries under source. A key that is not a URL is
// skipped, as the kubelet skips it.
func (k *Keyring) Add(source string, cfg Config) {
	if k.creds == nil {
		k.creds = map[string][]Credential{}
	}
	for _, loc := range slices.Sorted(maps.Keys(cfg)) {
		key, ok := keyOf(loc)
		if !ok {
			continue
		}
		e := cfg[loc]
		if _, seen := k.creds[key]; !seen {
			k.index = append(k.index, key)
		}
		k.creds[key] = append(k.creds[key], Credential{
			Username: e.Username, Password: e.Password,
			IdentityToken: e.IdentityToken, RegistryToken: e.RegistryToken,
			Key: key, Source: source,
		})
	}
	slices.Sort(k.index)
	slices.Reverse(k.index)
}

// keyOf is the keyring key of a docker config's registry location: host
// (with port) and path, without scheme or a /v1/ or /v2/ prefix.
func keyOf(loc string) (string, bool) {
	v := loc
	if !strings.HasPrefix(v, "https://") && !strings.HasPrefix(v, "http://") {
		v = "https://" + v
	}
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		return "", false
	}
	p := u.Path
	if strings.HasPrefix(p, "/v2/") || strings.HasPrefix(p, "/v1/") {
		p = p[3:]
	}
	if p == "" || p == "/" {
		return u.Host, true
	}
	return u.Host + p, true
}

// Len is the number of registry keys.
func (k *Keyring) Len() int {
	if k == nil {
		return 0
	}
	return len(k.index)
}

// Lookup returns the credentials for image, every keyring's in order (the
// pod's Secrets first, then the node's), or none: pull anonymously then.
func Lookup(image string, rings ...*Keyring) []Credential {
	repo := Repository(image)
	var out []Credential
	for _, k := range rings {
		out = append(out, k.lookup(repo)...)
	}
	return out
}

func (k *Keyring) lookup(repo string) []Credential {
	if k == nil {
		return nil
	}
	var out []Credential
	for _, key := range k.index {
		if urlsMatch(key, repo) {
			out = append(out, k.creds[key]...)
		}
	}
	if len(out) == 0 && isDefaultRegistry(repo) {
		out = append(out, k.creds[defaultRegistryHost]...)
	}
	return out
}

// urlsMatch reports whether glob (a key) matches target (a repository), as
// the kubelet's URLsMatch: same port, same number of host labels, each a
// glob match, and target's path beginning with glob's.
func urlsMatch(glob, target string) bool {
	g, err1 := url.Parse("https://" + glob)
	t, err2 := url.Parse("https://" + target)
	if err1 != nil || err2 != nil {
		return false
	}
	gLabels, gPort := splitHost(g.Host)
	tLabels, tPort := splitHost(t.Host)
	if gPort != tPort || len(gLabels) != len(tLabels) || !strings.HasPrefix(t.Path, g.Path) {
		return false
	}
	for i, pat := range gLabels {
		if ok, err := filepath.Match(pat, tLabels[i]); err != nil || !ok {
			return false
		}
	}
	return true
}

func splitHost(hostport string) (labels []string, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = hostport, ""
	}
	return strings.Split(host, "."), port
}

// isDefaultRegistry reports whether repo is on Docker Hub.
func isDefaultRegistry(repo string) bool {
	first, _, _ := strings.Cut(repo, "/")
	return first == "docker.io" || first == defaultRegistryHost
}

// Repository is image without its tag and digest, its domain made explicit
// as the kubelet's parsers.ParseImageName does (distribution's
// ParseNormalizedNamed): "busybox:1" is docker.io/library/busybox,
// "team/app" docker.io/team/app, "127.0.0.1:5000/app:1" stays
// 127.0.0.1:5000/app.
func Repository(image string) string {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		name = name[:i]
	}
	first, rest, hasSlash := strings.Cut(name, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + name
	case first == "localhost" || strings.ContainsAny(first, ".:") || first != strings.ToLower(first):
		if first == defaultRegistryHost {
			first = "docker.io"
		}
		if first == "docker.io" && !strings.Contains(rest, "/") {
			rest = "library/" + rest
		}
		return first + "/" + rest
	default:
		return "docker.io/" + name
	}
}
