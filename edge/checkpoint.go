package edge

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/state"
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
	pipe  string
	out   [][]byte // outbox entries, in emission order
	late  [][]byte // late records, JSON
	dead  [][]byte // dead letters, JSON
	snap  []byte   // snapshot entries, eachEntry format
}

// stagingSink keeps outputs until the checkpoint that covers them: window
// results become outbox entries, late records and dead letters go to their
// own buckets, all in the checkpoint's transaction, so none is lost or
// stored twice across crashes.
type stagingSink struct {
	p      *operators.Pipeline
	parts  chan<- ckptPart
	staged []staged
}

type staged struct {
	epoch uint64
	kind  byte // 'r' result, 'l' late, 'd' dead letter
	entry []byte
}

func (s *stagingSink) Result(r *operators.Result) error {
	s.staged = append(s.staged, staged{r.Epoch, 'r', encodeOutbox(nil, s.p.Name, r)})
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
	err := b.Entries(func(h uint64, k, v []byte) error {
		part.snap = appendEntry(part.snap, h, k, v)
		return nil
	})
	if err != nil {
		return err
	}
	s.parts <- part
	return nil
}

// Outbox entry: uvarint len + pipeline, uvarint len + key, varint start,
// varint end, uvarint version, aggregate state (the rest).
func encodeOutbox(dst []byte, pipeline string, r *operators.Result) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(pipeline)))
	dst = append(dst, pipeline...)
	dst = binary.AppendUvarint(dst, uint64(len(r.Key)))
	dst = append(dst, r.Key...)
	dst = binary.AppendVarint(dst, r.Start)
	dst = binary.AppendVarint(dst, r.End)
	dst = binary.AppendUvarint(dst, uint64(r.Version))
	return append(dst, r.State...)
}

// OutboxEntry is one committed window result waiting for the uplink.
type OutboxEntry struct {
	Seq      uint64
	Pipeline string
	Result   operators.Result
}

func decodeOutbox(seq uint64, b []byte) (OutboxEntry, error) {
	e := OutboxEntry{Seq: seq}
	bad := fmt.Errorf("edge: outbox entry %d: corrupt", seq)
	l, n := binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return e, bad
	}
	e.Pipeline, b = string(b[n:n+int(l)]), b[n+int(l):]
	l, n = binary.Uvarint(b)
	if n <= 0 || uint64(len(b)-n) < l {
		return e, bad
	}
	e.Result.Key, b = b[n:n+int(l)], b[n+int(l):]
	var m int
	if e.Result.Start, m = binary.Varint(b); m <= 0 {
		return e, bad
	}
	b = b[m:]
	if e.Result.End, m = binary.Varint(b); m <= 0 {
		return e, bad
	}
	b = b[m:]
	v, m := binary.Uvarint(b)
	if m <= 0 {
		return e, bad
	}
	e.Result.Version, e.Result.State = uint32(v), b[m:]
	return e, nil
}

func appendEntry(dst []byte, h uint64, k, v []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, h)
	dst = binary.AppendUvarint(dst, uint64(len(k)))
	dst = append(dst, k...)
	dst = binary.AppendUvarint(dst, uint64(len(v)))
	return append(dst, v...)
}

func eachEntry(b []byte, fn func(uint64, []byte, []byte) error) error {
	for len(b) > 0 {
		if len(b) < 8 {
			return errors.New("edge: snapshot: truncated entry")
		}
		h := binary.BigEndian.Uint64(b)
		b = b[8:]
		var kv [2][]byte
		for i := range kv {
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return errors.New("edge: snapshot: bad entry length")
			}
			kv[i], b = b[n:n+int(l)], b[n+int(l):]
		}
		if err := fn(h, kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}

// writer commits checkpoints as their parts arrive, in id order.
func (n *node) writer(ctx context.Context) error {
	pending := map[uint64][]ckptPart{}
	need := len(n.pipes) + 1
	for part := range n.parts {
		pending[part.id] = append(pending[part.id], part)
		if len(pending[part.id]) < need {
			continue
		}
		parts := pending[part.id]
		delete(pending, part.id)
		if err := n.commit(part.id, parts); err != nil {
			return err
		}
	}
	return nil
}

func (n *node) commit(id uint64, parts []ckptPart) error {
	c := checkpoint{ID: id, NextSeq: n.last.NextSeq}
	entries := 0
	var sideN uint32
	_, err := n.store.Commit(func(tx *state.Tx) error {
		snaps, err := tx.Bucket(bucketSnapshot)
		if err != nil {
			return err
		}
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
		for _, p := range parts {
			if p.isPos {
				c.Pos = p.pos
				continue
			}
			if err := snaps.Put([]byte(p.pipe), p.snap); err != nil {
				return err
			}
			for _, e := range p.out {
				if err := outbox.Put(binary.BigEndian.AppendUint64(nil, c.NextSeq), e); err != nil {
					return err
				}
				c.NextSeq++
				entries++
			}
			// Side outputs are keyed by checkpoint id and arrival index.
			for _, e := range p.late {
				if err := late.Put(sideKey(id, &sideN), e); err != nil {
					return err
				}
			}
			for _, e := range p.dead {
				if err := dead.Put(sideKey(id, &sideN), e); err != nil {
					return err
				}
			}
		}
		meta, err := tx.Bucket(bucketCheckpoint)
		if err != nil {
			return err
		}
		return meta.Put([]byte("last"), c.encode())
	})
	if err != nil {
		return fmt.Errorf("edge: checkpoint %d: %w", id, err)
	}
	n.last = c
	if err := n.log.DeleteBefore(c.Pos); err != nil {
		n.lg.Warn("edge: delete ingest log segments", "before", c.Pos, "err", err)
	}
	n.lg.Debug("edge: checkpoint", "id", id, "pos", c.Pos, "outbox_entries", entries)
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
			e, err := decodeOutbox(binary.BigEndian.Uint64(k), v)
			if err != nil {
				return err
			}
			return fn(e)
		})
	})
}

// ReadSideOutput calls fn with every late record (which "late") or dead
// letter (which "dead") a stopped node committed, as JSON, in order.
func ReadSideOutput(dir, which string, fn func(line []byte) error) error {
	bucket := map[string]string{"late": bucketLate, "dead": bucketDead}[which]
	if bucket == "" {
		return fmt.Errorf("edge: no side output %q (late, dead)", which)
	}
	st, err := state.Open(dir+"/state.db", state.Options{})
	if err != nil {
		return err
	}
	defer st.Close()
	return st.View(func(tx *state.Tx) error {
		b, err := tx.Bucket(bucket)
		if err != nil {
			return err
		}
		return b.ForEach(nil, func(_, v []byte) error { return fn(v) })
	})
}

func sideKey(id uint64, n *uint32) []byte {
	k := binary.BigEndian.AppendUint64(nil, id)
	k = binary.BigEndian.AppendUint32(k, *n)
	*n++
	return k
}
