package operators

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"

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
	// Changes replays onto w, in order, what changed in the Runtime's state
	// since the previous barrier (since the restore, or since the start):
	// applied on top of the store that holds the previous checkpoint, it
	// leaves exactly the state at this barrier. Hashes are the keys' hashes
	// (0 for runtime-wide entries): a store partitions by them.
	Changes func(w window.SnapshotWriter) error
	// Watermark is the Runtime's watermark when the barrier was injected:
	// every window result it made due was delivered before the barrier.
	Watermark int64
}

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

// snapBuf records snapshot operations back to back:
// op ('P' put, 'D' delete, 'X' delete prefix) | be64 hash |
// uvarint len(key) | key | uvarint len(value) | value.
// It is a window.SnapshotWriter; replay plays the operations onto another.
type snapBuf struct {
	b        []byte
	skipMeta bool  // drop the operator metadata entry (kept from one worker only)
	source   bool  // the source's part: wm is the watermark at the barrier
	wm       int64 // see source
}

func (s *snapBuf) op(op byte, hash uint64, key, value []byte) error {
	b := append(s.b, op)
	b = binary.BigEndian.AppendUint64(b, hash)
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.AppendUvarint(b, uint64(len(value)))
	s.b = append(b, value...)
	return nil
}

func (s *snapBuf) Put(hash uint64, key, value []byte) error {
	if s.skipMeta && len(key) == 1 && key[0] == 'm' {
		return nil
	}
	return s.op('P', hash, key, value)
}
func (s *snapBuf) Delete(hash uint64, key []byte) error { return s.op('D', hash, key, nil) }
func (s *snapBuf) DeletePrefix(prefix []byte) error     { return s.op('X', 0, prefix, nil) }

func (s *snapBuf) replay(w window.SnapshotWriter) error {
	b := s.b
	for len(b) > 0 {
		op, h := b[0], binary.BigEndian.Uint64(b[1:])
		b = b[9:]
		n, m := binary.Uvarint(b)
		k := b[m : m+int(n)]
		b = b[m+int(n):]
		n, m = binary.Uvarint(b)
		v := b[m : m+int(n)]
		b = b[m+int(n):]
		var err error
		switch op {
		case 'P':
			err = w.Put(h, k, v)
		case 'D':
			err = w.Delete(h, k)
		default:
			err = w.DeletePrefix(k)
		}
		if err != nil {
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
	src := &snapBuf{source: true, wm: r.wms.Current()}
	_ = src.Put(0, []byte{keyWatermark}, appendWatermarkState(nil, r.wms.State()))
	if r.dedup != nil {
		_ = src.Put(0, []byte{keyDedup}, r.dedup.appendSnapshot(nil))
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
	if err := w.op.SnapshotDirty(snap); err != nil {
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
	parts map[uint64][]*snapBuf
	need  int
}

// arrive records one part of barrier id; it returns the barrier when every
// part is in.
func (bs *barriers) arrive(id uint64, snap *snapBuf) *Barrier {
	if bs.parts == nil {
		bs.parts = map[uint64][]*snapBuf{}
	}
	bs.parts[id] = append(bs.parts[id], snap)
	if len(bs.parts[id]) < bs.need {
		return nil
	}
	parts := bs.parts[id]
	delete(bs.parts, id)
	wm := window.MinTime
	for _, p := range parts {
		if p.source {
			wm = p.wm
		}
	}
	return &Barrier{ID: id, Watermark: wm, Changes: func(w window.SnapshotWriter) error {
		for _, p := range parts {
			if err := p.replay(w); err != nil {
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
		if hash == 0 {
			// The store kept no hash: it is the record key's.
			hash = xxhash.Sum64(window.RecordKey(key))
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
