package window

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// ErrCorrupt marks a snapshot entry Restore cannot accept.
var ErrCorrupt = errors.New("window: corrupt snapshot entry")

// SnapshotWriter receives snapshot operations. Keys and values are valid
// only during the call. hash is the hash of the entry's key (0 for
// operator-wide entries): a store partitions by it.
type SnapshotWriter interface {
	Put(hash uint64, key, value []byte) error
	Delete(hash uint64, key []byte) error
	// DeletePrefix deletes every entry whose key starts with prefix, in
	// every partition.
	DeletePrefix(prefix []byte) error
}

// Snapshot entries (docs/formats/window-snapshot.md):
//
//	'm'                             -> version, kind, varint wm, varint firedThrough
//	's' be64(slice end) key bytes   -> aggregate encoding of the key's partial in that slice
//	'v' key bytes                   -> the key's window versions: uvarint n, n × (varint end, uvarint version)
//	'x' key bytes                   -> the key's sessions: uvarint n, n × (varint start, varint end,
//	                                   uvarint version, dirty byte, uvarint len, aggregate encoding)
//
// Merged blocks are not written: they are rebuilt from slices when needed.
const snapshotVersion = 2

// Snapshot writes the operator's whole state. Restoring it into a new
// Operator with the same Config continues exactly where this one is. It
// also clears the change marks, like SnapshotDirty. Evicted keys are not
// in it: their entries are the store's (evict.go), so with eviction only
// the incremental snapshots (Checkpoint) keep a store whole.
func (o *Operator) Snapshot(w SnapshotWriter) error { return o.snapshot(w, true) }

// SnapshotDirty writes what changed since the last Snapshot or
// SnapshotDirty: partials that were updated, slices that were dropped,
// keys whose versions or sessions changed or that were forgotten. Applied
// in order on top of the entries of earlier snapshots, it leaves exactly
// the entries of a full Snapshot. Its cost is proportional to the change,
// not to the state.
func (o *Operator) SnapshotDirty(w SnapshotWriter) error { return o.snapshot(w, false) }

func (o *Operator) snapshot(w SnapshotWriter, full bool) error {
	var kb, vb []byte
	vb = append(vb[:0], snapshotVersion, byte(o.kind))
	vb = binary.AppendVarint(vb, o.wm)
	vb = binary.AppendVarint(vb, o.firedThrough)
	if err := w.Put(0, []byte{'m'}, vb); err != nil {
		return err
	}
	for _, end := range o.dropped {
		if !full {
			if err := w.DeletePrefix(sliceKey(kb[:0], end, nil)); err != nil {
				return err
			}
		}
	}
	o.dropped = o.dropped[:0]
	for _, d := range o.deleted {
		if !full {
			if err := w.Delete(d.hash, d.key); err != nil {
				return err
			}
		}
	}
	o.deleted = o.deleted[:0]
	for _, sb := range o.slabs {
		for c, ch := range sb.chunks {
			if ch == nil || ch.n == 0 {
				continue
			}
			for wi := range ch.bits {
				x := ch.dirty[wi]
				if full {
					x = ch.bits[wi]
				}
				ch.dirty[wi] = 0
				for x != 0 {
					i := wi<<6 | bits.TrailingZeros64(x)
					x &= x - 1
					idx := int32(c<<chunkBits | i)
					o.noteWrote(idx)
					st := ch.at(i)
					vb = o.aggs.AppendEncode(vb[:0], &st)
					if err := w.Put(o.keys[idx].hash, sliceKey(kb[:0], sb.end, o.names.get(idx)), vb); err != nil {
						return err
					}
				}
			}
		}
	}
	write := func(idx int32) error {
		k := &o.keys[idx]
		k.changed = false
		o.noteWrote(idx)
		if !k.live {
			return nil
		}
		if o.kind == Session {
			kb = append(append(kb[:0], 'x'), o.names.get(idx)...)
			ss := o.sess[idx].sessions
			if len(ss) == 0 {
				k.stored = false
				return w.Delete(k.hash, kb)
			}
			vb = binary.AppendUvarint(vb[:0], uint64(len(ss)))
			for _, s := range ss {
				vb = binary.AppendVarint(vb, s.start)
				vb = binary.AppendVarint(vb, s.end)
				vb = binary.AppendUvarint(vb, uint64(s.version))
				d := byte(0)
				if s.dirty {
					d = 1
				}
				vb = append(vb, d)
				o.enc = o.aggs.AppendEncode(o.enc[:0], s.st)
				vb = binary.AppendUvarint(vb, uint64(len(o.enc)))
				vb = append(vb, o.enc...)
			}
		} else {
			kb = append(append(kb[:0], 'v'), o.names.get(idx)...)
			fired := o.firedView(idx)
			if len(fired) == 0 {
				k.stored = false
				return w.Delete(k.hash, kb)
			}
			vb = binary.AppendUvarint(vb[:0], uint64(len(fired)))
			for _, f := range fired {
				vb = binary.AppendVarint(vb, f.end)
				vb = binary.AppendUvarint(vb, uint64(f.version))
			}
		}
		k.stored = true
		return w.Put(k.hash, kb, vb)
	}
	if full {
		for i := range o.keys {
			if o.keys[i].live && (len(o.firedView(int32(i))) > 0 || o.kind == Session && len(o.sess[i].sessions) > 0) {
				if err := write(int32(i)); err != nil {
					return err
				}
			}
		}
		for i := range o.keys {
			o.keys[i].changed = false
		}
	} else {
		for _, idx := range o.changed {
			if o.keys[idx].changed {
				if err := write(idx); err != nil {
					return err
				}
			}
		}
	}
	o.changed = o.changed[:0]
	return nil
}

