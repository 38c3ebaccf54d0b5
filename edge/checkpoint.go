package edge

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/state"
	"github.com/runnel-io/runnel/window"
)

// One checkpoint. The pump injects barrier n into every pipeline's runtime
// and tells the writer the log position it stands at. Each pipeline's
// stagingSink, at Barrier n, hands the writer its outputs of epoch < n
// (encoded as outbox entries) and its snapshot. When the writer has every
// part of n, one bbolt transaction stores the snapshots, appends the
// outbox entries with their sequence numbers and records checkpoint n
// (id, log position, next sequence number). A crash before that commit
// leaves checkpoint n-1 and its position, and the replay regenerates the
// same outputs; after it, they are in the outbox exactly once. Old log
// segments are then deleted.

type ckptPart struct {
	id    uint64
	pos   ingestlog.Position // isPos: the pump's position at barrier id
	isPos bool
	fed   uint64       // isPos: messages the pump fed the pipelines since the node started
	pipes int          // isPos: how many pipelines send a part of this checkpoint
	fleet *fleetCommit // isPos: a reconfiguration commits with it (managed.go)
	// notify (isPos), when set, gets the commit's outcome: a snapshot
	// on demand waits for it (snapshot.go).
	notify chan<- error
	pipe   string
	out    [][]byte // outbox entries, in emission order
	late   [][]byte // late records, JSON
	dead   [][]byte // dead letters, JSON
	ops    *opLog   // state changes since the previous checkpoint
	wm     int64    // the pipeline's watermark at the barrier, when advanced
	hasWM  bool
}

// stagingSink keeps outputs until the checkpoint that covers them: window
// results become outbox entries, late records and dead letters go to their
// own buckets, all in the checkpoint's transaction, so none is lost or
// stored twice across crashes.
type stagingSink struct {
	p     *operators.Pipeline
	rev   uint32 // the pipeline's revision (0: a local file's)
	local bool   // its results are not for the hub (no hub output)
	// endID is the barrier at which the revision ends (managed.go): every
	// window fired before it, so its marker is the end of time, which
	// tells the hub this edge holds back no window of that revision. Set
	// by the pump before it injects that barrier; barriers still in
	// flight have lower ids.
	endID  atomic.Uint64
	parts  chan<- ckptPart
	groups int // the store's key groups: the opLog splits by them
	staged []staged
	wm     int64 // watermark of the last marker handed over
}

type staged struct {
	epoch uint64
	kind  byte // 'r' result, 'l' late, 'd' dead letter
	entry []byte
}

func (s *stagingSink) Result(r *operators.Result) error {
	s.staged = append(s.staged, staged{r.Epoch, 'r', encodeOutbox(nil, s.p.Name, s.rev, s.local, r)})
	return nil
}

func (s *stagingSink) Late(l *operators.Late) error {
	b, err := s.p.AppendLateJSON(nil, l)
	if err != nil {
		return err
	}
	s.staged = append(s.staged, staged{l.Epoch, 'l', b})
	return nil
}

func (s *stagingSink) Dead(d *operators.DeadLetter) error {
	s.staged = append(s.staged, staged{d.Epoch, 'd', s.p.AppendDeadJSON(nil, d)})
	return nil
}

func (s *stagingSink) Barrier(b *operators.Barrier) error {
	part := ckptPart{id: b.ID, pipe: s.p.Name}
	wm := b.Watermark
	if b.ID == s.endID.Load() {
		wm = window.MaxTime
	}
	if wm > s.wm {
		part.wm, part.hasWM, s.wm = wm, true, wm
	}
	keep := s.staged[:0]
	for _, st := range s.staged {
		switch {
		case st.epoch >= b.ID:
			keep = append(keep, st)
		case st.kind == 'r':
			part.out = append(part.out, st.entry)
		case st.kind == 'l':
			part.late = append(part.late, st.entry)
		default:
			part.dead = append(part.dead, st.entry)
		}
	}
	clear(s.staged[len(keep):])
	s.staged = keep
	part.ops = newOpLog(s.groups)
	if err := b.Changes(part.ops); err != nil {
		return err
	}
	s.parts <- part
	return nil
}

