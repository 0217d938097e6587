package agent

import (
	"testing"

	"github.com/nodeguard/nodeguard/kubenode"
	"github.com/nodeguard/nodeguard/lifecycle"
)

func TestTheAPIServerSourceIsOneName(t *testing.T) {
	if kubenode.Source != lifecycle.SourceAPIServer {
		t.Fatalf("kubenode.Source %q, lifecycle.SourceAPIServer %q", kubenode.Source, lifecycle.SourceAPIServer)
	}
}
