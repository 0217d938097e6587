// Package corpus measures nodeguard against real pod specs: the corpus in
// lifecycle/podspec/testdata/corpus, Pods made from public manifests (the
// Kubernetes documentation's examples, kube-prometheus, metrics-server,
// ingress-nginx, CoreDNS, flannel, external-dns, kubernetes/examples) with
// their images swapped for a local busybox (see the corpus's README.md).
//
// It holds what the harness (lifecycle's TestCorpus, against a real
// containerd) and the unprivileged admission test share: Load reads the
// specs and their header comments, Classify sorts a refusal by what it
// needs (a control plane, a plugin, or something nodeguard lacks), the
// expectations file says what each spec should do, and Check compares
// results with it. Markdown and CSV render the table docs/benchmarks.md quotes.
//
// Invariants: a spec's outcome is derived from what nodeguard did with it
// (the error of Apply, the pod's status), never from its name; the
// expectations file is the only place that says a spec may fail, and an
// entry that waits for a feature says which one, so that the harness can
// report every change when the feature lands.
package corpus
