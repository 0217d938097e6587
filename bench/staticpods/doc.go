// Package staticpods drives any node agent, nodeguard or the real kubelet,
// the one way both understand: pods are written as files into the agent's
// static pod manifest directory, and what became of them is read from the
// container runtime (CRI), never from the agent.
//
// Why this way: the kubelet run without an API server, as the side-by-side
// benchmarks run it, has no API to apply pods through or to ask about them;
// its manifest directory is all it reads. nodeguard reads the same
// directory. And reading the outcome from the runtime measures both agents
// by the same ruler: a pod is Running when the runtime's sandbox is ready
// and every container of its manifest runs, started at the time the
// runtime recorded, whatever either agent would say about it.
//
// Client implements the benchmarks' PodClient (bench.PodClient) so that
// bench.RunOverhead and the churn benchmarks run on either agent unchanged:
//
//   - Apply parses one Pod (lifecycle/podspec, strict) and writes it as
//     <dir>/<namespace>_<name>.yaml atomically: into a temporary file named
//     ".<namespace>_<name>.yaml.*.tmp" in the same directory, renamed over
//     the target. The kubelet's file source reads only names that do not
//     start with a dot (pkg/kubelet/config: a glob of "[^.]*"); nodeguard's
//     (lifecycle/filesource) reads only *.yaml, *.yml and *.json. The
//     temporary name is skipped by both. The file is not fsynced: atomic
//     for the agents that read it is what matters; a benchmark's manifest
//     directory does not outlive a crash of the machine.
//   - Delete removes the file. Like the agent's API (lifecycle/api
//     Client.Delete), deleting a pod that does not exist is an error
//     wrapping api.ErrNotFound, and deleting one whose file is gone but
//     which still runs (terminating) is not an error.
//   - Get and List read the runtime: one ListPodSandbox and one
//     ListContainers per call, and ContainerStatus once in a container's
//     life (once when it runs, once when it has exited), for started_at,
//     finished_at and the exit code, which the listings do not carry; the
//     answers are kept by container id.
//
// Naming: the kubelet names a static pod "<name>-<nodeName>" (the node
// name lower-cased, pkg/kubelet/config generatePodName), nodeguard keeps
// "<name>". The runtime's io.kubernetes.pod.name label is matched against
// the names of the manifests this Client knows (applied through it, or
// found in the directory): an exact match, or one with the suffix
// "-<nodeName>" (WithNodeName; default the host name, as the kubelet's),
// is reported under the manifest's name. Which of the two an agent uses is
// learned from the first match, so that Get can then ask the runtime for
// that one pod's label instead of for the whole namespace.
//
// Phases, as the runtime shows them:
//
//   - Running: the pod's newest sandbox is SANDBOX_READY and every
//     container of the manifest (init containers aside) has a
//     CONTAINER_RUNNING container in it.
//   - Succeeded or Failed: restartPolicy Never (or OnFailure, all exited
//     0) and every container has exited.
//   - Pending: the file exists and neither of the above holds yet.
//   - gone (Get answers api.ErrNotFound, List leaves it out): the file is
//     gone, no sandbox of the pod is ready and no container of it runs. A
//     stopped sandbox counts as gone although it is still listed: the
//     kubelet stops a deleted pod's sandbox at once but removes it only at
//     its next garbage collection.
//
// A pod whose file is gone but which still runs is listed with a
// DeletionTimestamp. Readiness is not visible in the runtime: a container
// with a readiness or startup probe is reported ready once it has been
// running for the probe's initialDelaySeconds plus one periodSeconds (by
// then the agent has probed it), under the condition reason
// ReasonReadinessInferred.
//
// The Client owns its directory: files in it named <namespace>_<name>.yaml
// are its pods; a file changed behind its back is read again only after
// an Apply or Delete of that pod through it.
package staticpods
