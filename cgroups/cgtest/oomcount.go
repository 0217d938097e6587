package cgtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// OOMKills is the kernel's own count of OOM kills in the sandbox's memory
// cgroup: "oom_kill" in memory.events on cgroup2, in memory.oom_control on
// v1 (Linux 4.13+). Tests compare it with the oom_kill events they saw.
func (s *Sandbox) OOMKills() (uint64, error) {
	if s.memory == nil {
		return 0, fmt.Errorf("count oom kills of sandbox %s: no memory hierarchy", s.rel)
	}
	name := filepath.Join(s.memory.Path, "memory.oom_control")
	if s.memory.Hierarchy.V2() {
		name = filepath.Join(s.memory.Path, "memory.events")
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, fmt.Errorf("count oom kills: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || k != "oom_kill" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("count oom kills: %s: oom_kill %q: %w", name, v, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("count oom kills: %s has no oom_kill line", name)
}
