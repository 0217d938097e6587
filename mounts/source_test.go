package mounts

import (
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnvSourcesReadTheVolumesSourceDir(t *testing.T) {
	e := newEnv(t)
	e.writeSource(t, sourceConfigMaps, "default", "app", map[string]string{"MODE": "prod", "PORT": "8080"})
	e.writeSource(t, sourceSecrets, "default", "db", map[string]string{"PASSWORD": "s3cret"})
	// What readSource skips for volumes is skipped here too: an atomic
	// writer's own names and a directory.
	mustWrite(t, filepath.Join(e.source, sourceConfigMaps, "default", "app", "..data"), "x")
	mustMkdir(t, filepath.Join(e.source, sourceConfigMaps, "default", "app", "subdir"))

	tests := []struct {
		name      string
		read      func(ns, name string) (map[string][]byte, bool, error)
		ns, obj   string
		want      map[string]string
		wantFound bool
		wantErr   error
	}{
		{name: "a ConfigMap gives its keys", read: e.m.ConfigMap, ns: "default", obj: "app",
			want: map[string]string{"MODE": "prod", "PORT": "8080"}, wantFound: true},
		{name: "a Secret gives its keys", read: e.m.Secret, ns: "default", obj: "db",
			want: map[string]string{"PASSWORD": "s3cret"}, wantFound: true},
		{name: "a missing ConfigMap is not found, without error", read: e.m.ConfigMap, ns: "default", obj: "nope"},
		{name: "a Secret is not read as a ConfigMap", read: e.m.ConfigMap, ns: "default", obj: "db"},
		{name: "another namespace's ConfigMap is not found", read: e.m.ConfigMap, ns: "other", obj: "app"},
		{name: "a name that climbs out is refused", read: e.m.Secret, ns: "default", obj: "..", wantErr: ErrUnsafePath},
		{name: "a name with a slash is refused", read: e.m.Secret, ns: "default/db", obj: "x", wantErr: ErrUnsafePath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, found, err := tt.read(tt.ns, tt.obj)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || found != tt.wantFound {
				t.Fatalf("found %v, err %v; want found %v", found, err, tt.wantFound)
			}
			got := map[string]string{}
			for k, v := range data {
				got[k] = string(v)
			}
			if tt.want == nil {
				tt.want = map[string]string{}
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("data %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEnvSourcesWithoutSourceDirFindNothing(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.SourceDir = "" })
	if _, found, err := e.m.ConfigMap("default", "app"); found || err != nil {
		t.Fatalf("found %v, err %v: want nothing found without a SourceDir", found, err)
	}
}

// A source the volume code would refuse (larger than the API server allows
// an object to be) is an error for env too, not "not found".
func TestEnvSourceTooLargeIsAnError(t *testing.T) {
	e := newEnv(t)
	e.writeSource(t, sourceConfigMaps, "default", "big", map[string]string{"BLOB": strings.Repeat("x", maxSourceBytes+1)})
	data, found, err := e.m.ConfigMap("default", "big")
	if err == nil || found || data != nil {
		t.Fatalf("data %d keys, found %v, err %v: want an error", len(data), found, err)
	}
}
