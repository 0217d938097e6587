package lifecycle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// AppArmorEnabledPath says whether the kernel enforces AppArmor: "Y" when
// it does; absent without the AppArmor module (the kubelet's
// apparmor.IsEnabled reads the same file).
const AppArmorEnabledPath = "/sys/module/apparmor/parameters/enabled"

// AppArmorEnabled reads path (AppArmorEnabledPath): true for "Y", false
// for anything else or a missing file (a kernel without AppArmor); an
// error only for a file that exists and cannot be read.
func AppArmorEnabled(path string) (bool, error) {
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read AppArmor state: %w", err)
	}
	return strings.TrimSpace(string(b)) == "Y", nil
}
