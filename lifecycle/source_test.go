package lifecycle

import "testing"

// The eviction policy spares static pods, as the kubelet does: only the
// manifest directory's are, not the API server's (node mode) nor the
// local API's.
func TestOnlyManifestPodsAreStatic(t *testing.T) {
	for source, want := range map[string]bool{"file:/etc/nodeguard/manifests/web.yaml": true, SourceAPI: false, SourceAPIServer: false} {
		if got := staticSource(source); got != want {
			t.Errorf("staticSource(%q) = %v, want %v", source, got, want)
		}
	}
}
