// Termination messages of exited containers.

package lifecycle

import (
	"context"
	"fmt"

	"github.com/nodeguard/nodeguard/lifecycle/logs"
)

// The kubelet's bounds on a message taken from a log
// (kubecontainer.MaxContainerTerminationMessageLogLines and
// MaxContainerTerminationMessageLogLength): the last 80 lines, of which
// the last 2048 bytes.
const (
	fallbackMessageLines = 80
	fallbackMessageBytes = 2048
)

// fallbackMessage is terminationMessagePolicy FallbackToLogsOnError, as
// the kubelet's readLastStringFromContainerLogs: for a container that
// failed without a message, the end of its log. nodeguard mounts no
// termination message file, so the log is where a failed container's
// message comes from.
func fallbackMessage(ctx context.Context, logPath string) string {
	var tail endBuffer
	cctx, cancel := call(ctx)
	defer cancel()
	if err := logs.Read(cctx, logPath, logs.Options{Tail: fallbackMessageLines}, &tail); err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	return string(tail.b)
}

// endBuffer keeps the last fallbackMessageBytes bytes written to it (the
// kubelet's circbuf).
type endBuffer struct{ b []byte }

func (e *endBuffer) Write(p []byte) (int, error) {
	e.b = append(e.b, p...)
	if over := len(e.b) - fallbackMessageBytes; over > 0 {
		e.b = append(e.b[:0], e.b[over:]...)
	}
	return len(p), nil
}
