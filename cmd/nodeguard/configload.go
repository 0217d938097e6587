package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/nodeguard/nodeguard/agent"
	"github.com/nodeguard/nodeguard/config"
)

// flagOverrides puts the flags given on the command line over the
// configuration file's values, for run and guard alike, at start and at
// every SIGHUP reload: a flag that was not given leaves the file's value
// (or the default's) in force.
type flagOverrides struct{ fs *pflag.FlagSet }

// set puts v in *dst when flag name was given.
func (o flagOverrides) set(name string, dst *string, v string) {
	if o.fs.Changed(name) {
		*dst = v
	}
}

// logging puts the global --log-level and --log-format over l.
func (o flagOverrides) logging(g *globalFlags, l *config.Logging) {
	o.set("log-level", &l.Level, g.logLevel)
	o.set("log-format", &l.Format, g.logFormat)
}

// validateConfig validates cfg, loaded from path: an error names the file
// when there is one.
func validateConfig(path string, cfg interface{ Validate() error }) error {
	if err := cfg.Validate(); err != nil {
		if path != "" {
			return fmt.Errorf("config %s: %w", path, err)
		}
		return err
	}
	return nil
}

// configLoaded makes the configuration's logging the logger's (its level
// and format) and says which file it came from.
func configLoaded(g *globalFlags, log *slog.Logger, l config.Logging, path string) {
	agent.ApplyLogging(g.logs, l)
	if path != "" {
		log.Info("configuration loaded", "config", path)
	}
}
