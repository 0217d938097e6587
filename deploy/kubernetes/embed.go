// Package kubernetes holds guard mode's manifests (kubectl apply -f
// deploy/kubernetes/): the namespace, the ServiceAccount and its
// ClusterRole, the configuration and the DaemonSet. Manifests embeds them,
// for the checks that apply them to a test cluster's node.
package kubernetes

import "embed"

// Manifests are the *.yaml files of this directory, in apply order by
// name.
//
//go:embed *.yaml
var Manifests embed.FS
