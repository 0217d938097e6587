package logging

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// statID is f's "<device>:<inode>", as systemd writes JOURNAL_STREAM.
func statID(t *testing.T, f *os.File) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