func sliceKey(dst []byte, end int64, key []byte) []byte {
	dst = append(dst, 's')
	dst = binary.BigEndian.AppendUint64(dst, uint64(end)^1<<63) // order-preserving for negative times
	return append(dst, key...)
}

// touch marks key idx's versions or sessions as changed.
func (o *Operator) touch(idx int32) {
	if k := &o.keys[idx]; !k.changed {
		k.changed = true
		o.changed = append(o.changed, idx)
	}
}

// Restore loads one entry written by Snapshot (or the result of applying
// SnapshotDirty operations in order) into an Operator made with the same
// Config that has seen no events. Call it for every entry, in any order,
// then FinishRestore.
func (o *Operator) Restore(hash uint64, key, value []byte) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if len(key) == 1 && key[0] == 'm' {
		if len(value) < 2 || value[0] != snapshotVersion {
			return bad("metadata version %v", value)
		}
		if Kind(value[1]) != o.kind {
			return bad("snapshot of %s windows restored into %s windows", Kind(value[1]), o.kind)
		}
		wm, n := binary.Varint(value[2:])
		if n <= 0 {
			return bad("metadata watermark")
		}
		ft, m := binary.Varint(value[2+n:])
		if m <= 0 || 2+n+m != len(value) {
			return bad("metadata")
		}
		o.wm, o.firedThrough = wm, ft
		return nil
	}
	if len(key) == 0 {
		return bad("empty key")
	}
	var k []byte
	var t int64
	switch key[0] {
	case 's':
		if len(key) < 9 {
			return bad("slice key of %d bytes", len(key))
		}
		t, k = int64(binary.BigEndian.Uint64(key[1:9])^1<<63), key[9:]
	case 'v', 'x':
		k = key[1:]
	default:
		return bad("unknown entry kind %q", key[0])
	}
	idx := o.index.find(hash, k, &o.names)
	if idx < 0 {
		idx = o.newKey(k, hash)
	}
	ks := &o.keys[idx]
	switch key[0] {
	case 's':
		if o.kind == Session {
			return bad("slice entry in a session operator")
		}
		if t == MinTime || o.sl.sliceEnd(t-1) != t {
			return bad("%d is not a slice end", t)
		}
		sb := o.slab(t)
		st := o.slabState(sb, idx)
		if err := o.aggs.Decode(&st, value); err != nil {
			return fmt.Errorf("%w: slice %d: %w", ErrCorrupt, t, err)
		}
	case 'v':
		if o.kind == Session {
			return bad("window versions in a session operator")
		}
		n, w := binary.Uvarint(value)
		if w <= 0 || n > uint64(len(value)) {
			return bad("versions count")
		}
		b := value[w:]
		fired := o.firedOf(idx)
		*fired = (*fired)[:0]
		for range n {
			end, a := binary.Varint(b)
			if a <= 0 || end == MinTime || o.sl.endAtOrAfter(end) != end {
				return bad("window end")
			}
			v, c := binary.Uvarint(b[a:])
			if c <= 0 || v == 0 || v > 1<<32-1 || (len(*fired) > 0 && (*fired)[len(*fired)-1].end >= end) {
				return bad("window version")
			}
			*fired = append(*fired, firedWindow{end: end, version: uint32(v)})
			b = b[a+c:]
		}
		if len(b) != 0 {
			return bad("trailing bytes after versions")
		}
		ks.stored = true
	case 'x':
		if o.kind != Session {
			return bad("session entry in an aligned operator")
		}
		n, w := binary.Uvarint(value)
		if w <= 0 || n > uint64(len(value)) {
			return bad("sessions count")
		}
		b := value[w:]
		sk := &o.sess[idx]
		for _, s := range sk.sessions {
			o.putState(s.st)
		}
		sk.sessions = sk.sessions[:0]
		for range n {
			var s session
			var a int
			if s.start, a = binary.Varint(b); a <= 0 {
				return bad("session start")
			}
			b = b[a:]
			if s.end, a = binary.Varint(b); a <= 0 || s.end <= s.start ||
				(len(sk.sessions) > 0 && sk.sessions[len(sk.sessions)-1].end > s.start) {
				return bad("session end")
			}
			b = b[a:]
			v, a := binary.Uvarint(b)
			if a <= 0 || v > 1<<32-1 || a >= len(b) || b[a] > 1 {
				return bad("session version")
			}
			s.version, s.dirty = uint32(v), b[a] == 1
			b = b[a+1:]
			l, a := binary.Uvarint(b)
			if a <= 0 || uint64(len(b)-a) < l {
				return bad("session state length")
			}
			s.st = o.getState()
			if err := o.aggs.Decode(s.st, b[a:a+int(l)]); err != nil {
				o.putState(s.st)
				return fmt.Errorf("%w: session %d: %w", ErrCorrupt, s.start, err)
			}
			b = b[a+int(l):]
			sk.sessions = append(sk.sessions, s)
		}
		if len(b) != 0 {
			return bad("trailing bytes after sessions")
		}
		ks.stored = true
	}
	return nil
}