// Outbox entries (docs/formats/outbox.md): a kind byte, uvarint len +
// pipeline, then for a window result ('r') uvarint len + key, varint start,
// varint end, uvarint version and the aggregate state (the rest); for a
// watermark marker ('w') the varint watermark. A managed pipeline's
// entries ('R', 'W') put its uvarint revision and a flags byte after the
// pipeline name: the entry says itself whether it is for the hub, so it
// still goes right after its revision has been replaced.
const (
	entryResult      = 'r'
	entryWatermark   = 'w'
	entryResultRev   = 'R'
	entryWatermarkRv = 'W'
	entryQuarantined = 'q' // a quarantined entry's tombstone (side.go)

	flagLocal = 1 // 'R', 'W': not for the hub
)

// appendEntryHead appends an entry's kind, pipeline and, for a managed
// pipeline (rev > 0), its revision and flags.
func appendEntryHead(dst []byte, kind byte, pipeline string, rev uint32, local bool) []byte {
	if rev > 0 {
		kind -= 'a' - 'A'
	}
	dst = append(dst, kind)
	dst = binary.AppendUvarint(dst, uint64(len(pipeline)))
	dst = append(dst, pipeline...)
	if rev > 0 {
		var flags byte
		if local {
			flags |= flagLocal
		}
		dst = binary.AppendUvarint(dst, uint64(rev))
		dst = append(dst, flags)
	}
	return dst
}

func encodeOutbox(dst []byte, pipeline string, rev uint32, local bool, r *operators.Result) []byte {
	dst = appendEntryHead(dst, entryResult, pipeline, rev, local)
	dst = binary.AppendUvarint(dst, uint64(len(r.Key)))
	dst = append(dst, r.Key...)
	dst = binary.AppendVarint(dst, r.Start)
	dst = binary.AppendVarint(dst, r.End)
	dst = binary.AppendUvarint(dst, uint64(r.Version))
	return append(dst, r.State...)
}

func encodeWatermark(dst []byte, pipeline string, rev uint32, local bool, wm int64) []byte {
	dst = appendEntryHead(dst, entryWatermark, pipeline, rev, local)
	return binary.AppendVarint(dst, wm)
}

// OutboxEntry is one committed outbox entry waiting for the uplink: a
// window result, or a marker of the pipeline's watermark at a checkpoint
// (every window ending at or before it was emitted by then).
type OutboxEntry struct {
	Seq      uint64
	Pipeline string
	Revision uint32 // of a managed pipeline; 0: a local file's
	// NotForHub: a managed pipeline's entry that does not go to the hub
	// (its revision has no hub output). For a local pipeline (Revision
	// 0) the running pipeline's outputs say.
	NotForHub bool
	Marker    bool  // a watermark marker; Result is unset
	Watermark int64 // the marker's watermark
	// Quarantined: the entry was set aside (the quarantine side output
	// holds it); only its sequence number goes to the hub.
	Quarantined bool
	Result      operators.Result
}

// DecodeOutbox decodes the outbox entry stored under seq. Key and State
// alias b.
func DecodeOutbox(seq uint64, b []byte) (OutboxEntry, error) {
	e := OutboxEntry{Seq: seq}
	bad := fmt.Errorf("edge: outbox entry %d: corrupt", seq)
	if len(b) == 0 {
		return e, bad
	}
	kind := b[0]
	switch kind {
	case entryResult, entryWatermark, entryQuarantined, entryResultRev, entryWatermarkRv:
	default:
		return e, bad
	}
	b = b[1:]
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return e, bad
	}
	e.Pipeline, b = string(b[n:n+int(l)]), b[n+int(l):]
	if kind == entryResultRev || kind == entryWatermarkRv {
		rev, n := binary.Uvarint(b)
		if n <= 0 || rev == 0 || rev > math.MaxUint32 || len(b) == n || b[n]&^flagLocal != 0 {
			return e, bad
		}
		e.Revision, e.NotForHub, b = uint32(rev), b[n]&flagLocal != 0, b[n+1:]
		kind += 'a' - 'A'
	}
	var m int
	if kind == entryQuarantined {
		e.Quarantined = true
		if len(b) != 0 {
			return e, bad
		}
		return e, nil
	}
	if kind == entryWatermark {
		e.Marker = true
		if e.Watermark, m = binary.Varint(b); m <= 0 || m != len(b) {
			return e, bad
		}
		return e, nil
	}
	l, n = binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return e, bad
	}
	e.Result.Key, b = b[n:n+int(l)], b[n+int(l):]
	if e.Result.Start, m = binary.Varint(b); m <= 0 {
		return e, bad
	}
	b = b[m:]
	if e.Result.End, m = binary.Varint(b); m <= 0 {
		return e, bad
	}
	b = b[m:]
	v, m := binary.Uvarint(b)
	if m <= 0 || v > math.MaxUint32 {
		return e, bad
	}
	e.Result.Version, e.Result.State = uint32(v), b[m:]
	return e, nil
}

