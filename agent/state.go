package agent

import (
	"log/slog"
	"path/filepath"

	"github.com/nodeguard/nodeguard/internal/statestore"
)

// StateSubdir is the directory beneath the root dir that holds the
// agent's state store (internal/statestore): every record it reads back
// after a restart.
const StateSubdir = "state"

// openStateStore opens the agent's state store beneath rootDir.
func openStateStore(rootDir string, log *slog.Logger) (*statestore.Store, error) {
	return statestore.Open(filepath.Join(rootDir, StateSubdir), statestore.Options{Log: log.With("component", "state")})
}
