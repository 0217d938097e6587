package agent

import (
	"testing"

	"github.com/nodeguard/nodeguard/lab/testbin"
)

// The tests drive the agent as its users do, through the command.
func TestMain(m *testing.M) { testbin.Main(m) }

func buildBinary(t *testing.T) string { return testbin.Nodeguard(t) }
