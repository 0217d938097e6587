package cri

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog asks the runtime to reopen the log file of the
// running container id: after a rotation renamed it, the runtime writes to
// a new file at the container's log path. The runtime refuses a container
// that is not running.
func (c *Client) ReopenContainerLog(ctx context.Context, id string) error {
	if _, err := c.rt.ReopenContainerLog(ctx, &runtimeapi.ReopenContainerLogRequest{ContainerId: id}); err != nil {
		return opError(ctx, "reopen container log", id, err)
	}
	return nil
}
