package lifecycle

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFallbackMessageIsTheEndOfTheLog: the message is the last 80 lines of
// the CRI log, of which the last 2048 bytes, as the kubelet's
// readLastStringFromContainerLogs; an unreadable log says so.
func TestFallbackMessageIsTheEndOfTheLog(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, lines int, width int) string {
		var b strings.Builder
		for i := 1; i <= lines; i++ {
			fmt.Fprintf(&b, "2026-12-01T17:00:00.%09dZ stderr F %0*d\n", i, width, i)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Run("a short log is the whole message", func(t *testing.T) {
		if got := fallbackMessage(t.Context(), write("short.log", 3, 1)); got != "1\n2\n3\n" {
			t.Errorf("message %q", got)
		}
	})
	t.Run("only the last 80 lines count", func(t *testing.T) {
		got := fallbackMessage(t.Context(), write("long.log", 100, 3))
		if lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n"); len(lines) != 80 || lines[0] != "021" || lines[79] != "100" {
			t.Errorf("message has %d lines, %q ... %q", len(lines), lines[0], lines[len(lines)-1])
		}
	})
	t.Run("of which the last 2048 bytes", func(t *testing.T) {
		got := fallbackMessage(t.Context(), write("wide.log", 80, 99))
		if len(got) != 2048 || !strings.HasSuffix(got, fmt.Sprintf("%099d\n", 80)) {
			t.Errorf("message of %d bytes ending %q", len(got), got[max(0, len(got)-20):])
		}
	})
	t.Run("a missing log is an error message", func(t *testing.T) {
		if got := fallbackMessage(t.Context(), filepath.Join(dir, "absent.log")); !strings.HasPrefix(got, "Error on reading termination message from logs: ") {
			t.Errorf("message %q", got)
		}
	})
}
