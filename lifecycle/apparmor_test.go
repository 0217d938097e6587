package lifecycle_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nodeguard/nodeguard/lifecycle"
)

func TestAppArmorEnabled(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		name, path string
		want       bool
	}{
		{"Y is enabled", write("y", "Y\n"), true},
		{"N is disabled", write("n", "N\n"), false},
		{"a kernel without the module has no file and no AppArmor", filepath.Join(dir, "absent"), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := lifecycle.AppArmorEnabled(tt.path)
			if err != nil || got != tt.want {
				t.Errorf("AppArmorEnabled = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	t.Run("an unreadable file is an error, not a guess", func(t *testing.T) {
		if _, err := lifecycle.AppArmorEnabled(dir); err == nil {
			t.Error("reading a directory gave no error")
		}
	})
}
