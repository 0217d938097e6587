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
//     made within a period of the Manager's start jittered in [0, period),
//     so that a restarted agent does not probe every pod at once; a probe
//     slower than its period is followed by one at once, as a ticker's
//     kept tick;
//   - a started container that is not ready when its status is made has
//     its readiness probed at once if its worker has not probed it yet
//     (Manager.Trigger), and the next probe comes a period later;
//   - unlike the kubelet's, the instants of the tcpSocket, httpGet and
//     grpc probes fall on a 1 s grid from the Manager's start, so that the
//     probes of many pods are made together and the process wakes once
//     for them, not once for each (exec probes, the runtime's work, keep
//     instants of their own);
//   - after a liveness or startup failure the worker holds off until the
//     container is replaced (a new container ID), and then starts over;
//   - a probe that cannot be made (a runtime error other than a timeout)
//     throws its result away, as the kubelet does.
//
// Exec probes run through the CRI's ExecSync with the probe's timeout (a
// timeout is a failure). TCP, HTTP and gRPC probes are dialled by the
// Dialer the Manager is given; nodeguard's dials from inside the node's
// network namespace (where the pod network's bridge is), never from
// anywhere else: NetNSDialer's sockets are all made by one thread that
// entered that namespace once and never leaves it, and are connected
// from wherever the probe runs. A gRPC probe is one grpc.health.v1.Health/Check over a
// plaintext connection of its own, as the kubelet's pkg/probe/grpc: only
// SERVING succeeds, and every failure carries the kubelet's message.
//
// Every failed or errored probe run (not only the one that reaches
// failureThreshold) is told to Config.OnEvent, as the kubelet records a
// Warning "Unhealthy" event for each; an HTTP redirect to another host is
// a success with a Warning "ProbeWarning" event.
//
// Handlers.HTTPGet is the httpGet probe's request without its verdict:
// lifecycle's httpGet hooks send theirs through it, so that they are
// dialled from the same place.
//
// Invariants: a worker never outlives its pod (RemovePod stops and waits
// for them); each probe runs under its own timeout; results are read
// without any CRI call.
package prober
