package window

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// ErrCorrupt marks a snapshot entry Restore cannot accept.
var ErrCorrupt = errors.New("window: corrupt snapshot entry")

// Snapshot entries. Each is a (key, value) pair, self-describing by its
// first key byte, so a store can keep them in any order and partition them
// by the hash passed along (the key's own hash; 0 for operator metadata):
//
//	'm'                              -> version 1, kind, uvarint wm+, uvarint firedThrough+   (zig-zag varints)
//	's' be64(slice end)  key bytes   -> aggregate encoding of the key's partial in that slice
//	'v' be64(window end) key bytes   -> uvarint last emitted version of an aligned window
//	'x' be64(session start) key bytes -> varint end, uvarint version, dirty byte, aggregate encoding
//
// Merged blocks are not written: they are rebuilt from slices when needed.
// The layout is described in docs/formats/window-snapshot.md.
const snapshotVersion = 1

// Snapshot hands every piece of the operator's state to put, entry by
// entry, in no particular order: the watermark, every partial with data,
// the versions of windows that can still change and every session. The key
// and value slices are valid only during the call. Restoring the entries
// into a new Operator with the same Config continues exactly where this one
// is: the same later results, byte for byte.
func (o *Operator) Snapshot(put func(hash uint64, key, value []byte) error) error {
	var kb, vb []byte
	vb = append(vb[:0], snapshotVersion, byte(o.kind))
	vb = binary.AppendVarint(vb, o.wm)
	vb = binary.AppendVarint(vb, o.firedThrough)
	if err := put(0, []byte{'m'}, vb); err != nil {
		return err
	}
	entry := func(tag byte, t int64, k *keyState) []byte {
		kb = append(kb[:0], tag)
		kb = binary.BigEndian.AppendUint64(kb, uint64(t)^1<<63) // order-preserving for negative times
		return append(kb, k.key...)
	}
	for _, sb := range o.slabs {
		for c, ch := range sb.chunks {
			if ch == nil || ch.n == 0 {
				continue
			}
			for w, x := range ch.bits {
				for x != 0 {
					i := w<<6 | bits.TrailingZeros64(x)
					x &= x - 1
					k := &o.keys[c<<chunkBits|i]
					vb = o.aggs.AppendEncode(vb[:0], &ch.states[i])
					if err := put(k.hash, entry('s', sb.end, k), vb); err != nil {
						return err
					}
				}
			}
		}
	}
	for i := range o.keys {
		k := &o.keys[i]
		if !k.live {
			continue
		}
		for _, f := range k.fired {
			vb = binary.AppendUvarint(vb[:0], uint64(f.version))
			if err := put(k.hash, entry('v', f.end, k), vb); err != nil {
				return err
			}
		}
		for _, s := range k.sessions {
			vb = binary.AppendVarint(vb[:0], s.end)
			vb = binary.AppendUvarint(vb, uint64(s.version))
			d := byte(0)
			if s.dirty {
				d = 1
			}
			vb = append(vb, d)
			vb = o.aggs.AppendEncode(vb, s.st)
			if err := put(k.hash, entry('x', s.start, k), vb); err != nil {
				return err
			}
		}
	}
	return nil
}

// Restore loads one entry written by Snapshot into an Operator made with the
// same Config that has seen no events. Call it for every entry, in any
// order, then FinishRestore.
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
	if len(key) < 9 {
		return bad("key of %d bytes", len(key))
	}
	t := int64(binary.BigEndian.Uint64(key[1:9]) ^ 1<<63)
	k := key[9:]
	idx := o.index.find(hash, k, o.keys)
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
		st := o.slabState(o.slab(t), idx)
		if err := o.aggs.Decode(st, value); err != nil {
			return fmt.Errorf("%w: slice %d: %w", ErrCorrupt, t, err)
		}
		ks.lastSlice = max(ks.lastSlice, t)
	case 'v':
		if o.kind == Session || t == MinTime || o.sl.endAtOrAfter(t) != t {
			return bad("%d is not a window end", t)
		}
		v, n := binary.Uvarint(value)
		if n <= 0 || n != len(value) || v == 0 || v > 1<<32-1 {
			return bad("version of window %d", t)
		}
		i := len(ks.fired)
		for i > 0 && ks.fired[i-1].end > t {
			i--
		}
		ks.fired = append(ks.fired, firedWindow{})
		copy(ks.fired[i+1:], ks.fired[i:])
		ks.fired[i] = firedWindow{end: t, version: uint32(v)}
	case 'x':
		if o.kind != Session {
			return bad("session entry in an aligned operator")
		}
		end, n := binary.Varint(value)
		if n <= 0 || end <= t {
			return bad("session end")
		}
		ver, m := binary.Uvarint(value[n:])
		if m <= 0 || ver > 1<<32-1 || n+m >= len(value) || value[n+m] > 1 {
			return bad("session version")
		}
		st := o.getState()
		if err := o.aggs.Decode(st, value[n+m+1:]); err != nil {
			o.putState(st)
			return fmt.Errorf("%w: session %d: %w", ErrCorrupt, t, err)
		}
		s := session{start: t, end: end, st: st, version: uint32(ver), dirty: value[n+m] == 1}
		i := len(ks.sessions)
		for i > 0 && ks.sessions[i-1].start > t {
			i--
		}
		ks.sessions = append(ks.sessions, session{})
		copy(ks.sessions[i+1:], ks.sessions[i:])
		ks.sessions[i] = s
	default:
		return bad("unknown entry kind %q", key[0])
	}
	return nil
}

// FinishRestore makes the restored Operator ready: timers and plans are
// rebuilt from the restored state.
func (o *Operator) FinishRestore() {
	o.nextSweep = MinTime
	if o.kind != Session {
		o.planAligned()
		return
	}
	for i := range o.keys {
		if o.keys[i].live {
			o.keys[i].due = unregistered
			o.processSessions(int32(i))
		}
	}
}
