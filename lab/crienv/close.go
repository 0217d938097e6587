package crienv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Close removes everything the environment made, in this order:
//
//  1. every pod sandbox, through CRI (StopPodSandbox, RemovePodSandbox):
//     shims outlive containerd, so pods go first;
//  2. containerd, by its pid: SIGTERM, then SIGKILL after 10 s;
//  3. containers runc still knows in the env's runc root (runc delete
//     --force), then any process left that belongs to the env: a shim
//     whose argv has "-address <Socket()>", anything whose argv names Dir(),
//     or whose root or working directory is beneath Dir() (by pidfd);
//  4. every mount beneath Dir() (overlay rootfs, shm, pod netns, the env's
//     netns), found in /proc/self/mountinfo, deepest first;
//  5. the cgroup tree CgroupParent() in every hierarchy, and a container
//     cgroup named by one of the env's ids if one was made elsewhere;
//  6. the env's entries in /run/containerd/s (shim sockets named by a
//     hash of Socket(), namespace and id) and /var/lib/cni/results
//     (<network>-<id>-<ifname>: the env's network, whose name is unique to
//     it, and go-cni's cni-loopback, by sandbox id);
//  7. Dir(), only when no mount is left beneath it;
//  8. /run/containerd/s, /run/containerd, /var/lib/cni/results and
//     /var/lib/cni when they are empty and no containerd or shim runs on
//     the machine (one that runs may be about to use them).
//
// It then checks with Leftovers and returns an error naming anything that
// remains. Close is idempotent; later calls return the first result.
func (e *Env) Close() error {
	e.closeOnce.Do(func() { e.closeErr = e.close() })
	return e.closeErr
}

func (e *Env) close() error {
	start := time.Now()
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if e.rt != nil && e.running() {
		if err := e.removeAllPods(); err != nil {
			add(fmt.Errorf("%w; containerd log: %s", err, e.logTail()))
		}
	}
	e.collectIDs()
	if e.conn != nil {
		add(e.conn.Close())
	}
	add(e.stopContainerd())
	add(e.deleteRuncContainers())
	e.collectIDs()
	add(e.killProcs())
	unmounted := e.unmountAll()
	add(unmounted)
	add(e.RemoveCgroup(e.cgParent))
	add(e.removeIDCgroups())
	add(e.removeGlobalTraces())
	if e.logFile != nil {
		add(e.logFile.Close())
	}
	if unmounted == nil {
		add(os.RemoveAll(e.dir))
	} else {
		add(fmt.Errorf("keep %s: mounts remain beneath it", e.dir))
	}
	add(removeSharedDirs())
	left, err := e.Leftovers()
	add(err)
	if len(left) > 0 {
		add(fmt.Errorf("left behind: %s", strings.Join(left, "; ")))
	}
	if len(errs) > 0 {
		return fmt.Errorf("close CRI environment %s: %w", e.dir, errors.Join(errs...))
	}
	e.log.Info("crienv: closed", "dir", e.dir, "seconds", round(time.Since(start)))
	return nil
}

// running reports whether containerd has been started and not exited.
func (e *Env) running() bool {
	if e.cmd == nil {
		return false
	}
	select {
	case <-e.exited:
		return false
	default:
		return true
	}
}

// removeAllPods stops and removes every sandbox through CRI (which stops
// and removes their containers), after noting every id.
func (e *Env) removeAllPods() error {
	ctx, cancel := context.WithTimeout(e.baseCtx, closeTimeout)
	defer cancel()
	var errs []error
	cs, err := e.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		errs = append(errs, fmt.Errorf("list containers: %w", err))
	}
	for _, c := range cs.GetContainers() {
		e.remember(c.GetId(), c.GetPodSandboxId())
	}
	ps, err := e.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list pod sandboxes: %w", err))...)
	}
	for _, p := range ps.GetItems() {
		e.remember(p.GetId())
	}
	for _, p := range ps.GetItems() {
		if _, err := e.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("stop pod sandbox %s: %w", p.GetId(), err))
		}
		if _, err := e.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.GetId()}); err != nil {
			errs = append(errs, fmt.Errorf("remove pod sandbox %s: %w", p.GetId(), err))
		}
	}
	return errors.Join(errs...)
}

