package lifecycle

// DefaultStops bounds the StopContainer calls that wait out a grace
// period at once: 110 is the kubelet's default maxPods, so that every pod
// of a full node (at one container each) can be in its grace period at
// the same time, as under the kubelet, whose pod workers are not bounded
// at all. A stop beyond it waits for a slot, which delays a deletion,
// never a start.
const DefaultStops = 110

// slots bounds the CRI calls in flight, in two pools.
//
// A pod's worker holds a work slot (Config.Workers of them) while it talks
// to the runtime: lists, creates, starts, removes. A StopContainer with a
// grace period is one call that blocks for the whole grace when the
// container ignores SIGTERM: that is waiting, not work, so it holds a stop
// slot (Config.Stops) and gives the work slot back meanwhile. Otherwise
// Workers deletions of pods with the default 30 s grace stall every start
// and restart on the node for 30 s. The calls in flight stay bounded by
// Workers + Stops (plus the Run loop's own relist and listing), and a pod
// stays serialized by its one worker, which waits for its stops.
type slots struct {
	work, stops chan struct{}
}

func newSlots(workers, stops int) *slots {
	return &slots{work: make(chan struct{}, workers), stops: make(chan struct{}, stops)}
}

// acquire takes a work slot; release gives it back. There is no ctx: once
// ctx is done every holder's calls fail at once and give theirs back.
func (s *slots) acquire() { s.work <- struct{}{} }
func (s *slots) release() { <-s.work }

// waitOut runs stops, each a call that waits out a grace period, for a
// caller that holds a work slot: the work slot is given back while they
// run, each holds a stop slot, and a work slot is taken again once they
// all returned.
func (s *slots) waitOut(stops []func()) {
	if len(stops) == 0 {
		return
	}
	s.release()
	defer s.acquire()
	done := make(chan struct{}, len(stops))
	for _, stop := range stops {
		go func() {
			defer func() { done <- struct{}{} }()
			s.stops <- struct{}{}
			defer func() { <-s.stops }()
			stop()
		}()
	}
	for range stops {
		<-done
	}
}
