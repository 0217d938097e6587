// Package podspec reads Kubernetes Pod manifests and decides whether
// nodeguard can run them as written.
//
// Parse and Load decode YAML or JSON (documents separated by "---"; a v1
// Pod, PodList, or List of Pods per document) strictly: unknown fields,
// duplicate keys, wrong JSON types and unparsable quantities are errors that
// name the field path ("spec.containers[0].imagee: unknown field",
// `spec.containers[0].resources.limits[memory]: Invalid value: "12Zi": ...`).
// A manifest is applied whole or not at all. Decoded pods get the API
// server's defaults (Default), including a stable UID derived from the
// source and the pod.
//
// Validate then checks a pod as the API server does on create, with the
// messages and paths of pkg/apis/core/validation (rendered by
// k8s.io/apimachinery/pkg/util/validation/field), and against nodeguard's
// support and the node's policy (Options).
//
// # What nodeguard does with each field
//
// Honoured (validated here and acted upon by lifecycle):
//
//   - metadata: name (DNS subdomain, required), namespace (DNS label,
//     default "default"), uid (generated when empty; letters, digits and
//     '-'), labels and annotations (validated as Kubernetes does);
//   - spec: containers and initContainers, restartPolicy,
//     terminationGracePeriodSeconds (>= 0), priorityClassName and priority
//     (resolved from Options.PriorityClasses plus the built-in
//     system-node-critical and system-cluster-critical; an unknown class is
//     an error), volumes, hostNetwork, hostPID, hostIPC, dnsPolicy,
//     dnsConfig, hostname, subdomain, securityContext.runAsUser/runAsGroup,
//     os.name linux;
//   - containers: name (DNS label, unique across init and app containers),
//     image (required), command, args, workingDir, ports (1-65535,
//     TCP/UDP/SCTP, unique names, unique hostIP/protocol/hostPort, hostPort
//     equal to containerPort under hostNetwork), env (value, or valueFrom
//     fieldRef of metadata.name, metadata.namespace, metadata.uid or
//     status.podIP), resources (cpu, memory and ephemeral-storage; requests
//     <= limits; an ephemeral-storage limit is enforced by eviction, see
//     lifecycle's localstorage.go), volumeMounts (existing volume, absolute unique mountPath,
//     relative subPath without ".."), imagePullPolicy (Always refused
//     unless Options.ImagePull: a node that does not pull cannot honour
//     it), securityContext
//     (runAsUser, runAsGroup, privileged (refused unless
//     Options.AllowPrivileged), readOnlyRootFilesystem, capabilities
//     add/drop (Linux capability names), allowPrivilegeEscalation);
//   - volumes: emptyDir (medium "" or Memory; sizeLimit sizes a Memory
//     one's tmpfs, and a disk one past it is evicted), hostPath (absolute
//     path without "..", type), configMap, secret, projected (configMap,
//     secret and downwardAPI sources) and downwardAPI (fieldRef of metadata
//     name, namespace, uid, labels, annotations); checked structurally here,
//     the volume code checks the rest.
//
// Accepted only with their harmless or default values (anything else is an
// error): hostUsers true, shareProcessNamespace false,
// automountServiceAccountToken false, setHostnameAsFQDN false,
// terminationMessagePath /dev/termination-log, terminationMessagePolicy File,
// procMount Default, mountPropagation None, recursiveReadOnly Disabled.
// enableServiceLinks is accepted silently (there are no Services).
//
// Ignored with a warning (Validate returns them separately): the scheduling
// fields nodeName, nodeSelector, affinity, tolerations, schedulerName,
// topologySpreadConstraints, schedulingGates and preemptionPolicy, which
// mean nothing to an agent that runs every pod it is given; and what an API
// server fills in (status, metadata.creationTimestamp, resourceVersion,
// generation, selfLink, managedFields), so that "get -o yaml" output can be
// fed back.
//
// Refused, "Forbidden: not supported by nodeguard" (or "Unsupported value"
// for an enumerated value): EVERY other field. The support table is an
// allowlist, so a field added to k8s.io/api later is refused until someone
// decides what nodeguard does with it. Today that includes, among others:
// ephemeralContainers, readinessGates, runtimeClassName, overhead,
// resourceClaims, pod-level resources, activeDeadlineSeconds, hostAliases,
// imagePullSecrets, serviceAccountName, os.name windows, hostUsers false,
// most of the pod securityContext (fsGroup, supplementalGroups, sysctls,
// seccompProfile, ...), and per container: gRPC probes, lifecycle hooks, envFrom,
// env from configMapKeyRef/secretKeyRef/resourceFieldRef, resizePolicy,
// restartPolicy (sidecar init containers), volumeDevices, stdin/tty,
// runAsNonRoot, seccomp/AppArmor/SELinux options, extended resources and
// hugepages; and every volume type other than the six above.
//
// Deliberate differences from Kubernetes: errors put the path first for
// unknown fields and decoding errors (the API server names no path for a
// bad quantity); mountPath must be absolute; hostIP and capability names are
// checked; the subPath error path carries the mount's index; the UID is
// derived, not random (see Default).
package podspec
