package main

import (
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/nodeguard/nodeguard/kubenode"
	"github.com/nodeguard/nodeguard/lifecycle"
)

// TestNodeLabelsAddToTheStandaloneOnes: nodeLabels from the configuration
// are the kubelet's --node-labels, added to (and overriding) the labels a
// standalone kubelet gives its node; without any, lifecycle's default
// stands (nil).
func TestNodeLabelsAddToTheStandaloneOnes(t *testing.T) {
	none, err := runConfig{}.nodeLabels()
	if err != nil || none != nil {
		t.Fatalf("without nodeLabels: %v, %v; want nil, nil", none, err)
	}
	got, err := runConfig{NodeLabels: map[string]string{"disktype": "ssd", "kubernetes.io/arch": "other"}}.nodeLabels()
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"disktype": "ssd", "kubernetes.io/arch": "other",
		"kubernetes.io/hostname": strings.ToLower(host), "kubernetes.io/os": runtime.GOOS,
		"beta.kubernetes.io/os": runtime.GOOS, "beta.kubernetes.io/arch": runtime.GOARCH,
	}
	if len(got) != len(want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestTheAPIServerSourceIsOneName(t *testing.T) {
	if kubenode.Source != lifecycle.SourceAPIServer {
		t.Fatalf("kubenode.Source %q, lifecycle.SourceAPIServer %q", kubenode.Source, lifecycle.SourceAPIServer)
	}
}
