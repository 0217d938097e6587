//go:build !nodelane

package nodelane

import (
	"errors"
	"maps"
	"testing"
)

func TestAppArmorLabel(t *testing.T) {
	for _, tt := range []struct {
		name, in      string
		profile, mode string
	}{
		{"an unconfined task", "unconfined\n", "unconfined", ""},
		{"a profile in enforce mode", "nodelane-deny-write (enforce)\n", "nodelane-deny-write", "enforce"},
		{"containerd's default profile", "cri-containerd.apparmor.d (enforce)\n", "cri-containerd.apparmor.d", "enforce"},
		{"a path-named profile in complain mode, NUL-terminated", "/usr/bin/man (complain)\x00", "/usr/bin/man", "complain"},
		{"a hat", "nvidia_modprobe//kmod (enforce)\n", "nvidia_modprobe//kmod", "enforce"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, m, err := AppArmorLabel([]byte(tt.in))
			if err != nil || p != tt.profile || m != tt.mode {
				t.Errorf("AppArmorLabel(%q) = %q, %q, %v; want %q, %q", tt.in, p, m, err, tt.profile, tt.mode)
			}
		})
	}
	for _, in := range []string{"", "\n", "nodelane-deny-write", "x (enforce", " (enforce)\n", "a (en force)", "a (enforce)\nb (enforce)\n"} {
		t.Run("refuses "+in, func(t *testing.T) {
			if p, m, err := AppArmorLabel([]byte(in)); !errors.Is(err, ErrMalformed) {
				t.Errorf("AppArmorLabel(%q) = %q, %q, %v; want ErrMalformed", in, p, m, err)
			}
		})
	}
}

func TestParseAppArmorProfiles(t *testing.T) {
	// What a Debian 12 node with the apparmor package and containerd's
	// default profile lists.
	in := "cri-containerd.apparmor.d (enforce)\nnvidia_modprobe (enforce)\nnvidia_modprobe//kmod (enforce)\nlsb_release (enforce)\n/usr/bin/x y (complain)\n"
	got, err := ParseAppArmorProfiles([]byte(in))
	want := map[string]string{"cri-containerd.apparmor.d": "enforce", "nvidia_modprobe": "enforce", "nvidia_modprobe//kmod": "enforce",
		"lsb_release": "enforce", "/usr/bin/x y": "complain"}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("ParseAppArmorProfiles = %v, %v; want %v", got, err, want)
	}
	if got, err := ParseAppArmorProfiles(nil); err != nil || len(got) != 0 {
		t.Errorf("no profiles loaded: %v, %v; want none", got, err)
	}
	if _, err := ParseAppArmorProfiles([]byte("lsb_release (enforce)\nbroken\n")); !errors.Is(err, ErrMalformed) {
		t.Errorf("a line without a mode: %v, want ErrMalformed", err)
	}
}
