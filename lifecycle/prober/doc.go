// Package prober runs a pod's liveness, readiness and startup probes the
// way the kubelet's pkg/kubelet/prober does, and keeps their results.
//
// One worker runs per container per probe type, for the app containers
// and the sidecars (init containers with restartPolicy Always: Containers),
// as the kubelet's prober manager. Its rules are the kubelet's:
//
//   - nothing is probed before the container runs, nor before
//     initialDelaySeconds have passed since it started;
//   - until a startup probe has succeeded, liveness and readiness are not
//     probed, and readiness is false;
//   - a result counts only after failureThreshold (or successThreshold)
//     runs in a row give it; readiness starts false, liveness and startup
//     start Success for a container without such a probe;
//   - a worker probes every periodSeconds, the first probe of a worker
//     made long after the Manager started jittered in [0, period), so that
//     a restarted agent does not probe every pod at once;
//   - after a liveness or startup failure the worker holds off until the
//     container is replaced (a new container ID), and then starts over;
//   - a probe that cannot be made (a runtime error other than a timeout)
//     throws its result away, as the kubelet does.
//
// Exec probes run through the CRI's ExecSync with the probe's timeout (a
// timeout is a failure). TCP and HTTP probes are dialled by the Dialer the
// Manager is given; nodeguard's dials from inside the node's network
// namespace (where the pod network's bridge is), never from anywhere else.
// gRPC probes are refused by podspec: there is no gRPC health client here.
//
// Invariants: a worker never outlives its pod (RemovePod stops and waits
// for them); each probe runs under its own timeout; results are read
// without any CRI call.
package prober
