// Package cri is nodeguard's Container Runtime Interface client: a thin,
// context-bounded wrapper over the CRI v1 gRPC services of containerd (or
// CRI-O), and the pure conversions from Kubernetes pods to CRI configs that
// the kubelet's kuberuntime package performs.
//
// # Client
//
// Dial connects to a unix socket and shakes hands with runtime v1 Version
// before it returns, so that a Client always talks to a CRI v1 runtime.
// Failures are typed: *EndpointError for a socket that is missing
// (fs.ErrNotExist), is not a socket, or refuses connections; ErrNotCRI for a
// peer that is not a CRI v1 server (a gRPC server without the service, or
// something that does not speak gRPC at all); context.DeadlineExceeded for a
// handshake that timed out. Every operation takes a context and wraps errors
// with the operation and the object, "run pod sandbox default/web: ...";
// gRPC NotFound also wraps ErrNotFound, and the gRPC status stays reachable
// through status.FromError.
//
// Features is what the runtime says it implements (StatusResponse
// features, the kubelet's node status.features): the daemon reads it once
// at start, and the pod fields that need a feature are admitted by it
// (supplementalGroupsPolicy Strict needs supplemental_groups_policy),
// never by the runtime's version. The one exception has no feature to
// read: image volumes (CRI Mount.image and image_sub_path), which a
// runtime that predates them ignores, are admitted by ImageVolumesOf from
// the runtime's name and version (containerd 2.1 and 2.2).
//
// # Conversions
//
// SandboxConfig and ContainerConfig build the CRI configs exactly as the
// kubelet's generatePodSandboxConfig and generateContainerConfig do for the
// pod fields nodeguard accepts (lifecycle/podspec): the kubelet's labels and
// annotations, namespace modes, port mappings, DNS, the environment as
// makeEnvironmentVariables resolves it (envFrom, fieldRef, resourceFieldRef,
// configMapKeyRef, secretKeyRef, from EnvSources and NodeInfo) with $(VAR)
// expansion in env, command and args, Linux resources
// (generateLinuxContainerResources) and the effective security context. Env
// that cannot be resolved is a *ConfigError, the kubelet's
// CreateContainerConfigError. ContainerState is toKubeContainerState plus
// the exit details; ContainerUser is the status's user (the identity the
// container started with), where the runtime reports one. Container logs are read and rotated by lifecycle/logs.
//
// # Streaming
//
// ExecURL, AttachURL and PortForwardURL are the CRI's Exec, Attach and
// PortForward: the runtime answers with a single-use URL of its streaming
// server, which lifecycle/api proxies a client's session to.
// RuntimeNetNS names the network namespace that server listens in, the
// runtime's own, from the pid serving the CRI socket now.
//
// # Invariants
//
//   - Every sandbox and container that nodeguard creates carries the label
//     ManagedLabel="true" besides the kubelet's io.kubernetes.* labels;
//     ListPodSandbox and ListContainers only ever return those;
//     ListAllPodSandboxes and ListAllContainers see the whole runtime,
//     for the network and image collectors, which must know every user.
//   - RunPodSandbox refuses a config without a cgroup parent (runc would
//     create /k8s.io/<id> at the root of every hierarchy) and one whose
//     parent climbs out with "..". Relative or absolute is the pod cgroup
//     Manager's decision (cgroups/kubepods), which the lifecycle hands on.
//   - Every sandbox gets an explicit DNSConfig, so the runtime never copies
//     the host's resolv.conf on its own.
//   - Nothing is pulled unless the client was dialed WithImagePull: a
//     missing image is ErrImageNotPresent naming the reference.
//   - ResolveImage decides by the container's imagePullPolicy as the
//     kubelet does: Always pulls at every start, IfNotPresent only a
//     missing image, Never nothing (ErrImageNeverPull); PullImage pulls
//     with one AuthConfig (the lifecycle picks them from the pod's
//     imagePullSecrets and the node's file); EnsureImage is both,
//     anonymously.
//   - Conversions never modify the pod or container they are given.
package cri
