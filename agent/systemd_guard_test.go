package agent

import (
	"bytes"
	"strings"
	"testing"
)

const guardUnitFile = "../deploy/systemd/nodeguard-guard.service"

// TestSystemdGuardUnitVerifies runs `systemd-analyze verify` on
// deploy/systemd/nodeguard-guard.service as TestTheSystemdUnitVerifies
// does on nodeguard.service: a copy of the unit, under its own name, with
// ExecStart pointing at the binary built for the tests (verify checks that
// it exists), and any line about the unit fails the test. Then the lines
// guard mode needs, and none of those that would make it start a kubelet
// or hide the cgroups it writes.
func TestSystemdGuardUnitVerifies(t *testing.T) {
	unit, verify := unitVerifier(t, guardUnitFile)
	t.Run("the unit as shipped is clean", func(t *testing.T) {
		if out := verify(t, unit); out != "" {
			t.Errorf("systemd-analyze verify %s:\n%s", guardUnitFile, out)
		}
	})
	t.Run("a directive this systemd lacks is reported", func(t *testing.T) {
		// The check is not vacuous: RestartSteps= came with systemd 254.
		bad := bytes.Replace(unit, []byte("RestartSec=2\n"), []byte("RestartSec=2\nRestartSteps=5\n"), 1)
		if out := verify(t, bad); !strings.Contains(out, "RestartSteps") {
			t.Errorf("systemd-analyze said nothing about RestartSteps=: %q", out)
		}
	})
	t.Run("the unit says what guard mode needs", func(t *testing.T) {
		for _, line := range []string{
			"ExecStart=/usr/local/bin/nodeguard guard --config /etc/nodeguard/guard.yaml",
			"Type=notify", "NotifyAccess=main", "Wants=containerd.service",
			"After=containerd.service kubelet.service", "Restart=always", "RestartSec=2",
			"StartLimitIntervalSec=0", "WatchdogSec=30", "OOMScoreAdjust=-999", "KillMode=control-group",
			"LimitMEMLOCK=infinity", "StandardOutput=journal", "StandardError=journal",
			"SyslogIdentifier=nodeguard-guard",
			// The hardening subset of nodeguard.service.
			"NoNewPrivileges=yes", "RestrictRealtime=yes", "RestrictSUIDSGID=yes", "LockPersonality=yes",
			"SystemCallArchitectures=native", "CapabilityBoundingSet=~CAP_SYS_MODULE", "KeyringMode=private",
		} {
			if !bytes.Contains(unit, []byte("\n"+line+"\n")) {
				t.Errorf("the unit lacks %q", line)
			}
		}
		// The guard must never start a kubelet, nor stop with it: it
		// guards the pods' cgroups while the kubelet is down.
		for _, l := range bytes.Split(unit, []byte("\n")) {
			for _, dep := range []string{"Wants=", "Requires=", "Requisite=", "BindsTo=", "PartOf=", "Upholds="} {
				if bytes.HasPrefix(l, []byte(dep)) && bytes.Contains(l, []byte("kubelet")) {
					t.Errorf("%s: the guard would start or stop with the kubelet", l)
				}
			}
		}
		// It writes the host's cgroups and /proc/<pid>/oom_score_adj, and
		// a mount namespace of its own would copy every pod's mounts.
		for _, bad := range []string{"ProtectSystem=", "PrivateTmp=", "ProtectHome=", "ProtectKernelTunables=",
			"ProtectControlGroups=", "ReadOnlyPaths=", "PrivateDevices=", "MemoryMax=", "Delegate=",
			"ExecReload="} {
			if bytes.Contains(unit, []byte("\n"+bad)) {
				t.Errorf("the unit sets %s", bad)
			}
		}
	})
}
