package cri

import (
	"context"
	"errors"
	"fmt"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// containerdNamespace is the containerd namespace the CRI plugin keeps its
// containers in (its default, and what every kubelet node uses).
const containerdNamespace = "k8s.io"

// ErrNotContainerd is wrapped by DeleteTask when the runtime is not
// containerd: the repair is containerd's alone.
var ErrNotContainerd = errors.New("the runtime is not containerd")

// DeleteTask deletes the containerd task of container id through
// containerd's own Tasks service (on the same socket as its CRI), when the
// task's processes are gone.
//
// It is the one repair CRI cannot make. A StartContainer cut short
// between containerd creating the task and reading its pid leaves a task
// CRI never learns the pid of: CRI reports the container exited (or
// created) and will not remove it while the task exists ("cannot delete
// running task", containerd#11037), and once the task's process is killed
// containerd's CRI ignores its exit (it does not match the pid it has, 0),
// so the task stays, stopped, for ever. Deleting the stopped task is what
// `ctr tasks delete` does, and lets CRI remove the container.
//
// A task that still runs is refused (ErrFailedPrecondition); one that is
// already gone is not an error.
func (c *Client) DeleteTask(ctx context.Context, id string) error {
	if c.info.Name != "containerd" {
		return fmt.Errorf("delete task %s: %w (it is %q)", id, ErrNotContainerd, c.info.Name)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "containerd-namespace", containerdNamespace)
	_, err := tasks.NewTasksClient(c.conn).Delete(ctx, &tasks.DeleteTaskRequest{ContainerID: id})
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return opError(ctx, "delete containerd task", id, err)
	}
	return nil
}
