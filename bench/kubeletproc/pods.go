package kubeletproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// removeWorkers is how many pods removePods takes down at once: a pod's
// stop and removal take 170-295 ms of containerd's time here, mostly
// waiting; more workers would only queue on containerd's two cores.
const removeWorkers = 4

// removePods removes, through the runtime at endpoint, every pod sandbox
// whose cgroup lies beneath root, the kubelet's cgroup root: the pods the
// kubelet left running when it stopped (it never stops its pods on exit).
// Their containers are killed at once (StopContainer with no grace): the
// run is over. It returns how many it removed.
func removePods(ctx context.Context, endpoint, root string) (int, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, fmt.Errorf("connect to the runtime %s: %w", endpoint, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return 0, fmt.Errorf("list pod sandboxes: %w", err)
	}
	ids := make(chan string)
	var (
		mu   sync.Mutex
		n    int
		errs []error
		wg   sync.WaitGroup
	)
	for range removeWorkers {
		wg.Go(func() {
			for id := range ids {
				ours, err := removePod(ctx, rt, id, root)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if ours {
					n++
				}
				mu.Unlock()
			}
		})
	}
	for _, sb := range list.GetItems() {
		ids <- sb.GetId()
	}
	close(ids)
	wg.Wait()
	return n, errors.Join(errs...)
}

// removePod removes the sandbox id with its containers if its cgroup is
// beneath root, and reports whether it was.
func removePod(ctx context.Context, rt runtimeapi.RuntimeServiceClient, id, root string) (bool, error) {
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		return false, fmt.Errorf("pod sandbox status %s: %w", id, err)
	}
	cg, err := sandboxCgroup([]byte(st.GetInfo()["info"]))
	if err != nil {
		return false, fmt.Errorf("pod sandbox %s: %w", id, err)
	}
	if !strings.HasPrefix(cg, root+"/") {
		return false, nil
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: id}})
	if err != nil {
		return true, fmt.Errorf("list the containers of pod sandbox %s: %w", id, err)
	}
	for _, c := range cs.GetContainers() {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		if _, err := rt.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: c.GetId(), Timeout: 0}); err != nil {
			return true, fmt.Errorf("stop container %s of pod sandbox %s: %w", c.GetId(), id, err)
		}
	}
	if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return true, fmt.Errorf("stop pod sandbox %s: %w", id, err)
	}
	if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return true, fmt.Errorf("remove pod sandbox %s: %w", id, err)
	}
	return true, nil
}

// errNoCgroup reports verbose sandbox info without the pause container's
// cgroups path.
var errNoCgroup = errors.New("no linux.cgroupsPath in the sandbox's verbose info")

// sandboxCgroup reads the pause container's cgroup out of containerd's
// verbose sandbox info (its OCI spec's linux.cgroupsPath: with the
// cgroupfs driver, <cgroup_parent>/<sandbox id>).
func sandboxCgroup(info []byte) (string, error) {
	var v struct {
		RuntimeSpec *struct {
			Linux *struct {
				CgroupsPath string `json:"cgroupsPath"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	}
	if err := json.Unmarshal(info, &v); err != nil {
		return "", fmt.Errorf("verbose sandbox info is not JSON: %w", err)
	}
	if v.RuntimeSpec == nil || v.RuntimeSpec.Linux == nil || v.RuntimeSpec.Linux.CgroupsPath == "" {
		return "", errNoCgroup
	}
	return v.RuntimeSpec.Linux.CgroupsPath, nil
}
