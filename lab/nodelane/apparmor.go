package nodelane

import (
	"bytes"
	"fmt"
	"strings"
)

// Readers of the kernel's AppArmor interfaces (Documentation/admin-guide/
// LSM/apparmor.rst and the kernel's security/apparmor/procattr.c): the
// label a task runs under and the profiles the kernel has loaded.

// AppArmorUnconfined is the label of a task no profile confines.
const AppArmorUnconfined = "unconfined"

// AppArmorLabel parses a task's label as /proc/<pid>/attr/apparmor/current
// (or the older /proc/<pid>/attr/current) shows it: "unconfined", or
// "<profile> (<mode>)" with mode enforce, complain, kill or unconfined.
// It returns the profile and its mode ("" for unconfined).
func AppArmorLabel(b []byte) (profile, mode string, err error) {
	s := strings.TrimRight(string(b), "\x00\n")
	if s == AppArmorUnconfined {
		return s, "", nil
	}
	name, mode, ok := cutMode(s)
	if !ok || name == "" || strings.Contains(s, "\n") {
		return "", "", fmt.Errorf("parse AppArmor label %q: want \"unconfined\" or \"<profile> (<mode>)\": %w", s, ErrMalformed)
	}
	return name, mode, nil
}

// ParseAppArmorProfiles parses /sys/kernel/security/apparmor/profiles, one
// "<name> (<mode>)" line per loaded profile (containerd's and the
// kubelet's own lookups read the same file), into name -> mode.
func ParseAppArmorProfiles(b []byte) (map[string]string, error) {
	out := map[string]string{}
	for _, line := range bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		name, mode, ok := cutMode(string(line))
		if !ok || name == "" {
			return nil, fmt.Errorf("parse AppArmor profiles: line %q is not \"<name> (<mode>)\": %w", line, ErrMalformed)
		}
		out[name] = mode
	}
	return out, nil
}

// cutMode splits "<name> (<mode>)" at its last " (": a profile's name may
// hold spaces and parentheses (a path or a hat), its mode never does.
func cutMode(s string) (name, mode string, ok bool) {
	i := strings.LastIndex(s, " (")
	if i < 0 || !strings.HasSuffix(s, ")") {
		return "", "", false
	}
	mode = s[i+2 : len(s)-1]
	if mode == "" || strings.ContainsAny(mode, " ()") {
		return "", "", false
	}
	return s[:i], mode, true
}
