package mounts

import (
	"fmt"
	"path"
	"strings"
)

// Path limits of Linux (PATH_MAX and NAME_MAX), which the kubelet's atomic
// writer also enforces: a longer path could never be opened anyway, and
// refusing it early names the field instead of failing with ENAMETOOLONG.
const (
	maxPathLength = 4096
	maxNameLength = 255
)

// ValidateSubPath checks a volumeMount's subPath as written in a manifest:
// it must be relative, have no ".." component, no NUL byte, and fit Linux's
// path limits. The empty subPath (mount the whole volume) is valid. A valid
// subPath can still resolve outside its volume through symlinks: Mounts
// resolves it beneath the volume root and refuses that.
func ValidateSubPath(p string) error {
	if p == "" {
		return nil
	}
	return validateRelative(p)
}

// ValidatePayloadPath checks the path of a file written into a configMap,
// secret, projected or downwardAPI volume (items[].path, or a key when there
// are no items): non-empty, relative, no ".." component, not the volume root
// itself, and a first component that does not start with ".." (names such
// as "..data" are the atomic writer's own).
func ValidatePayloadPath(p string) error {
	if p == "" {
		return fmt.Errorf("%w: must not be empty", ErrUnsafePath)
	}
	if err := validateRelative(p); err != nil {
		return err
	}
	clean := path.Clean(p)
	if clean == "." {
		return fmt.Errorf("%w: %q names the volume root", ErrUnsafePath, p)
	}
	first, _, _ := strings.Cut(clean, "/")
	if strings.HasPrefix(first, "..") {
		return fmt.Errorf("%w: %q must not start with '..'", ErrUnsafePath, p)
	}
	return nil
}

func validateRelative(p string) error {
	switch {
	case len(p) > maxPathLength:
		return fmt.Errorf("%w: longer than %d bytes", ErrUnsafePath, maxPathLength)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%w: %q contains a NUL byte", ErrUnsafePath, p)
	case path.IsAbs(p):
		return fmt.Errorf("%w: %q must be a relative path", ErrUnsafePath, p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return fmt.Errorf("%w: %q must not contain '..'", ErrUnsafePath, p)
		}
		if len(c) > maxNameLength {
			return fmt.Errorf("%w: %q has a component longer than %d bytes", ErrUnsafePath, p, maxNameLength)
		}
	}
	return nil
}

// validComponent reports whether s can be used as one path component of a
// directory this package makes (a pod uid, a volume, configMap or secret
// name, a namespace): non-empty, no '/', no NUL, not "." or "..".
func validComponent(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) <= maxNameLength &&
		!strings.ContainsAny(s, "/\x00")
}
