package agent

import (
	"log/slog"
	"slices"
	"strings"

	"github.com/nodeguard/nodeguard/config"
	"github.com/nodeguard/nodeguard/eviction"
	"github.com/nodeguard/nodeguard/internal/logging"
)

// ApplyLogging sets the logger's level and format from a validated
// logging section.
func ApplyLogging(l *logging.Logger, c config.Logging) {
	if l == nil {
		return
	}
	if lvl, err := logging.ParseLevel(c.Level); err == nil {
		l.SetLevel(lvl)
	}
	if f, err := logging.ParseFormat(c.Format); err == nil {
		l.SetFormat(f)
	}
}

// reloader applies the configuration again on SIGHUP, without touching
// pods: the logging section and the eviction policy (thresholds, PSI
// rules, grace and transition periods, cool-down) take effect at once;
// other changes are named in one log line as needing a restart, and the
// running values stay. A file that does not load or validate changes
// nothing, and one error line names the field.
type reloader struct {
	cur    config.Run // in force
	load   func() (config.Run, error)
	path   string
	logs   *logging.Logger
	em     *eviction.Manager // nil: eviction disabled
	wire   *podRootTripwire  // nil: no tripwire
	n      *Notifier
	log    *slog.Logger
	status func() string
}

// onHUP is one SIGHUP, told to systemd: RELOADING=1, then READY=1.
func (r *reloader) onHUP() {
	r.n.reloading()
	r.reload()
	r.n.ready(r.status())
}

// reload is one SIGHUP.
func (r *reloader) reload() {
	if r.load == nil {
		return
	}
	next, err := r.load()
	if err != nil {
		r.log.Error("configuration reload refused, the running configuration stays", "config", r.path, "err", err)
		return
	}
	apply, restart, err := config.Changes(r.cur, next)
	if err != nil {
		r.log.Error("configuration reload refused, the running configuration stays", "config", r.path, "err", err)
		return
	}
	if len(restart) > 0 {
		r.log.Warn("configuration changes need a restart, the running values stay until then", "config", r.path, "fields", restart)
	}
	if len(apply) == 0 {
		r.log.Info("configuration reloaded, nothing to apply", "config", r.path)
		return
	}
	if r.em != nil && slices.ContainsFunc(apply, func(k string) bool { return strings.HasPrefix(k, "eviction.") }) {
		pc, err := next.Eviction.Policy()
		if err == nil {
			err = r.em.SetPolicy(pc)
		}
		if err != nil {
			// Validate parsed the same section: not expected.
			r.log.Error("configuration reload refused, the running configuration stays", "config", r.path, "err", err)
			return
		}
		in := r.em.Policy().Config()
		if r.wire != nil {
			r.wire.setThresholds(in.Thresholds)
		}
		th, rules := describeThresholds(in)
		r.log.Info("eviction thresholds reloaded", "thresholds", th, "psi_rules", rules,
			"transition_period", in.EvictionPressureTransitionPeriod, "cool_down", in.CoolDown)
	}
	ApplyLogging(r.logs, next.Logging)
	r.cur = config.WithReloaded(r.cur, next)
	r.log.Info("configuration reloaded", "config", r.path, "applied", apply,
		"log_level", r.cur.Logging.Level, "log_format", r.cur.Logging.Format)
}

// setThresholds re-aims the tripwire at new thresholds: the next snapshot
// arms it afresh.
func (p *podRootTripwire) setThresholds(th []eviction.Threshold) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.policy.SetThresholds(th)
}

// describeThresholds renders a policy's thresholds and rules for one log
// line: "memory.available<100Mi,nodefs.available<10%".
func describeThresholds(p eviction.PolicyConfig) (thresholds, rules string) {
	var ts, rs []string
	for _, t := range p.Thresholds {
		kind := ""
		if !t.Hard() {
			kind = "(soft " + t.GracePeriod.String() + ")"
		}
		ts = append(ts, t.String()+kind)
	}
	for _, r := range p.PSIRules {
		rs = append(rs, r.String())
	}
	return strings.Join(ts, ","), strings.Join(rs, ",")
}
