package operators

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/window"
)

// Checkpoints. The source calls Barrier between two Ingest calls. The
// barrier travels behind every record ingested before it, through every
// worker: each worker advances to the barrier's watermark, snapshots its
// window operator (window.Operator.Snapshot) and passes the barrier on to the
// output goroutine behind the results it emitted before it. When the barrier
// has come through every worker, a Sink that implements BarrierSink gets
// Barrier: at that moment it has seen exactly the outputs of the records
// before the barrier, and the Barrier carries the state that produces the
// outputs of the records after it. Storing both atomically, with the source
// position of the barrier, is a consistent checkpoint; Options.Restore loads
// one back.

// BarrierSink is a Sink that takes part in checkpoints.
//
// Barrier n is called once every output of the records ingested before
// barrier n has reached the Sink. Outputs of later records may reach it
// before that (a fast worker runs ahead of a slow one): each output carries
// the Epoch it belongs to, and the checkpoint of barrier n holds exactly the
// outputs with Epoch < n. So a BarrierSink stages outputs by epoch and
// commits, at Barrier n, those with Epoch < n together with the snapshot.
type BarrierSink interface {
	Sink
	// Barrier is called once per Runtime.Barrier. b and what it yields are
	// valid only during the call.
	Barrier(b *Barrier) error
}

// Barrier is a consistent cut of a Runtime (checkpoint.Barrier): its
// Changes are the Runtime's state changes since the previous barrier, its
// Watermark the Runtime's when the barrier was injected.
type Barrier = checkpoint.Barrier

// ErrBadSnapshot marks a checkpoint entry the Runtime cannot restore.
var ErrBadSnapshot = errors.New("operators: bad snapshot entry")

// Runtime-level entry keys; window.Operator's own keys start with other
// letters ('m', 's', 'v', 'x').
const keyWatermark = 'w'

// The watermark entry: varint largest event time seen, varint watermark,
// then varint clock and varint clock at the last event (the idle advance's
// state; absent in checkpoints written before it, which restore as
// unknown).
func appendWatermarkState(dst []byte, st window.State) []byte {
	dst = binary.AppendVarint(dst, st.MaxSeen)
	dst = binary.AppendVarint(dst, st.Combined)
	dst = binary.AppendVarint(dst, st.Clock)
	return binary.AppendVarint(dst, st.Seen)
}

func decodeWatermarkState(b []byte) (window.State, bool) {
	var vs [4]int64
	n := 0
	for ; n < len(vs) && len(b) > 0; n++ {
		v, w := binary.Varint(b)
		if w <= 0 {
			return window.State{}, false
		}
		vs[n], b = v, b[w:]
	}
	if (n != 2 && n != 4) || len(b) != 0 {
		return window.State{}, false
	}
	return window.State{MaxSeen: vs[0], Combined: vs[1], Clock: vs[2], Seen: vs[3]}, true
}

// snapBuf is one part of a barrier: the snapshot operations of a worker
// (or the source's runtime-wide entries), recorded by checkpoint.Changes
// and replayed onto the sink's writer. It is a window.SnapshotWriter.
type snapBuf struct {
	checkpoint.Changes
	skipMeta bool  // drop the operator metadata entry (kept from one worker only)
	source   bool  // the source's part: wm is the watermark at the barrier
	wm       int64 // see source
}

func (s *snapBuf) Put(hash uint64, key, value []byte) error {
	if s.skipMeta && len(key) == 1 && key[0] == 'm' {
		return nil
	}
	return s.Changes.Put(hash, key, value)
}

// Barrier injects checkpoint barrier id (ids must increase). It flushes
// every worker and returns once the barrier is on its way; the BarrierSink
// hears about it when it has passed every worker.
func (r *Runtime) Barrier(id uint64) error {
	if err := r.ctx.Err(); err != nil {
		return r.failure(err)
	}
	src := &snapBuf{source: true, wm: r.wms.Current()}
	_ = src.Put(0, []byte{keyWatermark}, appendWatermarkState(nil, r.wms.State()))
	if r.dedup != nil {
		r.dedup.putChanges(func(key, value []byte) { _ = src.Put(0, key, value) }, r.committed.Load())
		r.dedup.epoch = id
	}
	// The source's part goes first: the output goroutine collects it, then
	// one part per worker.
	if err := r.flushOut(); err != nil {
		return err
	}
	r.epoch = id
	select {
	case ob := <-r.outFree:
		ob.barrier, ob.snap = id, src
		select {
		case r.out <- ob:
		case <-r.ctx.Done():
			return r.failure(r.ctx.Err())
		}
	case <-r.ctx.Done():
		return r.failure(r.ctx.Err())
	}
	wm := r.wms.Current()
	for w := range r.workers {
		b := r.cur[w]
		if b == nil {
			var err error
			if b, err = r.getBatch(w); err != nil {
				return err
			}
		}
		b.barrier = id
		if err := r.send(w, wm); err != nil {
			return err
		}
	}
	return nil
}

