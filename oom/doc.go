// Package oom decides and acts on memory, disk and PID pressure: the
// eviction policy and the manager loop that runs it.
//
// The policy (Policy) is pure: observations (a pressure snapshot turned
// into signals, the pods with their usage and ranks inputs) and the time
// in, decisions out; it keeps its own small state (when a threshold was
// first met, victims whose memory is still being released, node
// conditions with their transition period). The manager (Manager) feeds it
// from the kernel event pipeline, the pressure snapshots, PSI triggers and
// the tripwires, confirms every wake-up on a fresh snapshot, and acts
// through the Actor interface, which the lifecycle satisfies. It never
// imports the CRI.
package oom
