// Package bench drives nodeguard's benchmarks and writes their reports:
// tables for people, CSV for scripts and PNG plots for distributions. It
// holds no daemon logic: each driver exercises a real component through a
// small interface declared here, and every figure it prints is measured in
// the run that prints it.
//
// The OOM race (RunEviction) measures the agent as it ships: its pods run
// on a `nodeguard run` child process (EvictionAgent, started by
// cmd/nodeguard), driven through the agent's local API (APIPods) and read
// through its event log (AgentStrategy); the baselines race on the same
// agent with its eviction manager off. Nothing here copies the agent's
// detection or policy.
package bench
