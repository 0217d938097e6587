// Package agent assembles nodeguard's agent from the rooms of the house:
// nodeguard run (standalone, or a node of a cluster with a kubeconfig) and
// nodeguard guard (beside a kubelet). It opens the state store, connects
// the runtime, starts sensing, the eviction manager and its tripwire, the
// pods and their sources, the exporter and systemd's notifications, and
// stops them in the reverse order. It makes no decision of its own: the
// decisions are package eviction's, the acts the lifecycle's and guard's.
//
// Every goroutine the agent starts belongs to one group (internal/group):
// one that fails or returns early ends the agent with its error, and
// systemd restarts it (the pods stay), rather than leave it running with
// a part dead.
package agent

import (
	"os"

	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/internal/logging"
)

// Options is what the agent needs from its command beyond the
// configuration: systemd notifications, the SIGHUP channel and how to
// reload.
type Options struct {
	// Notifier speaks to systemd (NewNotifier, made before any child
	// process starts).
	Notifier *Notifier
	// HUP delivers SIGHUP, caught by the command from its start.
	HUP <-chan os.Signal
	// Reload reads and validates the configuration again (the file, then
	// the flags): see reloader. nodeguard run only; nil: SIGHUP changes
	// nothing.
	Reload func() (config.Run, error)
	// ConfigPath is the configuration file, for log lines ("" without one).
	ConfigPath string
	// Logs is the command's logger: its level and format follow reloads,
	// its dropped records are counted in the metrics.
	Logs *logging.Logger
	// Version is nodeguard's: in nodeguard_build_info, the node's
	// kubeletVersion and the API clients' user agents.
	Version string
	// CheckNetwork (nodeguard run): verify and collect the pod network
	// even when nodeguard does not write its conflist (the private
	// runtime's is written by its environment).
	CheckNetwork bool
}
