package nodelane

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// The readers below are pure, so the host lane tests them against fixed
// inputs; the checks feed them what the guest's files and commands say.
// They are written from the formats' documentation (the kubelet's systemd
// naming, cgroup v2, crictl's and journalctl's JSON), not from nodeguard's
// own code, so a check never grades the product against itself.

// ErrMalformed reports input that does not have the expected format.
var ErrMalformed = errors.New("malformed")

// ProcCgroupV2 returns the cgroup path of /proc/<pid>/cgroup on a pure
// cgroup v2 system ("0::/kubepods.slice/..."). Any v1 line is an error: the
// lane's node has no v1 hierarchy.
func ProcCgroupV2(b []byte) (string, error) {
	var found string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			return "", fmt.Errorf("parse /proc/pid/cgroup line %q: %w", line, ErrMalformed)
		}
		ctrl, p, ok := strings.Cut(rest, ":")
		if !ok || id != "0" || ctrl != "" {
			return "", fmt.Errorf("parse /proc/pid/cgroup: %q is not a cgroup v2 line (hierarchy %s, controllers %q): %w", line, id, ctrl, ErrMalformed)
		}
		found = p
	}
	if !strings.HasPrefix(found, "/") {
		return "", fmt.Errorf("parse /proc/pid/cgroup %q: no cgroup v2 path: %w", b, ErrMalformed)
	}
	return found, nil
}

// uidPattern is what a pod UID may contain here.
var uidPattern = regexp.MustCompile(`^[0-9A-Za-z-]+$`)

// PodSlice returns the cgroup path of a pod's slice with the kubelet's
// systemd driver beneath the root "/": kubepods.slice/kubepods-<qos>.slice/
// kubepods-<qos>-pod<uid_>.slice, where <uid_> is the UID with '-' escaped
// to '_'; Guaranteed pods sit directly beneath kubepods.slice
// (kubepods-pod<uid_>.slice).
func PodSlice(qos corev1.PodQOSClass, uid string) (string, error) {
	if !uidPattern.MatchString(uid) {
		return "", fmt.Errorf("pod slice of UID %q: %w", uid, ErrMalformed)
	}
	escaped := strings.ReplaceAll(uid, "-", "_")
	switch qos {
	case corev1.PodQOSGuaranteed:
		return "/kubepods.slice/kubepods-pod" + escaped + ".slice", nil
	case corev1.PodQOSBurstable, corev1.PodQOSBestEffort:
		q := strings.ToLower(string(qos))
		return "/kubepods.slice/kubepods-" + q + ".slice/kubepods-" + q + "-pod" + escaped + ".slice", nil
	}
	return "", fmt.Errorf("pod slice of QoS class %q: %w", qos, ErrMalformed)
}

// ContainerScope returns the cgroup path of a container with containerd's
// systemd cgroup driver: its pod's slice, then cri-containerd-<id>.scope.
func ContainerScope(qos corev1.PodQOSClass, uid, containerID string) (string, error) {
	slice, err := PodSlice(qos, uid)
	if err != nil {
		return "", err
	}
	if len(containerID) != 64 || strings.Trim(containerID, "0123456789abcdef") != "" {
		return "", fmt.Errorf("scope of container id %q: %w", containerID, ErrMalformed)
	}
	return slice + "/cri-containerd-" + containerID + ".scope", nil
}

// ParseFlatKeyed parses a cgroup flat-keyed file ("oom 0\noom_kill 1\n").
func ParseFlatKeyed(b []byte) (map[string]int64, error) {
	m := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("parse flat-keyed line %q: %w", sc.Text(), ErrMalformed)
		}
		v, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse flat-keyed line %q: %w", sc.Text(), ErrMalformed)
		}
		m[f[0]] = v
	}
	return m, sc.Err()
}

// RuncSystemdCgroup reads `crictl info` (the CRI plugin's own config,
// which containerd 1.6 and 2.x both show: 1.6 has no RuntimeConfig to ask)
// and returns the runc runtime's options.SystemdCgroup, with the default
// runtime's name; ok is false when the output does not say.
func RuncSystemdCgroup(info []byte) (systemd bool, runtime string, ok bool, err error) {
	var v struct {
		Config struct {
			Containerd struct {
				DefaultRuntimeName string `json:"defaultRuntimeName"`
				Runtimes           map[string]struct {
					RuntimeType string         `json:"runtimeType"`
					Options     map[string]any `json:"options"`
				} `json:"runtimes"`
			} `json:"containerd"`
		} `json:"config"`
	}
	if err := json.Unmarshal(info, &v); err != nil {
		return false, "", false, fmt.Errorf("parse crictl info: %w: %w", ErrMalformed, err)
	}
	runtime = v.Config.Containerd.DefaultRuntimeName
	rt, found := v.Config.Containerd.Runtimes[runtime]
	if !found {
		return false, runtime, false, nil
	}
	b, found := rt.Options["SystemdCgroup"].(bool)
	return b, runtime, found, nil
}

