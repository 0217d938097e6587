// Package lifecycle is nodeguard's ACT room for pods: it runs the pods it
// is given through the CRI, the way the kubelet does, and keeps them
// running.
//
// The Manager holds the desired pods (from the manifest directory and the
// local API) and reconciles them against what the runtime has, identified
// by nodeguard's label on sandboxes and containers:
//
//   - a desired pod without a sandbox gets its cgroups (cgroups/kubepods), a
//     sandbox, its init containers one by one to completion, then its
//     containers, each with the kubelet's oom_score_adj;
//   - each container's failure to start is its own, as in the kubelet's
//     SyncPod: a container refused (CreateContainerConfigError, an image
//     that cannot be had, a failed postStart) waits with its reason while
//     the pod's other containers start;
//   - an exited container is restarted per restartPolicy with the
//     kubelet's exponential back-off (10 s doubling to 5 min);
//   - lifecycle hooks run as the kubelet's (hooks.go): postStart (exec
//     through ExecSync, httpGet dialled as the httpGet probe is, sleep)
//     right after StartContainer, before the container counts as running
//     for the status and the prober; a failed one is a FailedPostStartHook
//     event, the container is killed and waits as PostStartHookError, its
//     terminated state saying why, and the back-off restarts it. Every
//     stop of a known pod's running container (deletion, eviction,
//     liveness, a failed postStart) runs its preStop hook first, inside
//     the grace period, and gives TERM what is left of it (at least 2 s,
//     the kubelet's minimum); a hook that outlives the grace is left
//     behind and dies with the container; a failed one is a
//     FailedPreStopHook event (Config.Events, events.go);
//   - sidecars (init containers with restartPolicy Always) as the
//     kubelet's since 1.29 (sidecars.go): started in order with the other
//     init containers, the next one starting once the sidecar has started
//     (its startupProbe passed), kept running and restarted with the
//     back-off whatever the pod's restartPolicy, probed like app
//     containers (their readiness counts for the pod's Ready); on deletion
//     the app containers are stopped first, then the sidecars one by one
//     in reverse order, all within the grace period; when the app
//     containers of a Never or OnFailure pod are done for good (the pod is
//     Succeeded or Failed) the sidecars are stopped and not restarted;
//   - liveness, readiness and startup probes run as the kubelet's
//     (lifecycle/prober): readiness makes a container ready and the pod
//     Ready and ContainersReady, a failed liveness or startup probe kills
//     the container with the probe's grace (or the pod's) and the back-off
//     restarts it; TCP, HTTP and gRPC probes are dialled from the node's
//     network namespace (Network.NodeNetNS, or Config.ProbeNetNS); failed
//     probes and the kills they cause are the kubelet's pod events
//     (Unhealthy, Killing) in Config.Events, through its spam filter;
//   - a sandbox whose pod is no longer desired is stopped (containers with
//     their grace period first) and removed, with its cgroups; only once
//     every source has loaded (SourcesReady), and never one whose source
//     could not be loaded (a manifest file that does not parse, a
//     persisted record that could not be read): that pod keeps its
//     sandbox, containers and volumes, with a SourceUnavailable event
//     (sources.go);
//   - the local API's pods and the eviction records are in the state
//     store (internal/statestore), one record per pod name and per evicted
//     pod, written durably; at start each persisted pod is admitted again
//     on its own, as the kubelet's re-admission: one that no longer
//     validates or fits is kept Failed with the kubelet's reason and an
//     event, its containers stopped, its record and volumes kept
//     (restore.go); nothing found at start makes New fail; an eviction
//     record that cannot be read keeps its pod stopped;
//   - after a restart of nodeguard, running sandboxes of desired pods are
//     adopted, never duplicated; extra sandboxes of one pod are removed;
//   - a pod is admitted only if its nodeSelector matches Config.NodeLabels
//     (the standalone kubelet's hostname, os and arch labels), else
//     rejected as NodeAffinity; one past its activeDeadlineSeconds is
//     ended as the kubelet's: Failed, DeadlineExceeded, containers stopped
//     with its grace period, never started again;
//   - every container gets the kubelet's managed /etc/hosts (the pod's IP
//     under its hostname, hostAliases; a host-network pod the node's file
//     plus hostAliases); the files of pods gone while nodeguard was down
//     are removed once the sources are loaded;
//   - a container that fails with terminationMessagePolicy
//     FallbackToLogsOnError has the end of its log as its message
//     (termination.go; nodeguard mounts no termination message file);
//   - images are resolved by imagePullPolicy as the kubelet's image manager
//     (failed pulls back off: ErrImagePull, ImagePullBackOff) and pulled
//     with the pod's imagePullSecrets, then the node's credentials file,
//     matched as the kubelet's keyring (lifecycle/credentials); a pull is
//     logged when it starts, every 10 s while in flight and when done
//     (size, duration), with the kubelet's image events as log lines;
//   - image volumes (KEP-4639, imagevolumes.go) as the kubelet's: before
//     a container that mounts one is created, the volume's image is
//     resolved by the volume's pullPolicy through the same path as a
//     container's image (credentials, events, back-off; ErrImagePull,
//     ImagePullBackOff or ErrImageNeverPull on that container alone) and
//     handed to the runtime as a read-only CRI image mount, named as the
//     runtime's image store knows it; the images pods mount are in use
//     for the image collector (ImageVolumeImages). Admission refuses them
//     where the runtime's version mounts none (cri.ImageVolumesOf);
//   - container logs are rotated as the kubelet's container log manager
//     (lifecycle/logs), and a removed container's log files go with it;
//   - every 10 s each pod's local storage is measured (emptyDirs, writable
//     layers, logs) and a running pod past an emptyDir sizeLimit, the sum
//     of its containers' ephemeral-storage limits or one container's own
//     is evicted, as by the kubelet's localStorageEviction: its messages,
//     its signals for kubelet_evictions, a grace period of 1 s; static,
//     critical and exempt pods are spared (and warned about at admission).
//
// Disk, as the kubelet's garbage collectors and eviction manager
// (containergc.go, reclaim.go, and the subpackage imagegc: the image
// filesystem and the image collector): DeleteAllUnusedContainers removes nodeguard's
// dead containers and not-ready sandboxes no pod needs; NodeReclaimer runs
// those two, per disk signal, before the eviction manager evicts for disk.
//
// Invariants: it never touches a sandbox or container without nodeguard's
// label; every CRI call runs under a bounded context, and at most
// Config.Workers pods' calls and Config.Stops grace periods are in flight
// (a container waiting out its grace holds no worker); a failure in one pod
// never stops the others; pod status follows Kubernetes (phase,
// conditions, container states with OOMKilled, pod IP).
//
// Where things are, one concern a file: manager.go (Config, Manager, New);
// desired.go (what the sources want: Apply, Delete, Forget, List, Get,
// Wait), persist.go (API pods kept across restarts), restore.go (their
// re-admission at start), migrate.go (an older agent's files moved into
// the state store) and sources.go (sources that could not be loaded);
// runloop.go (the
// run loop and relist); worker.go (per-pod workers), slots.go (the work and
// stop slots); sandbox.go, containers.go, sidecars.go and status.go (one
// pod's sync: its sandbox, its containers, its init sequence and stop
// order, its status); teardown.go and orphans.go
// (stopping and removing sandboxes); gc.go, containergc.go and reclaim.go
// (collection and node-level reclaim); evict.go,
// oomscore.go and localstorage.go (the eviction manager's actor, the next
// victim's oom_score_adj, local-storage limits); images.go (pull policy,
// pulls with credentials), imagevolumes.go (image volumes), containerlogs.go (logs and rotation), exec.go
// (exec, and the streaming sessions: exec -i/-t, attach and port-forward
// through the runtime's streaming server, dialled in the runtime's network
// namespace), probes.go (the prober, lifecycle/prober), hooks.go
// (lifecycle hooks) and events.go (pod events, with the kubelet's spam
// filter); network.go, volumes.go,
// storage.go, dns.go, hosts.go (the pods' /etc/hosts); nodelabels.go
// (nodeSelector admission) and deadline.go (activeDeadlineSeconds);
// apiservice.go (the Manager as the local API's
// PodService); heartbeat.go and runtime.go.
package lifecycle
