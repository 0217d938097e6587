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
//     terminationGracePeriodSeconds (>= 0), activeDeadlineSeconds (1 to
//     2^31-1; the pod fails with DeadlineExceeded past it),
//     priorityClassName and priority (resolved from Options.PriorityClasses
//     plus the built-in system-node-critical and system-cluster-critical; an
//     unknown class is an error), volumes, hostNetwork, hostPID and hostIPC
//     (only with Options.AllowPrivileged: the node's namespaces are the
//     node's), shareProcessNamespace (not with hostPID), dnsPolicy (every
//     policy), dnsConfig, hostname, subdomain, hostAliases (IP addresses,
//     DNS subdomain hostnames; written to the pod's /etc/hosts),
//     nodeSelector (label syntax here; lifecycle admits a pod only if the
//     node's labels match) and tolerations (validated as Kubernetes does;
//     no effect, a standalone node has no taints), serviceAccountName and
//     serviceAccount (DNS subdomain) and automountServiceAccountToken (any
//     value: without a control plane no token is mounted),
//     imagePullSecrets (a warning on a node that does not pull, where they
//     are harmless; on one that pulls, the kubernetes.io/dockerconfigjson
//     and kubernetes.io/dockercfg Secrets of the source directory that
//     lifecycle pulls with), os.name linux, and the pod
//     securityContext: runAsUser, runAsGroup, runAsNonRoot (checked
//     against the image's user at start, as the kubelet), fsGroup and
//     fsGroupChangePolicy (volume ownership, see package mounts),
//     supplementalGroups, supplementalGroupsPolicy (Strict only where
//     the runtime reports the feature, Options.SupplementalGroupsPolicy;
//     elsewhere refused with the kubelet's reason), sysctls (the kubelet's safe set, others only if
//     Options.AllowedUnsafeSysctls matches; never a non-namespaced one, nor
//     a net.* one with hostNetwork), seccompProfile (RuntimeDefault,
//     Unconfined, Localhost beneath <rootDir>/seccomp) and appArmorProfile
//     (refused, with the kubelet's reason, unless Options.AppArmorEnabled;
//     a container's comes from its field, else the deprecated annotation
//     container.apparmor.security.beta.kubernetes.io/<name>, else the
//     pod's, as the kubelet's GetProfile: see AppArmorProfile. The
//     annotations are checked as the API server checks them on create:
//     an existing container, a profile value, the same profile as a field
//     that is set too; with its deprecation warning);
//   - containers: name (DNS label, unique across init and app containers),
//     image (required), command, args, workingDir, ports (1-65535,
//     TCP/UDP/SCTP, unique names, unique hostIP/protocol/hostPort, hostPort
//     equal to containerPort under hostNetwork), env (value, or valueFrom
//     with exactly one of fieldRef (metadata.name, metadata.namespace,
//     metadata.uid, a label or annotation by key, spec.nodeName,
//     spec.serviceAccountName, status.hostIP(s), status.podIP(s)),
//     resourceFieldRef (limits/requests of cpu, memory, ephemeral-storage
//     with the API server's divisors), configMapKeyRef or secretKeyRef
//     (a DNS subdomain name and a ConfigMap key)), envFrom (a valid
//     prefix, exactly one of configMapRef and secretRef), resources (cpu, memory and ephemeral-storage; requests
//     <= limits; an ephemeral-storage limit is enforced by eviction, see
//     lifecycle's localstorage.go), volumeMounts (existing volume, absolute unique mountPath,
//     relative subPath without ".."), volumeDevices (a persistentVolumeClaim
//     volume used once and not also in volumeMounts, at a unique absolute
//     devicePath without ".." that no volumeMount uses), stdin, stdinOnce
//     and tty (given to the runtime, for `nodeguard pod attach`),
//     imagePullPolicy (Always refused
//     unless Options.ImagePull: a node that does not pull cannot honour
//     it), securityContext
//     (runAsUser, runAsGroup, runAsNonRoot, privileged (refused unless
//     Options.AllowPrivileged), readOnlyRootFilesystem, capabilities
//     add/drop (Linux capability names in any case, with or without
//     "CAP_", and ALL, as the API server accepts them: CoreDNS drops
//     "all"), allowPrivilegeEscalation, seccompProfile, appArmorProfile),
//     lifecycle postStart and preStop (exactly one handler: exec with a
//     command, httpGet as a probe's, sleep of 0 to
//     terminationGracePeriodSeconds seconds; tcpSocket accepted with a
//     warning, as the API server does, and failed when it runs, as the
//     kubelet does; not on an init container without restartPolicy
//     Always), restartPolicy Always on an init container only (a sidecar,
//     KEP-753: it may have probes, the other init containers may not; an
//     app container may not set restartPolicy, as with
//     ContainerRestartRules off);
//   - volumes: emptyDir (medium "" or Memory; sizeLimit sizes a Memory
//     one's tmpfs, and a disk one past it is evicted), hostPath (absolute
//     path without "..", type), configMap, secret, projected (configMap,
//     secret and downwardAPI sources), downwardAPI (fieldRef of metadata
//     name, namespace, uid, labels, annotations; resourceFieldRef of a
//     named container, as env's, see ResourceFieldValue), nfs (server, an
//     absolute path, readOnly) and persistentVolumeClaim (claimName a DNS
//     subdomain, readOnly; standalone the claim and its volume come from
//     the node's source directory) and image (KEP-4639: a reference,
//     required, and pullPolicy, defaulted as a container's imagePullPolicy;
//     Always refused unless Options.ImagePull; mounted read-only whatever
//     the volumeMount says, as the kubelet mounts it; refused, naming the
//     runtime, unless Options.ImageVolumes, and a subPath of one unless
//     Options.ImageVolumeSubPath: a runtime that predates CRI Mount.image
//     ignores it and would mount nothing); checked structurally here, the
//     volume code checks the rest.
//
// Accepted only with their harmless or default values (anything else is an
// error): hostUsers true, setHostnameAsFQDN false,
// terminationMessagePath /dev/termination-log, terminationMessagePolicy File
// or FallbackToLogsOnError (a failed container's message is the end of its
// log),
// procMount Default (Unmasked needs hostUsers false), mountPropagation
// None, recursiveReadOnly Disabled.
// enableServiceLinks is accepted silently (there are no Services).
//
// Ignored with a warning (Validate returns them separately): the scheduling
// fields nodeName, affinity, schedulerName, topologySpreadConstraints,
// schedulingGates and preemptionPolicy, which mean nothing to an agent that
// runs every pod it is given; and what an API
// server fills in (status, metadata.creationTimestamp, resourceVersion,
// generation, selfLink, managedFields), so that "get -o yaml" output can be
// fed back.
//
// Refused, "Forbidden: not supported by nodeguard" (or "Unsupported value"
// for an enumerated value): EVERY other field. The support table is an
// allowlist, so a field added to k8s.io/api later is refused until someone
// decides what nodeguard does with it. A refused pod-level field, volume
// type or projected source says why after the colon (refusedWhy: the
// control plane, volume plugin or feature it needs). Today that includes,
// among others: ephemeralContainers, readinessGates, runtimeClassName,
// overhead, resourceClaims, pod-level resources, hostnameOverride,
// schedulingGroup, evictionResponders, os.name windows, hostUsers false,
// the pod securityContext's seLinuxOptions, seLinuxChangePolicy and
// windowsOptions, and per container: lifecycle.stopSignal,
// resourceFieldRef of hugepages, resizePolicy,
// restartPolicyRules,
// seLinuxOptions, windowsOptions, extended resources and
// hugepages; and every volume type other than the nine above (ephemeral
// among them: its claim is made by a control plane's controller).
//
// Deliberate differences from Kubernetes: errors put the path first for
// unknown fields and decoding errors (the API server names no path for a
// bad quantity); mountPath must be absolute; hostIP and capability names are
// checked; the subPath error path carries the mount's index; the UID is
// derived, not random (see Default).
package podspec
