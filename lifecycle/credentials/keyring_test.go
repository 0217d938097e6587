package credentials

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestRepositoryNormalizesAsTheKubelet(t *testing.T) {
	for _, tt := range []struct{ image, want string }{
		{"busybox", "docker.io/library/busybox"},
		{"busybox:1.36", "docker.io/library/busybox"},
		{"team/app:1", "docker.io/team/app"},
		{"docker.io/busybox", "docker.io/library/busybox"},
		{"index.docker.io/team/app", "docker.io/team/app"},
		{"127.0.0.1:5000/nodeguard/busybox:1", "127.0.0.1:5000/nodeguard/busybox"},
		{"localhost/app", "localhost/app"},
		{"registry.example/a/b/c@sha256:" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "registry.example/a/b/c"},
		{"registry.example:443/app:v1@sha256:00", "registry.example:443/app"},
	} {
		if got := Repository(tt.image); got != tt.want {
			t.Errorf("Repository(%q) = %q, want %q", tt.image, got, tt.want)
		}
	}
}

func users(cs []Credential) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Username)
	}
	return out
}

func TestLookupMatchesAsTheKubeletKeyring(t *testing.T) {
	k := &Keyring{}
	k.Add("test", Config{
		"registry.example":             {Username: "host"},
		"https://registry.example/v2/": {Username: "host-v2"},
		"registry.example/team":        {Username: "team"},
		"registry.example/team/app":    {Username: "app"},
		"registry.example:5000":        {Username: "port"},
		"*.mirror.example":             {Username: "glob"},
		"https://index.docker.io/v1/":  {Username: "hub"},
		"http://plain.example":         {Username: "plain"},
	})
	for _, tt := range []struct {
		name, image string
		want        []string
	}{
		// Two locations of one key keep their (sorted) order.
		{"the longest path comes first, then its prefixes", "registry.example/team/app:1", []string{"app", "team", "host-v2", "host"}},
		{"a path prefix matches as a string prefix, as the kubelet's", "registry.example/teamwork/x", []string{"team", "host-v2", "host"}},
		{"a host key matches every path", "registry.example/other", []string{"host-v2", "host"}},
		{"a port must be the same", "registry.example:5000/app", []string{"port"}},
		{"no port matches only no port", "registry.example:443/app", nil},
		{"a glob matches one label", "eu.mirror.example/app", []string{"glob"}},
		{"a glob does not match two labels", "a.eu.mirror.example/app", nil},
		{"a scheme is dropped", "plain.example/app", []string{"plain"}},
		{"Docker Hub images take index.docker.io's", "busybox:1", []string{"hub"}},
		{"another registry takes none", "other.example/app", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := users(Lookup(tt.image, k)); !slices.Equal(got, tt.want) {
				t.Errorf("Lookup(%q) = %q, want %q", tt.image, got, tt.want)
			}
		})
	}
}

func TestLookupTakesThePodsSecretsBeforeTheNodes(t *testing.T) {
	pod1, pod2, node := &Keyring{}, &Keyring{}, &Keyring{}
	pod1.Add("secret ns/a", Config{"registry.example": {Username: "a"}})
	pod2.Add("secret ns/b", Config{"registry.example/team": {Username: "b"}})
	node.Add("node file /x", Config{"registry.example/team/app": {Username: "node"}})
	got := Lookup("registry.example/team/app:1", pod1, pod2, nil, node)
	if want := []string{"a", "b", "node"}; !slices.Equal(users(got), want) {
		t.Fatalf("Lookup = %q, want %q", users(got), want)
	}
	if got[0].Source != "secret ns/a" || got[2].Source != "node file /x" || got[0].Key != "registry.example" {
		t.Errorf("sources and keys = %+v", got)
	}
	if a := got[1].AuthConfig(); a.Username != "b" || a.ServerAddress != "" {
		t.Errorf("AuthConfig = %+v", a)
	}
}

func TestFromSecretReadsBothSecretTypes(t *testing.T) {
	auth := base64.StdEncoding.EncodeToString([]byte("u:p:with:colons"))
	for _, tt := range []struct {
		name string
		data map[string][]byte
	}{
		{"kubernetes.io/dockerconfigjson", map[string][]byte{DockerConfigJSONKey: []byte(`{"auths":{"registry.example":{"auth":"` + auth + `"}}}`)}},
		{"kubernetes.io/dockercfg", map[string][]byte{DockerConfigKey: []byte(`{"registry.example":{"auth":"` + auth + `","email":"x@example"}}`)}},
		{"username and password fields", map[string][]byte{DockerConfigJSONKey: []byte(`{"auths":{"registry.example":{"username":"u","password":"p:with:colons"}}}`)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k, err := FromSecret("secret ns/s", tt.data)
			if err != nil {
				t.Fatal(err)
			}
			got := Lookup("registry.example/app", k)
			if len(got) != 1 || got[0].Username != "u" || got[0].Password != "p:with:colons" {
				t.Errorf("Lookup = %+v, want u / p:with:colons", got)
			}
		})
	}
}

func TestMalformedCredentialsAreErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		data map[string][]byte
	}{
		{"a Secret of another type", map[string][]byte{"username": []byte("u")}},
		{"JSON that does not parse", map[string][]byte{DockerConfigJSONKey: []byte(`{"auths":`)}},
		{"config.json without auths", map[string][]byte{DockerConfigJSONKey: []byte(`{"registry.example":{}}`)}},
		{"auth that is not base64", map[string][]byte{DockerConfigKey: []byte(`{"r.example":{"auth":"%%%"}}`)}},
		{"auth without a colon", map[string][]byte{DockerConfigKey: []byte(`{"r.example":{"auth":"` + base64.StdEncoding.EncodeToString([]byte("nocolon")) + `"}}`)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := FromSecret("secret ns/bad", tt.data)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("FromSecret: err = %v, want ErrMalformed", err)
			}
			if want := "secret ns/bad"; err.Error()[:len(want)] != want {
				t.Errorf("err = %q, does not name %s", err, want)
			}
		})
	}
}

func TestReadFileTakesConfigJSONAndDockercfg(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"config.json": `{"auths":{"registry.example:5000":{"username":"node","password":"pw"}}}`,
		".dockercfg":  `{"registry.example:5000":{"username":"node","password":"pw"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			k, err := ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			got := Lookup("registry.example:5000/app:1", k)
			if len(got) != 1 || got[0].Username != "node" || got[0].Source != "node file "+p {
				t.Errorf("Lookup = %+v", got)
			}
		})
	}
	t.Run("a file that is not JSON", func(t *testing.T) {
		p := filepath.Join(dir, "bad")
		os.WriteFile(p, []byte("user: x"), 0o600)
		if _, err := ReadFile(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("ReadFile: err = %v, want ErrMalformed", err)
		}
	})
	t.Run("a missing file", func(t *testing.T) {
		if _, err := ReadFile(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("ReadFile: err = %v, want ErrNotExist", err)
		}
	})
}