// FinishRestore makes the restored Operator ready: timers and plans are
// rebuilt, and change marks cleared (the restored state is what the store
// holds).
func (o *Operator) FinishRestore() {
	o.nextSweep = MinTime
	o.settleRestored()
	// What follows may change state for real (sessions past lateness are
	// dropped, idle keys forgotten): those changes stay marked.
	if o.kind != Session {
		o.planAligned()
	} else {
		for i := range o.keys {
			if o.keys[i].live {
				o.sess[i].due = unregistered
				o.processSessions(int32(i))
			}
		}
	}
	o.shed()
}

// ShedRestored lets an operator with Config.MaxResident evict during a
// restore, so that a state larger than memory restores within the bound
// rather than whole: the caller says that every entry of the keys restored
// so far has been restored (it restores key by key, or key group by key
// group, and calls this between two), so they are clean, as stored. It
// evicts (as FinishRestore would) once more than an eighth over the bound.
func (o *Operator) ShedRestored() {
	if o.maxResident <= 0 || o.kind == Session || o.live <= o.maxResident+o.maxResident/8 {
		return
	}
	o.settleRestored()
	o.shed()
}

// settleRestored marks what was restored as stored: no change to write.
func (o *Operator) settleRestored() {
	for _, sb := range o.slabs {
		for _, ch := range sb.chunks {
			if ch != nil {
				ch.dirty = [chunkSize / 64]uint64{}
			}
		}
	}
	for _, idx := range o.changed {
		o.keys[idx].changed = false
	}
	o.changed = o.changed[:0]
	o.dropped = o.dropped[:0]
	o.deleted = o.deleted[:0]
	for i := range o.wrote {
		o.wrote[i] = 0 // the restored state is stored
	}
}

// RecordKey returns the record key a snapshot entry belongs to (nil for
// operator-wide entries), so that a store that keeps only keys and values
// can recompute the hash Snapshot passed along.
func RecordKey(entryKey []byte) []byte {
	switch {
	case len(entryKey) >= 9 && entryKey[0] == 's':
		return entryKey[9:]
	case len(entryKey) >= 1 && (entryKey[0] == 'v' || entryKey[0] == 'x'):
		return entryKey[1:]
	}
	return nil
}
