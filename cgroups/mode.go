package cgroups

import "strconv"

// Mode is how the host arranges its cgroup hierarchies.
type Mode int

const (
	// ModeV2 is pure cgroup v2: one cgroup2 hierarchy and no v1 mounts.
	ModeV2 Mode = iota + 1
	// ModeHybrid has v1 hierarchies and a cgroup2 mount side by side
	// (systemd's "hybrid" layout; the controllers usually live on v1).
	ModeHybrid
	// ModeV1 has only v1 hierarchies and no cgroup2 mount.
	ModeV1
)

// String returns "v2", "hybrid" or "v1", and "Mode(n)" for anything else.
func (m Mode) String() string {
	switch m {
	case ModeV2:
		return "v2"
	case ModeHybrid:
		return "hybrid"
	case ModeV1:
		return "v1"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}
