// Package config is nodeguard's configuration: the file `nodeguard run`
// reads (Run), the one `nodeguard guard` reads (Guard), their defaults,
// their strict decoding, their validation, and what a reload (SIGHUP) may
// apply to a running agent and what needs a restart (Changes).
//
// The keys are the kubelet's wherever the kubelet has one
// (KubeletConfiguration's names, syntax and defaults: evictionHard,
// cgroupDriver, containerLogMaxSize), so that a kubelet configuration
// reads the same here; docs/configuration.md lists every key with its
// type, its default and its kubelet equivalent, generated from the doc
// comments of the fields in this package (each leaf's comment ends with a
// line "Kubelet: <field or flag>", or "Kubelet: none").
//
// Invariants:
//   - Decoding is strict: an unknown key, a section that is not a mapping
//     and a value of the wrong type are errors that name the key by its
//     full path (network.maxPods), checked before the decoder runs
//     (internal/strictyaml), because the decoder names neither.
//   - Validate names the first bad field, in a fixed order, with its
//     value; a file that decodes and validates is one the agent runs.
//   - Default is the configuration without a file; deploy/config.example.yaml
//     is the same configuration written out, kept equal by a test.
//   - A key that Changes does not know as reloadable needs a restart: a
//     field added later is never silently ignored by a reload.
//
// The package reads files only in Load, LoadGuard, CheckFile and Path,
// and the hostname only in Labels.
package config
