// Package filesource is the manifest directory as a pod source, the
// kubelet's static pods: every *.yaml, *.yml and *.json file directly in
// the directory, except hidden ones (a leading dot, as the kubelet skips
// them), holds pods, applied under the source "file:<path>", and a
// pod whose file went away is forgotten (stopped and removed).
//
// Invariants: a file that does not load or apply leaves the pods it had
// running as they were, and the error names the file; so does a file that
// does not load when nodeguard starts (its source is told unavailable, and
// the Manager keeps its pods' sandboxes and volumes); a directory that
// cannot be read forgets nothing, and until it has been read once
// (Loaded) nothing is torn down on its word.
package filesource
