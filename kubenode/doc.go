// Package kubenode is nodeguard's half of the node's contract with a
// Kubernetes control plane, as the kubelet keeps it: the Node object
// (registered, or reconciled when it exists), its status (addresses,
// capacity and allocatable, nodeInfo, the pressure and Ready conditions
// with the kubelet's reasons and messages) patched when it changes and at
// least every ReportEvery, and the node's Lease in kube-node-lease renewed
// by k8s.io/component-helpers' lease controller, the kubelet's own.
//
// Everything here acts as the node (system:node:<name>): the Node
// authorizer and NodeRestriction admission allow a node its own Node and
// Lease and nothing else, so the labels it registers with are checked
// against the set NodeRestriction lets a node set (k8s.io/kubelet's
// IsKubeletLabel), as the kubelet checks --node-labels.
package kubenode
