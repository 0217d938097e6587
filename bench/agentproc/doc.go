// Package agentproc runs what a benchmark measures as separate processes:
// nodeguard's own binary as `nodeguard run` (Agent) and as `nodeguard
// guard` (Guard), and a node's systemd units and their journal (Systemctl,
// FollowJournal). The benchmarks in package bench drive the agent as it
// ships, through its command line, its configuration file and its local
// API, never by calling its packages.
//
// Invariants: every child is started from an OS thread locked for the
// child's life, with SIGKILL as its parent-death signal, so that none
// outlives the benchmark; every child is ended by its own pid, first with
// SIGTERM and then, after a bound, with SIGKILL; every wait is bounded.
// The pods an agent runs are not its process's: they outlive a stop, and
// the next start adopts them.
package agentproc