// collectIDs notes the ids of tasks in the env's state and runc roots and
// of its shims' -id arguments.
func (e *Env) collectIDs() {
	for _, d := range []string{
		filepath.Join(e.dir, "state", "io.containerd.runtime.v2.task", criNamespace),
		filepath.Join(e.runcRoot, criNamespace),
	} {
		ents, _ := os.ReadDir(d)
		for _, ent := range ents {
			e.remember(ent.Name())
		}
	}
	procs, _ := findProcs(e.dir, e.sock)
	for _, p := range procs {
		for i, a := range p.argv {
			if a == "-id" && i+1 < len(p.argv) {
				e.remember(p.argv[i+1])
			}
		}
	}
}

// stopContainerd ends containerd: SIGTERM, then SIGKILL after stopWait.
func (e *Env) stopContainerd() error {
	if e.cmd == nil {
		return nil
	}
	select {
	case <-e.exited:
		return nil
	default:
	}
	// os.Process signals through a pidfd, and containerd is our unreaped
	// child: the pid cannot have been recycled.
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop containerd: %w", err)
	}
	select {
	case <-e.exited:
		return nil
	case <-time.After(stopWait):
	}
	e.log.Warn("crienv: containerd ignored SIGTERM; killing it", "pid", e.cmd.Process.Pid, "after_seconds", stopWait.Seconds())
	if err := e.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill containerd: %w", err)
	}
	select {
	case <-e.exited:
		return nil
	case <-time.After(killWait):
		return fmt.Errorf("kill containerd: still running %v after SIGKILL", killWait)
	}
}

