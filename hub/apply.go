package hub

import (
	"fmt"
	"math"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/runnel-io/runnel/window/aggregate"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Hello registers an edge's (re)connection and says where it resumes.
//
// An unknown edge is adopted with its epoch and nothing acked. An epoch
// below the one the hub holds is answered with the hub's epoch (and its
// acked sequence), not an error: the edge starts the epoch after it. A
// higher epoch is adopted, the edge restarted its sequence and nothing of
// the new epoch is acked yet, unless it is beyond MaxEpoch, or more than
// MaxEpochStep past the held one (ErrBadEpoch, counted and logged). For
// the same epoch the answer is the durable acked sequence; when the edge
// is behind it (nextSeq-1 < AckedSeq, restored from an older copy) the hub
// only reports it and the edge starts a new epoch itself.
func (h *Hub) Hello(edgeID string, epoch, nextSeq uint64) (Resume, error) {
	if edgeID == "" || len(edgeID) > maxEdgeID {
		return Resume{}, fmt.Errorf("hub: hello: edge id of %d bytes, want 1..%d: %w", len(edgeID), maxEdgeID, ErrBadBatch)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return Resume{}, ErrClosed
	}
	now := h.cfg.Now()
	if err := h.checkEpoch(now, "hello", edgeID, epoch); err != nil {
		return Resume{}, err
	}
	e := h.edgeFor(edgeID, epoch)
	if epoch > e.epoch {
		e.adopt(epoch)
	}
	e.lastSeen = now
	h.touch(e)
	_ = nextSeq // an edge behind the hub finds out from the answer
	return Resume{Epoch: e.epoch, AckedSeq: e.ackedSeq()}, nil
}

// checkEpoch refuses (ErrBadEpoch) an epoch that a Hello or batch of
// edgeID would make the hub adopt when it is beyond MaxEpoch, or more than
// MaxEpochStep past the epoch the hub holds (a held epoch of 0, or none,
// takes any up to MaxEpoch), and counts and logs the refusal. Caller holds
// h.mu.
func (h *Hub) checkEpoch(now time.Time, what, edgeID string, epoch uint64) error {
	var held uint64
	if i, ok := h.edgeIdx[edgeID]; ok {
		held = h.edges[i].epoch
	}
	if epoch <= held || epoch <= MaxEpoch && (held == 0 || epoch-held <= MaxEpochStep) {
		return nil
	}
	reason := fmt.Sprintf("%s with epoch %d; the hub holds %d and adopts at most %d past it, and none beyond %d",
		what, epoch, held, MaxEpochStep, uint64(MaxEpoch))
	h.stats.EpochsRefused++
	if logIt, suppressed := h.epochs.note(now, edgeID, 0, reason); logIt {
		h.cfg.Logger.Warn("hub: refused an epoch", "edge", edgeID, "what", what, "epoch", epoch, "held", held,
			"unlogged_since_last", suppressed)
	}
	return fmt.Errorf("hub: edge %q: %s: %w", edgeID, reason, ErrBadEpoch)
}

// edgeFor returns the edge, creating it with epoch when it is new.
func (h *Hub) edgeFor(id string, epoch uint64) *edge {
	if e, ok := h.edgeIdx[id]; ok {
		return h.edges[e]
	}
	n := len(h.cat.Load().pipes)
	e := &edge{
		id:    id,
		idx:   int32(len(h.edges)),
		epoch: epoch,
		wm:    make([]int64, n),
		hasWM: make([]bool, n),
	}
	h.edges = append(h.edges, e)
	h.edgeIdx[id] = e.idx
	h.touch(e)
	return e
}

// Apply merges a batch into memory; it becomes durable, and is acked, at the
// next group commit. See the package documentation for the rules.
func (h *Hub) Apply(b *runnelv1.Batch) error {
	now := h.cfg.Now()
	cat := h.cat.Load()
	minEnd, refused, unknown, err := h.validate(cat, b, now)
	if testAfterValidate != nil {
		testAfterValidate()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return ErrClosed
	}
	if m := h.cfg.ArchiveMaxPending; m > 0 && h.arch.pending() >= m {
		h.stats.ArchiveRefused++
		if h.stats.ArchiveRefused&(h.stats.ArchiveRefused-1) == 0 { // the 1st, 2nd, 4th, 8th, ...
			h.cfg.Logger.Warn("hub: the archive log is full; batches are refused until the archiver catches up",
				"pending", h.arch.pending(), "archive_max_pending", m, "refused", h.stats.ArchiveRefused)
		}
		return fmt.Errorf("hub: %d results wait for the archive (archive max pending %d): %w", h.arch.pending(), m, ErrArchiveFull)
	}
	if c := h.cat.Load(); c != cat {
		// Define made more known since: what is known decides what is
		// checked, parked or applied, so check again with it.
		cat = c
		minEnd, refused, unknown, err = h.validate(cat, b, now)
	}
	if err != nil {
		return h.refuse(now, b, nil, err)
	}
	if err := h.checkEpoch(now, "batch", b.EdgeId, b.Epoch); err != nil {
		return err
	}
	// Nothing changes until the batch is known to apply: the edge is
	// created, or its epoch adopted, after the last check.
	e := (*edge)(nil)
	applied, parked := uint64(0), int64(0)
	if i, ok := h.edgeIdx[b.EdgeId]; ok {
		e = h.edges[i]
		switch {
		case b.Epoch < e.epoch:
			return fmt.Errorf("hub: batch from %q with epoch %d, the hub holds %d: %w", b.EdgeId, b.Epoch, e.epoch, ErrFenced)
		case b.Epoch == e.epoch:
			applied = e.applied
		}
		parked = e.parked
	}
	// Nothing applied in this epoch yet: the edge deleted what an earlier
	// incarnation of the hub acked, so any start is accepted.
	if applied > 0 && b.FirstSeq > applied+1 {
		return fmt.Errorf("hub: batch from %q epoch %d starts at seq %d, the hub expects %d: %w",
			b.EdgeId, b.Epoch, b.FirstSeq, applied+1, ErrGap)
	}
	if unknown {
		refused = h.parkRefusals(cat, b, parked, applied, refused)
	}
	if refused != nil {
		return h.refuse(now, b, refused, nil)
	}
	if minEnd < h.residentFrom {
		if err := h.reloadEvicted(cat, b, applied); err != nil {
			return err
		}
	}
	if e == nil {
		e = h.edgeFor(b.EdgeId, b.Epoch)
	} else if b.Epoch > e.epoch {
		e.adopt(b.Epoch)
	}

	e.lastSeen = now
	h.touch(e)
	nowMs := now.UnixMilli()
	if len(b.Partials) > 0 && b.LastSeq <= applied {
		h.stats.BatchesDup++
		h.stats.PartialsDup += uint64(len(b.Partials))
	} else {
		h.stats.Batches++
		var pp *pipe
		var rev uint32 // of the partial pp was looked up for
		for _, p := range b.Partials {
			if p.Seq <= applied {
				h.stats.PartialsDup++
				continue
			}
			if pp == nil || pp.name != p.Pipeline || rev != p.Revision {
				pp, rev = cat.pipeOf(p.Pipeline, p.Revision), p.Revision
			}
			if pp == nil {
				h.park(nowMs, e, b.Epoch, p)
				continue
			}
			h.applyPartial(pp, e, b.Epoch, p)
		}
		e.applied = max(applied, b.LastSeq)
	}
	h.applyWatermarks(cat, now, e, b.Watermarks)
	return nil
}

// applyWatermarks takes an edge's watermarks, each of one (pipeline,
// revision): as the edge's watermark of the pipe its partials merge into
// (the local pipeline for revision 0, the class of a managed revision),
// or parked while the hub does not know it. The end of time of a managed
// revision (an ended revision's last watermark: every window of it was
// sent) is taken as it is; any other watermark beyond the clock bound is
// held at it. Caller holds h.mu.
func (h *Hub) applyWatermarks(cat *catalog, now time.Time, e *edge, wms []*runnelv1.Watermark) {
	if len(wms) == 0 {
		return
	}
	bound := h.futureBound(now)
	var pp *pipe
	var rev uint32 // of the watermark pp was looked up for
	for _, wm := range wms {
		w := wm.WatermarkMs
		if w > bound && (w != endOfTime || wm.Revision == 0) {
			h.clamp(now, e.id, wm.Pipeline, w, bound)
			w = bound
		}
		if pp == nil || pp.name != wm.Pipeline || rev != wm.Revision {
			pp, rev = cat.pipeOf(wm.Pipeline, wm.Revision), wm.Revision
		}
		if pp == nil {
			h.parkWatermark(now.UnixMilli(), e, wm.Pipeline, wm.Revision, w)
			continue
		}
		h.takeWatermark(e, pp.idx, w)
	}
}

// endOfTime is the watermark of a managed revision that ended at the edge
// (replaced by an incompatible one, or removed): its open windows fired
// as final results, so it holds no window back. The hub watermark itself
// stays bounded by the clock. It is window.MaxTime. A local pipeline does
// not end so: there it is a watermark beyond the clock like any other.
const endOfTime = math.MaxInt64

// heldAt is an edge's watermark w of pp held at bound, unless it is the
// end of time of a class.
func (pp *pipe) heldAt(w, bound int64) int64 {
	if w == endOfTime && pp.class != 0 {
		return w
	}
	return min(w, bound)
}

// takeWatermark raises e's watermark of pipe i to w. Caller holds h.mu.
func (h *Hub) takeWatermark(e *edge, i int, w int64) {
	if !e.hasWM[i] || w > e.wm[i] {
		e.wm[i] = w
		e.hasWM[i] = true
		h.wmGen++
	}
}

// touch marks e's record to be written at the next commit. Caller holds
// h.mu.
func (h *Hub) touch(e *edge) {
	if !e.dirty {
		e.dirty = true
		h.dirtyEdges = append(h.dirtyEdges, e)
	}
}

// testAfterValidate, when set by a test, runs between Apply's validation
// and its taking h.mu: where a Define may land.
var testAfterValidate func()

// futureBound is the latest time (Unix ms) an edge's watermark or a
// window's start may have at hub clock now: now + MaxFuture.
func (h *Hub) futureBound(now time.Time) int64 {
	return addSat(now.UnixMilli(), int64(h.cfg.MaxFuture/time.Millisecond))
}

// clamp counts and logs (at most once per edge per logEvery) an edge's
// watermark w for pipeline held at bound. Caller holds h.mu.
func (h *Hub) clamp(now time.Time, edge, pipeline string, w, bound int64) {
	h.stats.WatermarksClamped++
	reason := fmt.Sprintf("pipeline %q: watermark %d is more than %v ahead of the hub's clock; held at %d", pipeline, w, h.cfg.MaxFuture, bound)
	if logIt, suppressed := h.clamps.note(now, edge, 0, reason); logIt {
		h.cfg.Logger.Warn("hub: an edge's watermark is ahead of the hub's clock; held at the bound",
			"edge", edge, "pipeline", pipeline, "watermark_ms", w, "bound_ms", bound,
			"max_future", h.cfg.MaxFuture, "unlogged_since_last", suppressed)
	}
}

// applyPartial stores p as e's partial of its window, if it is newer than
// the one stored. It does not allocate once the window and part exist.
func (h *Hub) applyPartial(pp *pipe, e *edge, epoch uint64, p *runnelv1.Partial) {
	if p.WindowEnd < pp.expiredTo {
		h.stats.PartialsExpired++
		return
	}
	kh := xxhash.Sum64(p.Key)
	kg := uint32(kh % uint64(h.keyGroups))
	wh := windowHash(kh, p.WindowStart, p.WindowEnd)
	w := pp.lookup(kg, wh, p.Key, p.WindowStart, p.WindowEnd)
	if w == nil {
		w = pp.create(kg, wh, p.Key, p.WindowStart, p.WindowEnd)
	}
	pt := w.partOf(e.idx)
	if pt == nil {
		w.parts = append(w.parts, part{edge: e.idx})
		pt = &w.parts[len(w.parts)-1]
	} else if !newer(epoch, p.Seq, pt.epoch, pt.seq) {
		h.stats.PartialsDup++
		return
	}
	pt.epoch, pt.seq, pt.version, pt.revision = epoch, p.Seq, p.Version, p.Revision
	pt.state = append(pt.state[:0], p.State...)
	pt.dirty = true
	if !w.dirty {
		w.dirty = true
		h.dirty = append(h.dirty, w)
	}
	pp.markPending(w)
	h.stats.Partials++
}

// validate checks all of b against the hub's pipelines and its clock at
// now, without touching any state. A problem of the batch as a whole is an
// error wrapping ErrBadBatch; partials the hub will never accept are
// returned in refused, each with its reason (nil when there is none). It
// also returns the lowest window end of the partials of known pipelines,
// and whether b names a pipeline the hub does not know (its partials and
// watermarks are parked). It allocates nothing for a batch without
// problems.
func (h *Hub) validate(cat *catalog, b *runnelv1.Batch, now time.Time) (minEnd int64, refused []Refused, unknown bool, err error) {
	if b == nil {
		return 0, nil, false, fmt.Errorf("hub: nil batch: %w", ErrBadBatch)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("hub: batch from %q epoch %d seqs %d..%d: %s: %w",
			b.EdgeId, b.Epoch, b.FirstSeq, b.LastSeq, fmt.Sprintf(format, args...), ErrBadBatch)
	}
	switch {
	case b.EdgeId == "":
		return 0, nil, false, bad("empty edge id")
	case len(b.EdgeId) > maxEdgeID:
		return 0, nil, false, bad("edge id of %d bytes, at most %d", len(b.EdgeId), maxEdgeID)
	case b.FirstSeq == 0:
		return 0, nil, false, bad("first_seq 0: sequences start at 1")
	case b.FirstSeq > b.LastSeq && (b.LastSeq == math.MaxUint64 || b.FirstSeq != b.LastSeq+1):
		return 0, nil, false, bad("first_seq after last_seq + 1")
	case b.FirstSeq > b.LastSeq && len(b.Partials) > 0:
		return 0, nil, false, bad("a heartbeat (first_seq = last_seq + 1) carries %d partials", len(b.Partials))
	case len(b.Partials) > MaxBatchPartials:
		return 0, nil, false, bad("%d partials, at most %d", len(b.Partials), MaxBatchPartials)
	}
	minEnd = math.MaxInt64
	bound := h.futureBound(now)
	prev := b.FirstSeq - 1
	var pp *pipe
	var rev uint32 // of the partial pp was looked up for
	var st *aggregate.State
	defer func() {
		if st != nil {
			pp.scratch.Put(st)
		}
	}()
	refuse := func(p *runnelv1.Partial, format string, args ...any) {
		refused = append(refused, Refused{Seq: p.Seq, Reason: fmt.Sprintf(format, args...)})
	}
	for i, p := range b.Partials {
		if p == nil {
			return 0, nil, false, bad("partial %d is nil", i)
		}
		switch {
		case p.Seq <= prev:
			return 0, nil, false, bad("partial %d: seq %d not after %d", i, p.Seq, prev)
		case p.Seq > b.LastSeq:
			return 0, nil, false, bad("partial %d: seq %d after last_seq", i, p.Seq)
		}
		prev = p.Seq
		if pp == nil || pp.name != p.Pipeline || rev != p.Revision {
			if st != nil {
				pp.scratch.Put(st)
				st = nil
			}
			if pp, rev = cat.pipeOf(p.Pipeline, p.Revision), p.Revision; pp != nil {
				st = pp.scratch.Get().(*aggregate.State)
			}
		}
		switch {
		case len(p.Key) > maxKeyLen:
			refuse(p, "key of %d bytes, at most %d", len(p.Key), maxKeyLen)
		case p.WindowEnd <= p.WindowStart:
			refuse(p, "window end %d not after start %d", p.WindowEnd, p.WindowStart)
		case p.WindowStart > bound:
			refuse(p, "window starts at %d, more than %v after the hub's clock (%d)", p.WindowStart, h.cfg.MaxFuture, now.UnixMilli())
		case len(p.State) > maxStateLen:
			refuse(p, "state of %d bytes, at most %d", len(p.State), maxStateLen)
		case pp == nil && (p.Pipeline == "" || len(p.Pipeline) > maxPipeLen):
			refuse(p, "pipeline name of %d bytes, want 1..%d", len(p.Pipeline), maxPipeLen)
		case pp == nil:
			unknown = true // parked, its state unread
		case pp.keyed && len(p.Key) == 0:
			refuse(p, "empty key for pipeline %q, which has key fields", p.Pipeline)
		case !pp.keyed && len(p.Key) > 0:
			refuse(p, "key given for pipeline %q, which has no key fields", p.Pipeline)
		default:
			if err := pp.set.Decode(st, p.State); err != nil {
				refuse(p, "state does not decode with the aggregates of pipeline %q revision %d (is the edge's spec another?): %v", p.Pipeline, p.Revision, err)
				continue
			}
			minEnd = min(minEnd, p.WindowEnd)
		}
	}
	for _, wm := range b.Watermarks {
		if wm == nil {
			return 0, nil, false, bad("nil watermark")
		}
		if cat.pipeOf(wm.Pipeline, wm.Revision) == nil {
			if wm.Pipeline == "" || len(wm.Pipeline) > maxPipeLen {
				return 0, nil, false, bad("watermark for a pipeline name of %d bytes, want 1..%d", len(wm.Pipeline), maxPipeLen)
			}
			unknown = true
		}
	}
	return minEnd, refused, unknown, nil
}
