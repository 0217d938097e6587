package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunConfigErrorsNameTheField(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"an unknown key is refused by name", "runtimeEndpoint: unix:///x\nrootDirr: /x\n", "rootDirr"},
		{"a relative root dir is refused", "runtimeEndpoint: unix:///x\nrootDir: rel\n", "rootDir"},
		{"a missing runtime endpoint is named", "rootDir: /x\n", "runtimeEndpoint"},
		{"an unsupported reserved resource is named", "runtimeEndpoint: unix:///x\nsystemReserved: {gpu: 1}\n", "systemReserved.gpu"},
		{"a back-off above its maximum is refused", "runtimeEndpoint: unix:///x\nbackoffInitial: 10m\nbackoffMax: 1m\n", "backoffInitial"},
		{"a malformed quantity names the field", "runtimeEndpoint: unix:///x\nkubeReserved: {memory: 12Zi}\n", "12Zi"},
		{"a malformed pod subnet is named", "runtimeEndpoint: unix:///x\nnetwork: {subnet: 10.88.0.0/33}\n", "network.subnet"},
		{"a subnet too small for maxPods is named", "runtimeEndpoint: unix:///x\nnetwork: {subnet: 10.88.0.0/28, maxPods: 110}\n", "network: netplumb"},
		{"a bridge name over 15 bytes is named", "runtimeEndpoint: unix:///x\nnetwork: {bridge: a-bridge-name-too-long}\n", "bridge"},
		{"a relative hostPath prefix is named", "runtimeEndpoint: unix:///x\nvolumes: {hostPathAllow: [data]}\n", "volumes.hostPathAllow[0]"},
		{"a relative source dir is named", "runtimeEndpoint: unix:///x\nvolumes: {sourceDir: src}\n", "volumes.sourceDir"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(c.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadRunConfig(path)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error naming %q", err, c.want)
			}
		})
	}
	t.Run("a valid file passes", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		os.WriteFile(path, []byte("runtimeEndpoint: unix:///run/containerd/containerd.sock\nsystemReserved: {memory: 512Mi, cpu: 500m}\nbackoffInitial: 5s\n"), 0o600)
		cfg, err := loadRunConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		if cfg.BackoffInitial.Duration.String() != "5s" || cfg.SystemReserved.Memory().String() != "512Mi" {
			t.Errorf("decoded %+v", cfg)
		}
	})
}
