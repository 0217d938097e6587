package config

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/nodeguard/nodeguard/guard"
	"github.com/nodeguard/nodeguard/pressure/nodestats"
)

// DefaultGuardPath is read by `nodeguard guard` when it exists.
const DefaultGuardPath = "/etc/nodeguard/guard.yaml"

// Guard is the configuration file of `nodeguard guard`. Its keys are those
// of Run that make sense beside a kubelet, with the same meanings, and
// how a hard eviction removes the pod; unknown keys are errors.
type Guard struct {
	// RuntimeEndpoint is the kubelet's CRI socket.
	// Kubelet: containerRuntimeEndpoint.
	RuntimeEndpoint string `json:"runtimeEndpoint"`
	// CgroupDriver is the kubelet's: "systemd", "cgroupfs", or empty to
	// find it from which of kubepods.slice and kubepods exists.
	// Kubelet: cgroupDriver.
	CgroupDriver string `json:"cgroupDriver"`
	// CgroupRoot is the kubelet's cgroupRoot ("/"). Relative, it is
	// beneath the guard's own cgroup: a test's runtime, not a node's.
	// Kubelet: cgroupRoot.
	CgroupRoot string `json:"cgroupRoot"`
	// Kubeconfig is the API server's; empty: the pod's service account
	// when guard mode runs in a pod (the DaemonSet), otherwise none, and
	// guard mode acts through cgroups only.
	// Kubelet: --kubeconfig.
	Kubeconfig string `json:"kubeconfig"`
	// NodeName is the node's name in the API (default: the lower-cased
	// hostname, as the kubelet's).
	// Kubelet: --hostname-override.
	NodeName string `json:"nodeName"`
	// RootDir is the guard's state directory (the state store beneath
	// it, state/).
	// Kubelet: none.
	RootDir string `json:"rootDir"`
	// MetricsAddr is where /metrics is served. Empty: off.
	// Kubelet: none.
	MetricsAddr string `json:"metricsAddr"`
	// EnableProfiling serves Go's /debug/pprof/ beside /metrics.
	// Kubelet: enableProfilingHandler.
	EnableProfiling bool `json:"enableProfiling"`
	// Eviction is nodeguard run's eviction section, memory signals only,
	// and hardAction.
	Eviction GuardEviction `json:"eviction"`
	// Logging is the log level and format.
	Logging Logging `json:"logging"`
	// Kernel is the eBPF event pipeline.
	Kernel Kernel `json:"kernel"`
}

// GuardEviction is nodeguard run's eviction section and how a hard
// eviction removes the pod through the API server.
type GuardEviction struct {
	Eviction `json:",inline"`
	// HardAction is how a hard eviction removes the pod through the API
	// server: "delete" (the kubelet's Evicted status, then a delete) or
	// "evict" (the Eviction API, which PodDisruptionBudgets may refuse).
	// Kubelet: none.
	HardAction string `json:"hardAction"`
}

// DefaultGuard is guard mode's configuration without a file.
func DefaultGuard() Guard {
	r := Default()
	// Memory alone (disk and pid evictions stay the kubelet's, whose
	// image and container garbage collection comes first), above the
	// kubelet's 100Mi: the guard acts first.
	r.Eviction.EvictionHard = map[string]string{"memory.available": "200Mi"}
	return Guard{
		RuntimeEndpoint: "unix:///run/containerd/containerd.sock",
		CgroupRoot:      "/",
		RootDir:         "/var/lib/nodeguard-guard",
		MetricsAddr:     DefaultMetricsAddr,
		Eviction:        GuardEviction{Eviction: r.Eviction, HardAction: string(guard.HardDelete)},
		Logging:         r.Logging,
		Kernel:          r.Kernel,
	}
}

// LoadGuard reads the file at path over the defaults (no path: the
// defaults); unknown keys and values that do not parse are errors that
// name them.
func LoadGuard(path string) (Guard, error) {
	cfg := DefaultGuard()
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	if err := decodeStrict(b, raw, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Validate names the first bad field.
func (c Guard) Validate() error {
	// The sections shared with nodeguard run are checked as it checks
	// them.
	r := Default()
	r.RuntimeEndpoint, r.CgroupRoot, r.RootDir, r.MetricsAddr, r.EnableProfiling = c.RuntimeEndpoint, c.CgroupRoot, c.RootDir, c.MetricsAddr, c.EnableProfiling
	r.Eviction, r.Logging, r.Kernel = c.Eviction.Eviction, c.Logging, c.Kernel
	if c.CgroupDriver != "" {
		r.CgroupDriver = c.CgroupDriver
	}
	if err := r.Validate(); err != nil {
		return err
	}
	if _, err := guard.ParseHardAction(c.Eviction.HardAction); err != nil {
		return fmt.Errorf("eviction.hardAction: %w", err)
	}
	policy, err := c.Eviction.Policy()
	if err != nil {
		return err
	}
	for _, th := range policy.Thresholds {
		if th.Signal != nodestats.SignalMemoryAvailable && th.Signal != nodestats.SignalAllocatableMemoryAvailable {
			return fmt.Errorf("eviction: %s: guard mode evicts for memory; disk and pid evictions are the kubelet's (its garbage collection comes first)", th.Signal)
		}
	}
	return nil
}
