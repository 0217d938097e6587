package lifecycle

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestNodeDNS(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "resolv.conf")
	const data = "# written by hand\nnameserver 10.0.0.2\nnameserver 10.0.0.3\nsearch corp.example example\noptions ndots:2 edns0\nnameserver\n"
	if err := os.WriteFile(conf, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	want := &runtimeapi.DNSConfig{
		Servers:  []string{"10.0.0.2", "10.0.0.3"},
		Searches: []string{"corp.example", "example"},
		Options:  []string{"ndots:2", "edns0"},
	}
	if got := NodeDNS(conf); !reflect.DeepEqual(got, want) {
		t.Errorf("NodeDNS = %v, want %v (comments and a bare keyword ignored)", got, want)
	}
	if got := NodeDNS(filepath.Join(dir, "missing")); got != nil {
		t.Errorf("NodeDNS of a missing file = %v, want nil", got)
	}
}
