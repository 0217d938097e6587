// Package logs reads and rotates container logs in the CRI log format, as
// the kubelet's pkg/kubelet/logs (ContainerLogManager) and
// pkg/kubelet/kuberuntime/logs (ReadLogs) do.
//
// The runtime (containerd) writes one file per container and never rotates
// it; a Rotator does, for the running containers: when the file reaches
// Policy.MaxSize it is renamed to "<path>.<YYYYMMDD-hhmmss>", the runtime
// is told to reopen it (CRI ReopenContainerLog) so that it writes a new
// one, older rotated files are gzipped ("<path>.<stamp>.gz"), and the oldest
// are removed so that at most Policy.MaxFiles files, the live one
// included, remain.
//
// Read returns a container's log across its rotated files, oldest first,
// then the live file, with the selections of kubectl logs: tail, since,
// timestamps, one stream, and follow (which keeps reading across a
// rotation).
//
// # Invariants
//
//   - The newest rotated file is never compressed: the runtime may still
//     be writing its last records when the rotation renames it (the
//     kubelet keeps it plain for the same reason).
//   - A rotation whose reopen fails renames the file back, so the runtime
//     never writes to a file nobody reads.
//   - Rotated files sort by name in the order they were written: the stamp
//     is fixed-width, to the microsecond, and a name already taken is
//     bumped to the next microsecond.
//   - A removed container's log files, rotated ones included, are removed
//     with it (Clean), as the kubelet's removeContainerLog.
//   - Partial records (tag P) are joined into their line across files.
package logs