// barrier runs on the worker when a barrier batch has been processed.
func (w *worker) barrier(id uint64, first bool) {
	// The operator metadata is identical on every worker at a barrier:
	// it is kept from the first only.
	snap := &snapBuf{skipMeta: !first}
	if err := w.op.Checkpoint(id, snap); err != nil {
		w.err = fmt.Errorf("operators: snapshot at barrier %d: %w", id, err)
		return
	}
	ob := w.outBatch()
	if ob == nil {
		return
	}
	ob.barrier, ob.snap = id, snap
	w.sendOut()
	w.epoch = id
}

// barriers collects the parts of each barrier on the output goroutine:
// the source's and one per worker.
type barriers struct {
	parts checkpoint.Parts[*snapBuf]
	need  int
}

// arrive records one part of barrier id; it returns the barrier when every
// part is in.
func (bs *barriers) arrive(id uint64, snap *snapBuf) *Barrier {
	parts, ok := bs.parts.Add(id, snap, bs.need)
	if !ok {
		return nil
	}
	wm := window.MinTime
	for _, p := range parts {
		if p.source {
			wm = p.wm
		}
	}
	return &Barrier{ID: id, Watermark: wm, Changes: func(w checkpoint.ChangeWriter) error {
		for _, p := range parts {
			if err := p.Replay(w); err != nil {
				return err
			}
		}
		return nil
	}}
}

// restore loads a checkpoint before the workers start: entries go to the
// worker owning their key group; operator metadata to every worker. A hash
// of 0 is recomputed from the entry's record key.
func (r *Runtime) restore(load func(fn func(hash uint64, key, value []byte) error) error) error {
	// With eviction the workers shed keys between key groups, so that a
	// state larger than memory restores within the bound: the keys of the
	// groups before are whole. That needs each group's entries together.
	evict := r.opts.MaxResident > 0 && r.opts.KeyStore != nil
	group, left := -1, make([]bool, r.opts.KeyGroups)
	err := load(func(hash uint64, key, value []byte) error {
		switch {
		case len(key) == 1 && key[0] == keyWatermark:
			st, ok := decodeWatermarkState(value)
			if !ok {
				return fmt.Errorf("%w: watermark", ErrBadSnapshot)
			}
			r.wms.Restore(st)
			for i := range r.sentWM {
				r.sentWM[i] = window.MinTime
			}
			return nil
		case (len(key) == 1 || len(key) == 3) && key[0] == keyDedup:
			if r.dedup != nil && !r.dedup.load(key, value) {
				return fmt.Errorf("%w: dedup ids", ErrBadSnapshot)
			}
			return nil
		case len(key) == 1 && key[0] == 'm':
			for _, w := range r.workers {
				if err := w.op.Restore(hash, key, value); err != nil {
					return err
				}
			}
			return nil
		}
		if hash == 0 {
			// The store kept no hash: it is the record key's.
			hash = xxhash.Sum64(window.RecordKey(key))
		}
		w := r.workers[r.workerOf(hash)]
		if g := int(hash % uint64(r.opts.KeyGroups)); evict && g != group {
			if left[g] {
				return fmt.Errorf("%w: key group %d's entries are not together", ErrBadSnapshot, g)
			}
			if group >= 0 {
				left[group] = true
				r.workers[r.workerOf(uint64(group))].op.ShedRestored()
			}
			group = g
		}
		return w.op.Restore(hash, key, value)
	})
	if err != nil {
		return fmt.Errorf("operators: restore: %w", err)
	}
	if r.dedup != nil && !r.dedup.finishRestore() {
		return fmt.Errorf("operators: restore: %w: dedup ids", ErrBadSnapshot)
	}
	for _, w := range r.workers {
		w.op.FinishRestore()
	}
	return nil
}

func (r *Runtime) workerOf(hash uint64) int {
	return int(hash%uint64(r.opts.KeyGroups)) * r.opts.Workers / r.opts.KeyGroups
}
