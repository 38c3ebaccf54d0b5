package hub

import (
	"bytes"
	"context"
)

// subBuffer is how many results a subscriber may fall behind before it is
// dropped.
const subBuffer = 4096

type subscriber struct {
	pipeline string
	class    uint32 // the class it reads (0: the local pipeline)
	key      []byte // nil: every key
	ch       chan Result
	stop     func() bool // stops the context.AfterFunc
}

// Subscribe returns a channel of the results of pipeline (of one key, or
// of every key when key is nil) that become durable after the call: those
// of the class a Query with Revision 0 reads now (the latest managed
// revision's, or the local pipeline's; Pipeline(pipeline) is its spec).
//
// The channel is buffered (4096 results). A subscriber that falls that far
// behind is dropped, its channel closed, rather than slowing the commits of
// every edge; it can resubscribe and catch up with Query. The channel is
// also closed when ctx ends, when the hub closes, and when Define makes a
// revision of another class the pipeline's latest (resubscribing follows
// it); for an unknown pipeline it is closed at once. Results share their
// Key, State and Revisions memory with other subscribers: do not modify
// them.
func (h *Hub) Subscribe(ctx context.Context, pipeline string, key []byte) <-chan Result {
	s := &subscriber{pipeline: pipeline, key: bytes.Clone(key), ch: make(chan Result, subBuffer)}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	// Resolved under subMu: Define publishes its catalog before it takes
	// subMu to drop the subscribers of the class it superseded.
	pp := h.cat.Load().resolve(pipeline, 0)
	if h.subsClosed || pp == nil {
		close(s.ch)
		return s.ch
	}
	s.class = pp.class
	h.subs[s] = struct{}{}
	// The callback takes subMu, so it runs after this function returns
	// even when ctx is already done.
	s.stop = context.AfterFunc(ctx, func() { h.dropSub(s) })
	return s.ch
}

func (h *Hub) dropSub(s *subscriber) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.dropSubLocked(s)
}

func (h *Hub) dropSubLocked(s *subscriber) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	s.stop()
	close(s.ch)
}

// publish hands durable results to the subscribers without blocking.
func (h *Hub) publish(rs []Result) {
	if len(rs) == 0 {
		return
	}
	h.subMu.Lock()
	defer h.subMu.Unlock()
	for s := range h.subs {
	results:
		for i := range rs {
			r := &rs[i]
			if r.Pipeline != s.pipeline || r.Class != s.class || s.key != nil && !bytes.Equal(r.Key, s.key) {
				continue
			}
			select {
			case s.ch <- *r:
			default:
				h.cfg.Logger.Warn("hub: subscriber fell behind; dropped", "pipeline", s.pipeline)
				h.dropSubLocked(s)
				break results
			}
		}
	}
}

// dropSubsOf drops the subscribers of pipeline that read class: Define
// made another class the pipeline's latest.
func (h *Hub) dropSubsOf(pipeline string, class uint32) {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	for s := range h.subs {
		if s.pipeline == pipeline && s.class == class {
			h.dropSubLocked(s)
		}
	}
}

func (h *Hub) closeSubs() {
	h.subMu.Lock()
	defer h.subMu.Unlock()
	h.subsClosed = true
	for s := range h.subs {
		h.dropSubLocked(s)
	}
}
