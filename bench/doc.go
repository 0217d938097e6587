// Package bench drives nodeguard's benchmarks and writes their reports:
// tables for people, CSV for scripts and PNG plots for distributions. It
// holds no daemon logic: each driver exercises a real component through a
// small interface declared here, and every figure it prints is measured in
// the run that prints it.
//
// The OOM race (RunEviction) measures the agent as it ships: its pods run
// on a `nodeguard run` child process (EvictionAgent, started through
// bench/agentproc), driven through the agent's local API (APIPods) and read
// through its event log (AgentStrategy); the baselines race on the same
// agent with its eviction manager off. Nothing here copies the agent's
// detection or policy.
//
// Each `nodeguard bench` subcommand is one entry point here that takes an
// options struct (EventsBench, ChurnBench, NetBench, EvictionBench,
// OverheadBench); cmd/nodeguard holds only their flags. Child processes,
// systemctl and journalctl are bench/agentproc's. The synthetic event
// source of EventsBench, bpf/bench.bpf.c, stays in the loader: its Go side
// is bpf2go output that imports cilium/ebpf, and its ring and settings are
// shared with the production programs.
package bench