// CRISandbox is one sandbox of `crictl pods -o json`.
type CRISandbox struct {
	ID       string `json:"id"`
	Metadata struct {
		Name      string `json:"name"`
		UID       string `json:"uid"`
		Namespace string `json:"namespace"`
		Attempt   int    `json:"attempt"`
	} `json:"metadata"`
	State  string            `json:"state"`
	Labels map[string]string `json:"labels"`
}

// CRIContainer is one container of `crictl ps -o json`.
type CRIContainer struct {
	ID           string `json:"id"`
	PodSandboxID string `json:"podSandboxId"`
	Metadata     struct {
		Name    string `json:"name"`
		Attempt int    `json:"attempt"`
	} `json:"metadata"`
	State  string            `json:"state"`
	Labels map[string]string `json:"labels"`
}

// ParseCRIPods parses `crictl pods -o json`.
func ParseCRIPods(b []byte) ([]CRISandbox, error) {
	var v struct {
		Items []CRISandbox `json:"items"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("parse crictl pods: %w: %w", ErrMalformed, err)
	}
	return v.Items, nil
}

// ParseCRIContainers parses `crictl ps -o json`.
func ParseCRIContainers(b []byte) ([]CRIContainer, error) {
	var v struct {
		Containers []CRIContainer `json:"containers"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("parse crictl ps: %w: %w", ErrMalformed, err)
	}
	return v.Containers, nil
}

// The kubelet's labels on sandboxes and containers.
const (
	LabelPodName       = "io.kubernetes.pod.name"
	LabelPodNamespace  = "io.kubernetes.pod.namespace"
	LabelPodUID        = "io.kubernetes.pod.uid"
	LabelContainerName = "io.kubernetes.container.name"
)

// JournalEntry is one entry of `journalctl -o json`: its fields as strings
// (a field journald stores as bytes, an array of numbers, is decoded).
type JournalEntry map[string]string

// ParseJournal parses `journalctl -o json`, one object per line.
func ParseJournal(b []byte) ([]JournalEntry, error) {
	var out []JournalEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(line, &raw); err != nil {
			return out, fmt.Errorf("parse journal line %d: %w: %w", n, ErrMalformed, err)
		}
		e := JournalEntry{}
		for k, v := range raw {
			var s string
			if json.Unmarshal(v, &s) == nil {
				e[k] = s
				continue
			}
			var bs []byte
			var nums []int
			if json.Unmarshal(v, &nums) == nil {
				bs = make([]byte, 0, len(nums))
				for _, c := range nums {
					bs = append(bs, byte(c))
				}
				e[k] = string(bs)
				continue
			}
			e[k] = string(v) // null, or a field repeated (an array of strings)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// IPLeases returns the entries of a host-local IPAM network directory that
// are leases: files named by an address. The directory also holds "lock"
// and "last_reserved_ip.<range>", which are not.
func IPLeases(names []string) []string {
	var leases []string
	for _, n := range names {
		if _, err := netip.ParseAddr(n); err == nil {
			leases = append(leases, n)
		}
	}
	return leases
}

// MountsBelow returns the mount points of a /proc/<pid>/mountinfo at or
// beneath dir.
func MountsBelow(mountinfo []byte, dir string) ([]string, error) {
	dir = path.Clean(dir)
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			return nil, fmt.Errorf("parse mountinfo line %q: %w", sc.Text(), ErrMalformed)
		}
		mp := unescapeMountinfo(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// oomMarks are the kernel's words when its OOM killer runs (global or for
// a memory cgroup).
var oomMarks = []string{"invoked oom-killer", "Out of memory", "oom-kill:", "Memory cgroup out of memory", "oom_reaper"}

// KernelOOMLines returns the lines of a kernel log that report an OOM kill.
func KernelOOMLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		for _, m := range oomMarks {
			if strings.Contains(l, m) {
				out = append(out, strings.TrimSpace(l))
				break
			}
		}
	}
	return out
}

// ErrNotReported reports that the runtime does not say what was asked: a
// CRI call it answers Unimplemented (containerd 1.6's RuntimeConfig), or
// a field its answer lacks. It is not ErrMalformed: the runtime is older,
// not broken.
var ErrNotReported = errors.New("not reported by the runtime")

// RuntimeConfigDriver reads `crictl runtime-config`: the cgroup driver the
// runtime reports through CRI RuntimeConfig, as "systemd" or "cgroupfs".
// out is the command's output and failed whether it failed: a failure
// that says Unimplemented (containerd 1.6) and an answer without a
// driver are ErrNotReported; other failures and unknown drivers are
// ErrMalformed.
func RuntimeConfigDriver(out []byte, failed bool) (string, error) {
	if failed {
		if bytes.Contains(out, []byte("code = Unimplemented")) {
			return "", fmt.Errorf("crictl runtime-config: %w: %s", ErrNotReported, lastLine(out))
		}
		return "", fmt.Errorf("crictl runtime-config failed: %w: %s", ErrMalformed, lastLine(out))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cgroup driver" {
			continue
		}
		switch d := strings.TrimSpace(v); d {
		case "SYSTEMD":
			return "systemd", nil
		case "CGROUPFS":
			return "cgroupfs", nil
		default:
			return "", fmt.Errorf("crictl runtime-config: cgroup driver %q: %w", d, ErrMalformed)
		}
	}
	return "", fmt.Errorf("crictl runtime-config names no cgroup driver: %w", ErrNotReported)
}

