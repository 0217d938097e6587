// Package api is the node agent's local API: HTTP/1.1 on a unix socket,
// for root only, through which `nodeguard pod` applies, lists, shows and
// removes pods, reads their logs, runs commands in them, attaches to them
// and forwards ports to them.
//
// The Server serves a PodService, which the pod manager (lifecycle)
// satisfies; the interface is declared here, by its consumer. The service
// wraps ErrNotFound and ErrInvalid so that the server can choose 404 and
// 422. Client speaks the same routes, and its errors unwrap to the same
// sentinels.
//
// # Routes
//
//	POST   /v1/pods?source=S                          manifest (YAML or JSON, podspec.Parse) -> v1 PodList of the applied pods
//	GET    /v1/pods                                   -> v1 PodList, by namespace and name
//	GET    /v1/pods/{namespace}/{name}                -> v1 Pod with status
//	DELETE /v1/pods/{namespace}/{name}                -> 204
//	GET    /v1/pods/{namespace}/{name}/log?container=C&tail=N   -> text, streamed
//	       &follow=true&previous=true&timestamps=true&sinceSeconds=S
//	POST   /v1/pods/{namespace}/{name}/exec?container=C         ExecRequest -> ExecResult
//	GET|POST /v1/pods/{namespace}/{name}/exec?container=C&command=ARG...&stdin=&stdout=&stderr=&tty=   upgrade -> exec session
//	GET|POST /v1/pods/{namespace}/{name}/attach?container=C&stdin=&stdout=&stderr=&tty=               upgrade -> attach session
//	GET|POST /v1/pods/{namespace}/{name}/portforward?ports=P,...                                      upgrade -> port-forward session
//
// # Sessions
//
// Exec, attach and port-forward sessions are what `kubectl exec -it`,
// `attach` and `port-forward` open on the API server: an HTTP upgrade
// (SPDY/3.1) with the query parameters of PodExecOptions, PodAttachOptions
// and PodPortForwardOptions (stdout and stderr default to true, stdin and
// tty to false; with tty, stderr is false). The server asks the service
// (PodService.Stream: the CRI's Exec, Attach or PortForward) for the
// runtime's streaming URL, dials it as the service says (from the
// runtime's network namespace) and proxies the upgraded connection to it,
// as the kubelet does with redirectContainerStreaming off
// (apimachinery's UpgradeAwareHandler): the runtime's streaming server
// negotiates the protocol (channel.k8s.io v1-v4, portforward.k8s.io) and
// nodeguard copies bytes. Client.ExecStream, Attach and PortForward speak
// it with client-go's SPDY executor and port forwarder. A POST to exec
// without an upgrade is the JSON exec above.
//
// Errors are {"error": "..."} with 400 (bad parameter or exec body), 404
// (unknown pod, container or route), 405 (with Allow), 413, 422 (the
// manifest does not parse, or ErrInvalid: the text has the field errors,
// one per line), 503 (busy, with Retry-After; or the request was
// cancelled), 504 (the service's deadline passed), 502 (a session's
// streaming server unreachable) and 500.
//
// # Invariants
//
//   - The socket is mode 0600 and owned by the server's user from the
//     moment its path exists, whatever the umask: it is bound inside a
//     fresh 0700 directory beside its path, chmod-ed there, and renamed into
//     place. The process umask is never touched (other goroutines create
//     files with it).
//   - A path is taken over only from a stale socket (one that refuses
//     connections). A live socket is ErrAlreadyRunning ("another nodeguard
//     is running on PATH"); a file that is not a socket is left alone and is
//     an error. On exit, Serve removes the path only while it still names
//     the socket Listen created.
//   - Every connection's peer credentials (SO_PEERCRED) are checked at
//     accept, before a byte is read: only uid 0 and the server's own
//     effective uid are admitted. Others are closed and counted
//     (Stats.RefusedPeers). File mode and credentials are two independent
//     locks: either one alone keeps other users out.
//   - At most Options.MaxInFlight requests run at once; the next one is
//     answered 503 at once and counted (Stats.Busy), never queued.
//   - Request bodies are bounded (Options.MaxBodyBytes, 413); headers,
//     request reads and responses have deadlines. Log streams have no
//     total deadline but each write has one, so a reader that stops reading
//     is dropped; exec responses get the command's timeout (at most
//     MaxExecTimeout) on top of theirs.
//   - A manifest is applied whole or not at all: if any document fails to
//     parse, the service is not called.
//   - A log stream that fails after its first byte ends with the
//     Nodeguard-Error trailer, which Client.Logs returns as an error: a cut
//     log never looks complete.
//   - A session holds a slot of MaxInFlight for as long as it runs. Its
//     connection is hijacked with the server's read and write deadlines
//     cleared (a session lasts as long as its command), is counted in
//     Stats.Sessions, and is cut when the server stops. Sessions go
//     through the same peer check as every request: no other socket or
//     port is opened, and a port-forward listens on the client's
//     127.0.0.1 only.
//   - The server never modifies the pods the service gives it.
//   - Every change (apply, delete, exec, a session) logs one line with the peer's uid
//     and pid; reads log at debug level only.
package api
