// Package nodelane holds the node lane's checks: nodeguard installed with
// make install and run as a systemd service on a systemd node, in a qemu VM
// (package internal/nodevm builds and boots it). The checks are tests behind
// the build tag "nodelane", so the host lane's go test ./... never runs them;
// the readers they use are plain functions, tested by the host lane.
package nodelane
