// Package api is the node agent's local API: HTTP/1.1 on a unix socket,
// for root only, through which `nodeguard pod` applies, lists, shows and
// removes pods, reads their logs and runs commands in them.
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
//
// Errors are {"error": "..."} with 400 (bad parameter or exec body), 404
// (unknown pod, container or route), 405 (with Allow), 413, 422 (the
// manifest does not parse, or ErrInvalid: the text has the field errors,
// one per line), 503 (busy, with Retry-After; or the request was
// cancelled), 504 (the service's deadline passed) and 500.
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
//   - The server never modifies the pods the service gives it.
//   - Every change (apply, delete, exec) logs one line with the peer's uid
//     and pid; reads log at debug level only.
package api
