package credentials

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

// FuzzParseFile feeds arbitrary bytes to ReadFile's parser (the node's
// config.json or .dockercfg, written by docker login, an operator or a
// provisioning tool) and to FromSecret with both Secret types. Whatever
// the bytes: no panic; every error wraps ErrMalformed; a keyring has no
// more keys than the file has registries, each credential keyed and
// sourced as its key and file; the parsed registries, written back as
// JSON, parse to the same registries; and looking images up never panics.
func FuzzParseFile(f *testing.F) {
	for _, s := range []string{
		`{"auths":{"registry.example:5000":{"username":"node","password":"pw"}}}`,
		`{"registry.example:5000":{"username":"node","password":"pw"}}`,
		`{"auths":{"https://index.docker.io/v1/":{"auth":"dXNlcjpwYXNz"}}}`,
		`{"auths":{"*.example.com/team":{"auth":"dXNlcjpwYXNzAAA=","identitytoken":"t"}}}`,
		`{"registry.example":{"auth":"not base64","email":"x@example"}}`,
		`{"auths":{"http://[::1]:5000/v2/x":{"auth":"bm9jb2xvbg=="}}}`,
		`{"auths":null}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	const path = "/etc/nodeguard/config.json"
	images := []string{"busybox", "registry.example:5000/app:1", "a.example.com/team/x@sha256:00", "[::1]:5000/x", ""}
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := parseFile(b, path)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
		} else {
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(b, &raw); err != nil {
				t.Fatalf("parsed, but is not a JSON object: %v", err)
			}
			// At most a key per member of the object and of its members
			// that are objects ("auths" is matched as encoding/json
			// matches field names, case-insensitively).
			n := len(raw)
			for _, v := range raw {
				var m map[string]json.RawMessage
				if json.Unmarshal(v, &m) == nil {
					n += len(m)
				}
			}
			if k.Len() > n {
				t.Fatalf("%d keys from %d registries", k.Len(), n)
			}
			for _, key := range k.index {
				for _, c := range k.creds[key] {
					if c.Key != key || c.Source != "node file "+path {
						t.Fatalf("credential under %q has key %q, source %q", key, c.Key, c.Source)
					}
				}
			}
			for _, img := range images {
				Lookup(img, k)
			}
		}

		for _, secretKey := range []string{DockerConfigJSONKey, DockerConfigKey} {
			parse := ParseDockerConfigJSON
			if secretKey == DockerConfigKey {
				parse = ParseDockercfg
			}
			cfg, perr := parse(b)
			k, err := FromSecret("secret default/regcred", map[string][]byte{secretKey: b})
			if (err == nil) != (perr == nil) {
				t.Fatalf("%s: FromSecret says %v, the parser %v", secretKey, err, perr)
			}
			if err != nil {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("%s: error does not wrap ErrMalformed: %v", secretKey, err)
				}
				continue
			}
			for _, img := range images {
				Lookup(img, k)
			}
			again, err := json.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			cfg2, err := ParseDockercfg(again)
			if err != nil {
				t.Fatalf("%s: registries written back as %s do not parse: %v", secretKey, again, err)
			}
			if len(cfg) != 0 && !reflect.DeepEqual(cfg, cfg2) {
				t.Fatalf("%s: registries %+v written back parse as %+v", secretKey, cfg, cfg2)
			}
		}
	})
}