// deleteRuncContainers force-deletes every container left in the env's runc
// root: runc kills its processes and removes its cgroups.
func (e *Env) deleteRuncContainers() error {
	root := filepath.Join(e.runcRoot, criNamespace)
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(ents) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list runc containers: %w", err)
	}
	runc, err := lookTool("runc")
	if err != nil {
		return err
	}
	var errs []error
	for _, ent := range ents {
		ctx, cancel := context.WithTimeout(e.baseCtx, runcTimeout)
		out, err := exec.CommandContext(ctx, runc, "--root", root, "delete", "--force", ent.Name()).CombinedOutput()
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("runc delete --force %s: %w: %s", ent.Name(), err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// killProcs SIGKILLs every process that still belongs to the env.
func (e *Env) killProcs() error {
	procs, err := findProcs(e.dir, e.sock)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range procs {
		e.log.Info("crienv: killing leftover process", "pid", p.pid, "why", p.why, "argv", strings.Join(p.argv, " "))
		if err := killProc(p.pid, e.dir, e.sock); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// unmountAll unmounts every mount beneath the env's directory, deepest
// first, lazily when a plain unmount fails, until none is left.
func (e *Env) unmountAll() error {
	for round := 0; round < 5; round++ {
		mps, err := selfMountsUnder(e.dir)
		if err != nil {
			return fmt.Errorf("unmount beneath %s: %w", e.dir, err)
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			if err := unix.Unmount(mp, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
					e.log.Warn("crienv: unmount failed", "mount_point", mp, "err", err)
				}
			}
		}
	}
	mps, err := selfMountsUnder(e.dir)
	if err != nil {
		return fmt.Errorf("unmount beneath %s: %w", e.dir, err)
	}
	if len(mps) > 0 {
		return fmt.Errorf("unmount beneath %s: still mounted: %s", e.dir, strings.Join(mps, " "))
	}
	return nil
}

// idCgroups are where a container cgroup named by id may be: relative to
// runc's own cgroup when the pod had no cgroup_parent, and /k8s.io/<id> as
// ctr makes them.
func idCgroups(id string) []string { return []string{id, "/" + criNamespace + "/" + id} }

// removeIDCgroups removes container cgroups named by the env's ids outside
// CgroupParent() (pods run without a cgroup_parent).
func (e *Env) removeIDCgroups() error {
	var errs []error
	for _, id := range e.knownIDs() {
		for _, rel := range idCgroups(id) {
			dirs, err := cgroupDirs(e.layout, rel)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, d := range dirs {
				if err := removeCgroupTree(d); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// shimSocket returns the path of the shim socket that containerd 1.6 makes
// for shim id in namespace ns of the daemon at address: /run/containerd/s/
// followed by the hex SHA-256 of address/ns/id.
func shimSocket(address, ns, id string) string {
	sum := sha256.Sum256([]byte(filepath.Join(address, ns, id)))
	return filepath.Join(shimSocketDir, hex.EncodeToString(sum[:]))
}

// globalTraces lists the env's entries outside its directory that exist.
func (e *Env) globalTraces() ([]string, error) {
	var out []string
	for _, id := range e.knownIDs() {
		p := shimSocket(e.sock, criNamespace, id)
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	// The env's network, and go-cni's own loopback network
	// ("cni-loopback-<id>-lo"), which is named by sandbox id.
	patterns := []string{e.netName + "-*"}
	for _, id := range e.knownIDs() {
		patterns = append(patterns, "*-"+id+"-*")
	}
	seen := map[string]bool{}
	for _, pat := range patterns {
		m, err := filepath.Glob(filepath.Join(cniResultsDir, pat))
		if err != nil {
			return nil, err
		}
		for _, p := range m {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(cniNetworksDir, e.netName)); err == nil {
		out = append(out, filepath.Join(cniNetworksDir, e.netName))
	}
	sort.Strings(out)
	return out, nil
}

// removeGlobalTraces removes the env's entries outside its directory. The
// directories themselves stay: another environment may be using them.
func (e *Env) removeGlobalTraces() error {
	traces, err := e.globalTraces()
	if err != nil {
		return fmt.Errorf("find traces outside %s: %w", e.dir, err)
	}
	var errs []error
	for _, p := range traces {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Leftovers lists what of the environment still exists: processes that
// belong to it (see Close), mounts beneath Dir(), Dir() itself, cgroups of
// CgroupParent() or named by its ids in any hierarchy, and its entries in
// /run/containerd/s and /var/lib/cni. Empty after a successful Close.
func (e *Env) Leftovers() ([]string, error) {
	var out []string
	procs, err := findProcs(e.dir, e.sock)
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		out = append(out, "process "+p.String())
	}
	mps, err := selfMountsUnder(e.dir)
	if err != nil {
		return nil, err
	}
	for _, m := range mps {
		out = append(out, "mount "+m)
	}
	if _, err := os.Lstat(e.dir); err == nil {
		out = append(out, "directory "+e.dir)
	}
	rels := []string{e.cgParent}
	for _, id := range e.knownIDs() {
		rels = append(rels, idCgroups(id)...)
	}
	for _, rel := range rels {
		dirs, err := cgroupDirs(e.layout, rel)
		if err != nil {
			return nil, err
		}
		for _, d := range dirs {
			if _, err := os.Lstat(d); err == nil {
				out = append(out, "cgroup "+d)
			}
		}
	}
	traces, err := e.globalTraces()
	if err != nil {
		return nil, err
	}
	for _, t := range traces {
		out = append(out, "file "+t)
	}
	return out, nil
}

// sharedDirs are the directories outside any environment that containerd
// 1.6 and libcni create, children before parents.
var sharedDirs = []string{shimSocketDir, filepath.Dir(shimSocketDir), cniResultsDir, filepath.Dir(cniResultsDir)}

// removeSharedDirs removes the sharedDirs that are empty, unless a
// containerd or a containerd shim runs on the machine: another environment
// (or a real containerd) may be about to create a socket or a result in
// them, and removing the directory under it would fail that.
func removeSharedDirs() error {
	busy, err := containerdRunning()
	if err != nil || busy {
		return err
	}
	for _, d := range sharedDirs {
		// Rmdir fails on a directory that is not empty: exactly the
		// ones to keep.
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("remove empty %s: %w", d, err)
		}
	}
	return nil
}

// containerdRunning reports whether any live process on the machine is a
// containerd or a containerd shim, by the command name in /proc/<pid>/stat.
// Zombies do not count: a shim that has just been killed is one until its
// new parent reaps it.
func containerdRunning() (bool, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false, fmt.Errorf("list processes: %w", err)
	}
	for _, ent := range ents {
		if ent.Name()[0] < '0' || ent.Name()[0] > '9' {
			continue
		}
		stat, err := os.ReadFile("/proc/" + ent.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		comm, state, ok := parseStat(stat)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		if comm == "containerd" || strings.HasPrefix(comm, "containerd-shim") {
			return true, nil
		}
	}
	return false, nil
}

// parseStat returns the command name and state of a /proc/<pid>/stat line
// ("123 (comm) S ..."). The name may contain spaces and parentheses, so it
// ends at the last ')'.
func parseStat(b []byte) (comm string, state byte, ok bool) {
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || end+2 >= len(s) {
		return "", 0, false
	}
	return s[open+1 : end], s[end+2], true
}