// writer commits checkpoints as their parts arrive, in id order.
func (n *node) writer(ctx context.Context) error {
	defer close(n.writerDone)
	var pending checkpoint.Parts[ckptPart]
	for {
		var part ckptPart
		select {
		case req := <-n.writeReqs:
			req.done <- req.run()
			continue
		case p, ok := <-n.parts:
			if !ok {
				return nil
			}
			part = p
		}
		// The pump's part says how many pipelines send one: the set
		// changes at reconfiguring checkpoints.
		need := -1
		if part.isPos {
			need = part.pipes + 1
		}
		parts, ok := pending.Add(part.id, part, need)
		if !ok {
			continue
		}
		err := n.commit(part.id, parts)
		for _, p := range parts {
			if p.fleet != nil {
				p.fleet.done <- err
			}
			if p.notify != nil {
				p.notify <- err
			}
		}
		if err != nil {
			return err
		}
	}
}

func (n *node) commit(id uint64, parts []ckptPart) error {
	began := time.Now()
	// Read before the transaction, which stores at least as much: the
	// pump's idle test then errs towards one commit more.
	ackSeen, pubSeen := n.deletableUpTo(), n.published.Load()
	c := checkpoint.Meta{ID: id, NextSeq: n.last.NextSeq}
	entries := 0
	var fed uint64
	var sideN uint32
	var side sideDelta
	var changeBytes, baseBytes, outboxBytes, sideBytes, freed int64
	var fc *fleetCommit
	// Only the writer touches the store, so nothing of a later checkpoint
	// can slip in. The pipelines' statistics change with the transaction:
	// they are put back if it fails.
	saved := make([][]groupStat, len(n.pipes))
	for i, ps := range n.pipes {
		saved[i] = slices.Clone(ps.state.groups)
	}
	err := n.store.Update(func(tx *state.Tx) error {
		outbox, err := tx.Bucket(bucketOutbox)
		if err != nil {
			return err
		}
		late, err := tx.Bucket(bucketLate)
		if err != nil {
			return err
		}
		dead, err := tx.Bucket(bucketDead)
		if err != nil {
			return err
		}
		// All three are keyed in the order entries are added.
		outbox.FillSequential()
		late.FillSequential()
		dead.FillSequential()
		for i, p := range parts {
			if p.isPos {
				c.LogPos, fed, fc = uint64(p.pos), p.fed, p.fleet
				continue
			}
			ps := n.pipe(p.pipe)
			_, rebased, err := ps.state.write(tx, p.ops, id)
			if err != nil {
				return fmt.Errorf("pipeline %s state: %w", p.pipe, err)
			}
			baseBytes += rebased
			changeBytes += p.ops.bytes
			// The store holds its own copy of the op records now: let a
			// collection during the rest of the commit (bbolt's spill
			// and fsync) free them.
			parts[i].ops = nil
			out := p.out
			if p.hasWM {
				out = append(out, encodeWatermark(nil, p.pipe, ps.sink.rev, ps.sink.local, p.wm))
			}
			for _, e := range out {
				if err := outbox.Put(binary.BigEndian.AppendUint64(nil, c.NextSeq), e); err != nil {
					return err
				}
				c.NextSeq++
				entries++
				outboxBytes += int64(len(e))
			}
			// Side outputs are keyed by commit time, checkpoint id and
			// arrival index (side.go).
			for _, e := range p.late {
				if err := side.put(late, sideIndex(sideLate), sideKey(began, id, &sideN), e); err != nil {
					return err
				}
				sideBytes += int64(len(e))
			}
			for _, e := range p.dead {
				if err := side.put(dead, sideIndex(sideDead), sideKey(began, id, &sideN), e); err != nil {
					return err
				}
				sideBytes += int64(len(e))
			}
		}
		// After every pipeline's part: a dropped pipeline's last changes
		// go with its state.
		if fc != nil {
			if err := storeFleet(tx, fc); err != nil {
				return fmt.Errorf("applied pipeline set: %w", err)
			}
		}
		if err := n.boundSide(tx, &side, began, outboxBytes); err != nil {
			return err
		}
		if freed, err = n.deleteAcked(tx, outbox); err != nil {
			return err
		}
		return checkpoint.StoreMeta(tx, c)
	})
	if err != nil {
		for i, ps := range n.pipes {
			ps.state.groups = saved[i]
		}
		n.status.checkpointErr.Store(err.Error())
		return fmt.Errorf("edge: checkpoint %d: %w", id, err)
	}
	n.status.checkpointErr.Store("")
	n.status.checkpoints.Add(1)
	n.ackCommitted.Store(ackSeen)
	n.pubCommitted.Store(pubSeen)
	n.status.checkpointNanos.Store(int64(time.Since(began)))
	n.status.checkpointBytes.Store(changeBytes)
	n.status.stateWritten.Add(changeBytes)
	n.status.baseWritten.Add(baseBytes)
	n.status.outboxWritten.Add(outboxBytes)
	n.status.sideWritten.Add(sideBytes)
	n.status.outboxBytes.Add(outboxBytes - freed)
	n.commitSide(&side, began)
	n.deletedTo = max(n.deletedTo, n.pendingDeletedTo)
	n.grewMu.Lock()
	if entries > 0 {
		n.unsent.committed(c.NextSeq-uint64(entries), time.Now().UnixMilli())
	}
	n.lastSeq.Store(c.NextSeq)
	if entries > 0 {
		close(n.grew)
		n.grew = make(chan struct{})
	}
	n.grewMu.Unlock()
	prev := n.last
	n.last = c
	for _, p := range parts {
		if ps := n.pipe(p.pipe); ps != nil {
			if ps.rt != nil {
				// The keys this checkpoint's snapshot wrote may be evicted.
				ps.rt.Committed(id)
			}
			if err := ps.outs.write(p.out); err != nil {
				n.lg.Error("edge: file output", "pipeline", p.pipe, "err", err)
			}
			ps.side.write(p.pipe, p.late, p.dead)
		}
	}
	// Segments go once the checkpoint before this one covers them: bbolt
	// opens the previous commit when the newest meta page is damaged, and
	// that checkpoint must still find its log.
	// The raw archive lane keeps what it has not uploaded, within bounds.
	del := ingestlog.Position(prev.LogPos)
	if n.raw != nil {
		del = n.rawDeleteBound(del)
	}
	if err := n.log.DeleteBefore(del); err != nil {
		n.lg.Warn("edge: delete ingest log segments", "before", del, "err", err)
	}
	if n.status.capBlocked.Load() && n.log.End() <= del && n.log.Size() > n.cfg.DiskCap/64 {
		// Held at the disk cap with every record behind both
		// checkpoints: the active segment is what is left, and only a
		// sealed segment can go.
		if err := n.log.Seal(context.Background()); err != nil {
			n.lg.Warn("edge: seal the ingest log's active segment", "err", err)
		} else if err := n.log.DeleteBefore(del); err != nil {
			n.lg.Warn("edge: delete ingest log segments", "before", del, "err", err)
		}
	}
	n.logCovered.Store(c.LogPos)
	n.logFreed.Store(uint64(del))
	// What this checkpoint read of the file stays mapped otherwise, and the
	// resident set would grow with the file (see state.Store.ReleasePages).
	if err := n.store.ReleasePages(); err != nil {
		n.lg.Warn("edge: release state file pages", "err", err)
	}
	n.lg.Debug("edge: checkpoint", "id", id, "pos", c.LogPos, "messages", fed, "outbox_entries", entries)
	return nil
}

// ReadOutbox calls fn for every committed outbox entry of the node whose
// data directory is dir, in sequence order. The node must not be running.
func ReadOutbox(ctx context.Context, dir string, fn func(OutboxEntry) error) error {
	st, err := state.Open(dir+"/state.db", state.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	return st.View(func(tx *state.Tx) error {
		b, err := tx.Bucket(bucketOutbox)
		if err != nil {
			return err
		}
		return b.ForEach(nil, func(k, v []byte) error {
			if len(k) != 8 {
				return fmt.Errorf("edge: outbox key %x", k)
			}
			e, err := DecodeOutbox(binary.BigEndian.Uint64(k), v)
			if err != nil {
				return err
			}
			return fn(e)
		})
	})
}

// pipe returns the running pipeline called name, nil if none; safe on
// any goroutine.
func (n *node) pipe(name string) *pipe {
	view := n.pipeView.Load()
	if view == nil {
		return nil
	}
	for _, ps := range *view {
		if ps.p.Name == name {
			return ps
		}
	}
	return nil
}
