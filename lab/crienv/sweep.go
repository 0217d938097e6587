package crienv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nodeguard/nodeguard/cgroups"
	"github.com/nodeguard/nodeguard/oomadj"
)

// dirPrefix starts the name of every environment's directory.
const dirPrefix = "nodeguard-crienv-"

// recordFile, in an environment's directory, names its owner and what Close
// needs to find the rest, so that SweepStale can clean up after an owner
// that died without Close.
const recordFile = "env.json"

// record is the content of recordFile.
type record struct {
	OwnerPID     int    `json:"owner_pid"`
	OwnerStart   uint64 `json:"owner_start"` // /proc/<pid>/stat starttime
	Socket       string `json:"socket"`
	NetNS        string `json:"netns"`
	Network      string `json:"network"`
	Bridge       string `json:"bridge"`
	CgroupParent string `json:"cgroup_parent"`
	RuncRoot     string `json:"runc_root"`
}

// writeRecord writes the env's recordFile.
func (e *Env) writeRecord() error {
	start, err := oomadj.Start(os.Getpid())
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(record{
		OwnerPID: os.Getpid(), OwnerStart: start,
		Socket: e.sock, NetNS: e.netns, Network: e.netName, Bridge: e.bridge,
		CgroupParent: e.cgParent, RuncRoot: e.runcRoot,
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(e.dir, recordFile), append(b, '\n'), 0o644)
}

// SweepStale closes every environment beneath baseDir (os.TempDir() when
// empty) whose owner process is gone: a test binary that was killed or
// timed out leaves its shims, containers, mounts and cgroups behind
// (containerd itself gets SIGTERM when its parent dies). It is Close run
// from the environment's recordFile; containerd is dead, so pods go through
// runc and the shims' pids. Environments of live owners, and directories
// without a readable record, are left alone. Start calls it.
func SweepStale(ctx context.Context, baseDir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if baseDir == "" {
		baseDir = os.TempDir()
	}
	dirs, err := filepath.Glob(filepath.Join(baseDir, dirPrefix+"*"))
	if err != nil {
		return fmt.Errorf("sweep stale CRI environments: %w", err)
	}
	var layout *cgroups.Layout
	var errs []error
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, recordFile))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", filepath.Join(dir, recordFile), err))
			continue
		}
		if start, err := oomadj.Start(r.OwnerPID); err == nil && start == r.OwnerStart {
			continue // its owner lives
		}
		if !r.valid(dir) {
			errs = append(errs, fmt.Errorf("sweep %s: %s does not describe an environment in it", dir, recordFile))
			continue
		}
		if layout == nil {
			if layout, err = cgroups.Discover(); err != nil {
				return fmt.Errorf("sweep stale CRI environments: %w", err)
			}
		}
		log.Info("crienv: removing a stale environment", "dir", dir, "dead_owner_pid", r.OwnerPID)
		e := &Env{
			log: log, baseCtx: context.WithoutCancel(ctx), layout: layout,
			dir: dir, sock: r.Socket, netns: r.NetNS, netName: r.Network, bridge: r.Bridge,
			cgParent: r.CgroupParent, runcRoot: r.RuncRoot, ids: map[string]bool{},
		}
		if err := e.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// valid reports whether r's paths lie in dir and its names are the kind
// Start makes, so that a damaged or foreign record cannot make Close touch
// anything else.
func (r record) valid(dir string) bool {
	for _, p := range []string{r.Socket, r.NetNS, r.RuncRoot} {
		if !under(filepath.Clean(p), dir) || p == dir {
			return false
		}
	}
	return strings.HasPrefix(r.Network, dirPrefix) && !strings.ContainsAny(r.Network, "/*?[") &&
		strings.HasPrefix(r.CgroupParent, dirPrefix) && !strings.ContainsAny(r.CgroupParent, "/.") &&
		r.Bridge != ""
}
