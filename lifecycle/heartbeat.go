package lifecycle

import "time"

// Heartbeat is when the Run loop last started a pass (every Resync, and
// whenever a pod changes); zero before Run. A supervisor (the systemd
// watchdog) compares it with the clock: a heartbeat older than a few
// Resyncs means the loop is stuck (its relist or sandbox listing hung,
// a collection's start; teardowns run on workers) and the agent should be
// restarted.
func (m *Manager) Heartbeat() time.Time {
	ns := m.beat.Load()
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
