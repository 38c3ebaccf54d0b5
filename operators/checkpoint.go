package operators

import (
	"encoding/binary"
	"errors"
	"fmt"

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

// Barrier is a consistent cut of a Runtime.
type Barrier struct {
	ID uint64
	// Entries yields the snapshot: every (hash, key, value) entry of the
	// window operators and of the ingest side. The hash is the key's hash
	// (0 for runtime-wide entries): a store partitions by it.
	Entries func(fn func(hash uint64, key, value []byte) error) error
}

// ErrBadSnapshot marks a checkpoint entry the Runtime cannot restore.
var ErrBadSnapshot = errors.New("operators: bad snapshot entry")

// Runtime-level entry keys; window.Operator's own keys start with other
// letters ('m', 's', 'v', 'x').
const keyWatermark = 'w'

// snapBuf holds snapshot entries back to back:
// be64 hash | uvarint len(key) | key | uvarint len(value) | value.
type snapBuf []byte

func (s *snapBuf) put(hash uint64, key, value []byte) error {
	b := binary.BigEndian.AppendUint64(*s, hash)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	*s = append(b, value...)
	return nil
}

func (s snapBuf) each(fn func(hash uint64, key, value []byte) error) error {
	for len(s) > 0 {
		h := binary.BigEndian.Uint64(s)
		s = s[8:]
		n, w := binary.Uvarint(s)
		k := s[w : w+int(n)]
		s = s[w+int(n):]
		n, w = binary.Uvarint(s)
		v := s[w : w+int(n)]
		s = s[w+int(n):]
		if err := fn(h, k, v); err != nil {
			return err
		}
	}
	return nil
}

// Barrier injects checkpoint barrier id (ids must increase). It flushes
// every worker and returns once the barrier is on its way; the BarrierSink
// hears about it when it has passed every worker.
func (r *Runtime) Barrier(id uint64) error {
	if err := r.ctx.Err(); err != nil {
		return r.failure(err)
	}
	var src snapBuf
	v := binary.AppendVarint(nil, r.wms.MaxSeen(0))
	v = binary.AppendVarint(v, r.wms.Current())
	_ = src.put(0, []byte{keyWatermark}, v)
	if r.dedup != nil {
		_ = src.put(0, []byte{keyDedup}, r.dedup.appendSnapshot(nil))
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
	var snap snapBuf
	err := w.op.Snapshot(func(hash uint64, key, value []byte) error {
		if len(key) == 1 && key[0] == 'm' && !first {
			return nil // identical on every worker at a barrier: kept once
		}
		return snap.put(hash, key, value)
	})
	if err != nil {
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

// barriers collects the parts of each barrier on the output goroutine.
type barriers struct {
	parts map[uint64][]snapBuf
	need  int
}

// arrive records one part of barrier id; it returns the barrier when every
// part is in.
func (bs *barriers) arrive(id uint64, snap snapBuf) *Barrier {
	if bs.parts == nil {
		bs.parts = map[uint64][]snapBuf{}
	}
	bs.parts[id] = append(bs.parts[id], snap)
	if len(bs.parts[id]) < bs.need {
		return nil
	}
	parts := bs.parts[id]
	delete(bs.parts, id)
	return &Barrier{ID: id, Entries: func(fn func(uint64, []byte, []byte) error) error {
		for _, p := range parts {
			if err := p.each(fn); err != nil {
				return err
			}
		}
		return nil
	}}
}

// restore loads a checkpoint before the workers start: entries go to the
// worker owning their key group; operator metadata to every worker.
func (r *Runtime) restore(load func(fn func(hash uint64, key, value []byte) error) error) error {
	err := load(func(hash uint64, key, value []byte) error {
		switch {
		case len(key) == 1 && key[0] == keyWatermark:
			maxSeen, n := binary.Varint(value)
			if n <= 0 {
				return fmt.Errorf("%w: watermark", ErrBadSnapshot)
			}
			combined, m := binary.Varint(value[n:])
			if m <= 0 || n+m != len(value) {
				return fmt.Errorf("%w: watermark", ErrBadSnapshot)
			}
			r.wms.Restore(0, maxSeen, combined)
			for i := range r.sentWM {
				r.sentWM[i] = window.MinTime
			}
			return nil
		case len(key) == 1 && key[0] == keyDedup:
			if r.dedup != nil && !r.dedup.restore(value) {
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
		return r.workers[r.workerOf(hash)].op.Restore(hash, key, value)
	})
	if err != nil {
		return fmt.Errorf("operators: restore: %w", err)
	}
	for _, w := range r.workers {
		w.op.FinishRestore()
	}
	return nil
}

func (r *Runtime) workerOf(hash uint64) int {
	return int(hash%uint64(r.opts.KeyGroups)) * r.opts.Workers / r.opts.KeyGroups
}
