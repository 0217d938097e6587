package loader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/nodeguard/nodeguard/loader/event"
)

// ringReader drains one ring buffer into the consumer queue.
type ringReader struct {
	ring Ring
	rd   *ringbuf.Reader
	// limit is the queue length at which this ring starts dropping; the
	// OOM ring may fill the queue to the brim, the others leave headroom.
	limit int

	read      atomic.Uint64
	malformed atomic.Uint64
	dropped   atomic.Uint64
	delivered atomic.Uint64
	readErrs  atomic.Uint64
	lastErr   atomic.Pointer[string]
}

// wantedRings are the rings the loaded families write to.
func wantedRings(fams []string) []Ring {
	var rs []Ring
	if slices.Contains(fams, FamilyOOM) {
		rs = append(rs, RingOOM)
	}
	if slices.Contains(fams, FamilyReclaim) {
		rs = append(rs, RingReclaim)
	}
	if slices.Contains(fams, FamilyCgroup) || slices.Contains(fams, FamilyExit) {
		rs = append(rs, RingLifecycle)
	}
	if slices.Contains(fams, FamilyBench) {
		rs = append(rs, RingBench)
	}
	return rs
}

func (p *Pipeline) startReaders(opts Options, fams []string) error {
	ctx, cancel := context.WithCancel(context.Background()) //nolint:contextcheck // owned by Close
	p.cancel = cancel
	q := cap(p.out)
	headroom := max(q/oomHeadroomDiv, 1)
	for _, r := range wantedRings(fams) {
		m := p.maps[ringMaps[r]]
		if m == nil {
			return fmt.Errorf("start reader for ring %s: map %s missing", r, ringMaps[r])
		}
		rd, err := ringbuf.NewReader(m)
		if err != nil {
			return fmt.Errorf("start reader for ring %s: %w", r, err)
		}
		rr := &ringReader{ring: r, rd: rd, limit: q - headroom}
		if r == RingOOM {
			rr.limit = q
		}
		p.readers = append(p.readers, rr)
	}
	for _, rr := range p.readers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.readLoop(ctx, rr)
		}()
	}
	if p.reclaim != nil {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.janitor(ctx)
		}()
	}
	return nil
}

// readLoop is the hot path: no logging, no reflection, no blocking on the
// consumer. It ends when Close closes the reader.
func (p *Pipeline) readLoop(ctx context.Context, rr *ringReader) {
	var rec ringbuf.Record
	for {
		if err := rr.rd.ReadInto(&rec); err != nil {
			if errors.Is(err, ringbuf.ErrClosed) || ctx.Err() != nil {
				return
			}
			rr.readErrs.Add(1)
			s := err.Error()
			rr.lastErr.Store(&s)
			// A persistent error must not spin a core.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		rr.read.Add(1)
		ev, err := event.Decode(rec.RawSample)
		if err != nil {
			rr.malformed.Add(1)
			s := err.Error()
			rr.lastErr.Store(&s)
			continue
		}
		if h := ev.Hdr(); h.Kind == event.KindCgroupRmdir && p.reclaim != nil {
			if c, ok := ev.(*event.Cgroup); ok {
				p.forgetLater(CgroupKey{ID: c.ID, HierarchyID: c.HierarchyID})
			}
		}
		if len(p.out) >= rr.limit {
			rr.dropped.Add(1)
			continue
		}
		select {
		case p.out <- ev:
			rr.delivered.Add(1)
		default:
			rr.dropped.Add(1)
		}
	}
}