// lastLine returns the last non-empty line of b, trimmed.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// CRIVersion is what `crictl version` says of the runtime.
type CRIVersion struct {
	RuntimeName, RuntimeVersion, RuntimeAPIVersion string
}

// ParseCRIVersion parses `crictl version` ("RuntimeName:  containerd"
// lines); a name or version missing is ErrMalformed.
func ParseCRIVersion(out []byte) (CRIVersion, error) {
	var v CRIVersion
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch val = strings.TrimSpace(val); strings.TrimSpace(k) {
		case "RuntimeName":
			v.RuntimeName = val
		case "RuntimeVersion":
			v.RuntimeVersion = val
		case "RuntimeApiVersion":
			v.RuntimeAPIVersion = val
		}
	}
	if v.RuntimeName == "" || v.RuntimeVersion == "" {
		return v, fmt.Errorf("parse crictl version %q: no runtime name or version: %w", out, ErrMalformed)
	}
	return v, nil
}

// SandboxImage returns the image the CRI plugin makes sandboxes from, and
// where that was read: containerd 1.6 shows its sandbox_image in `crictl
// info` (config.sandboxImage); containerd 2.x keeps it in the images
// plugin, which `crictl info` does not show, and marks it pinned in
// `crictl images -o json` (pinned_images.sandbox): then the one pinned
// image is it, and more than one pinned image is ambiguous
// (ErrMalformed). Neither shown is ErrNotReported.
func SandboxImage(info, images []byte) (image, source string, err error) {
	var i struct {
		Config struct {
			SandboxImage string `json:"sandboxImage"`
		} `json:"config"`
	}
	if err := json.Unmarshal(info, &i); err != nil {
		return "", "", fmt.Errorf("parse crictl info: %w: %w", ErrMalformed, err)
	}
	if i.Config.SandboxImage != "" {
		return i.Config.SandboxImage, "crictl info config.sandboxImage", nil
	}
	var l struct {
		Images []struct {
			RepoTags []string `json:"repoTags"`
			Pinned   bool     `json:"pinned"`
		} `json:"images"`
	}
	if err := json.Unmarshal(images, &l); err != nil {
		return "", "", fmt.Errorf("parse crictl images: %w: %w", ErrMalformed, err)
	}
	var pinned []string
	for _, im := range l.Images {
		if im.Pinned {
			pinned = append(pinned, strings.Join(im.RepoTags, ","))
		}
	}
	switch len(pinned) {
	case 0:
		return "", "", fmt.Errorf("crictl info has no config.sandboxImage and no image is pinned: %w", ErrNotReported)
	case 1:
		return pinned[0], "the one pinned image of crictl images", nil
	}
	return "", "", fmt.Errorf("crictl info has no config.sandboxImage and %d images are pinned (%s): %w", len(pinned), strings.Join(pinned, " "), ErrMalformed)
}
