// Package metrics exports what nodeguard senses and decides to Prometheus.
//
// It is a room of its own (ARCHITECTURE.md lists Prometheus as where
// everything ends up, without a room for it): collectors read the newest
// pressure.Snapshot and the kernel pipeline's counters through small
// interfaces, so sensing, the kernel side and the exporter stay apart, and
// a scrape never touches the kernel or the filesystem itself.
//
// Invariants:
//   - Well-known names where they exist, so existing dashboards work:
//     node_exporter's node_pressure_*, cAdvisor's container_pressure_*,
//     container_memory_working_set_bytes and container_oom_events_total.
//     nodeguard's own series are nodeguard_<subsystem>_<name>_<unit>,
//     counters end in _total.
//   - Every collector reports its own duration and success
//     (nodeguard_scrape_collector_*), as node_exporter's do.
//   - Counters come from kernel counters (PSI totals, memory.events,
//     ring-buffer accounting), never from sums kept here that a restart
//     would reset differently.
//   - Cgroup series carry pod labels (namespace, pod, uid, container, qos)
//     from a Resolver when one is known; until then only id, the cgroup's
//     path, as cAdvisor's id label.
package metrics
