package edge

import (
	"bytes"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-io/runnel/state"
	"github.com/runnel-io/runnel/window"
)

// keyReader reads one record key's entries from a pipeline's stored
// state: the window operators' KeyStore (window.KeyStore), which reads
// evicted keys back. It sees the last committed checkpoint (or a later
// one), in a read transaction of its own, beside the writer's.
//
// A key's entries are in its key group's base, which is sorted by entry
// key (so the slices of one key are apart), and in the group's op records.
// Scanning them all cost ~200 µs a lookup at 10^6 keys, so keyReader keeps
// an index of each chunk it has read: per entry, the top 32 bits of its
// record key's hash and its offset, sorted (8 bytes an entry). An op
// record chunk is known by its bbolt key, which names the checkpoint that
// wrote it; a base chunk by its key and the CRC its record stores, which
// covers key and value. A known chunk is used without checking it again,
// and its pages are read only where the key may be; a new or rewritten one
// (a new op record, compaction) is checked and indexed at its first
// lookup. Indexes of chunks gone from the group are dropped at its next
// lookup.
type keyReader struct {
	st     *state.Store
	path   string
	name   string
	groups []readerGroup
}

type readerGroup struct {
	mu     sync.Mutex // lookups of a group's keys, from its worker; held with a read transaction
	pass   uint64
	chunks map[string]*chunkIndex // by bucket kind ('b', 'o') and bbolt key
}

// chunkIndex indexes one base or op record chunk.
type chunkIndex struct {
	crc  uint32
	pass uint64
	body int      // offset of the entries within the payload
	ents []uint64 // hash>>32 << 32 | offset in the body, sorted: puts and deletes (bases: entries)
	xs   []uint32 // op records: offsets of prefix deletions, ascending
}

func newKeyReader(st *state.Store, pipeline string) *keyReader {
	return &keyReader{st: st, path: st.Path(), name: pipeline, groups: make([]readerGroup, st.KeyGroups())}
}

// Load implements window.KeyStore.
func (r *keyReader) Load(hash uint64, key []byte, fn func(entryKey, value []byte) error) error {
	g := int(hash % uint64(len(r.groups)))
	rg := &r.groups[g]
	rg.mu.Lock()
	defer rg.mu.Unlock()
	if rg.chunks == nil {
		rg.chunks = map[string]*chunkIndex{}
	}
	rg.pass++
	h := hash >> 32
	var ents []keyEntry // the key's entries, pointing into the mapping
	err := r.st.View(func(tx *state.Tx) error {
		prefix := baseKey(nil, g, 0)[:2]
		for _, kind := range []byte{'b', 'o'} {
			name := baseBucket(r.name)
			if kind == 'o' {
				name = oplogBucket(r.name)
			}
			b, err := tx.Bucket(name)
			if err != nil {
				return err
			}
			err = b.ForEachRecord(prefix, func(k []byte, rec state.Record) error {
				if !bytes.HasPrefix(k, prefix) {
					return errStop
				}
				ci, err := rg.index(kind, k, rec)
				if err != nil {
					return err
				}
				if ci == nil {
					return errBadState(r.path, name, k, "malformed chunk")
				}
				ci.pass = rg.pass
				if len(ci.ents) == 0 && len(ci.xs) == 0 {
					return nil
				}
				lo, _ := slices.BinarySearch(ci.ents, h<<32)
				if len(ci.xs) == 0 && (lo == len(ci.ents) || ci.ents[lo]>>32 != h) {
					return nil // nothing of the key here: its pages are not read
				}
				body := rec.Unchecked()[ci.body:]
				x := 0 // prefix deletions applied
				for i := lo; ; i++ {
					off := -1
					if i < len(ci.ents) && ci.ents[i]>>32 == h {
						off = int(uint32(ci.ents[i]))
					}
					for ; x < len(ci.xs) && (off < 0 || int(ci.xs[x]) < off); x++ {
						p, _, _ := cutBytes(body[ci.xs[x]+1:])
						ents = slices.DeleteFunc(ents, func(e keyEntry) bool { return bytes.HasPrefix(e.k, p) })
					}
					if off < 0 {
						break
					}
					op := byte(opPut)
					if kind == 'o' {
						op, off = body[off], off+1
					}
					ek, rest, _ := cutBytes(body[off:])
					if !ofKey(ek, key) {
						continue
					}
					ents = slices.DeleteFunc(ents, func(e keyEntry) bool { return bytes.Equal(e.k, ek) })
					if op == opPut {
						ev, _, _ := cutBytes(rest)
						ents = append(ents, keyEntry{ek, ev})
					}
				}
				return nil
			})
			if err != nil && err != errStop {
				return err
			}
		}
		for _, e := range ents {
			if err := fn(e.k, e.v); err != nil {
				return err
			}
		}
		return nil
	})
	for k, ci := range rg.chunks {
		if ci.pass != rg.pass {
			delete(rg.chunks, k) // gone from the group (compacted)
		}
	}
	return err
}

// index returns the index of the chunk rec stored under k in the bucket
// of kind, checking and indexing it if it is new or changed; nil if the
// chunk is malformed. An op record chunk is known by its key, which no
// other chunk ever has (it names the checkpoint that wrote it), so a known
// one is not read at all; a base chunk's key is reused by compaction, so
// a base chunk is known by key and stored CRC.
func (rg *readerGroup) index(kind byte, k []byte, rec state.Record) (*chunkIndex, error) {
	var mk [16]byte
	id := append(append(mk[:0], kind), k...)
	ci := rg.chunks[string(id)]
	var crc uint32
	if kind == 'b' {
		crc = rec.CRC()
	}
	if ci != nil && ci.crc == crc {
		return ci, nil
	}
	payload, err := rec.Value()
	if err != nil {
		return nil, err
	}
	base := kind == 'b'
	format := byte(opRecordFormat)
	if base {
		format = baseFormat
	}
	_, _, body, why := readHeader(payload, format, base)
	if why != "" {
		return nil, nil
	}
	ci = &chunkIndex{crc: crc, body: len(payload) - len(body)}
	for off := 0; off < len(body); {
		start := off
		op := byte(opPut)
		if !base {
			op, off = body[off], off+1
			if op != opPut && op != opDelete && op != opDeletePrefix {
				return nil, nil
			}
		}
		ek, rest, ok := cutBytes(body[off:])
		if !ok {
			return nil, nil
		}
		if op == opPut {
			if _, rest, ok = cutBytes(rest); !ok {
				return nil, nil
			}
		}
		off = len(body) - len(rest)
		if op == opDeletePrefix {
			ci.xs = append(ci.xs, uint32(start))
			continue
		}
		if rk := window.RecordKey(ek); rk != nil {
			ci.ents = append(ci.ents, xxhash.Sum64(rk)>>32<<32|uint64(start))
		}
	}
	slices.Sort(ci.ents)
	rg.chunks[string(id)] = ci
	return ci, nil
}

type keyEntry struct{ k, v []byte }

// ofKey reports whether entry key ek belongs to record key key (a slice's
// partial, versions or sessions: window.RecordKey).
func ofKey(ek, key []byte) bool {
	rk := window.RecordKey(ek)
	return rk != nil && bytes.Equal(rk, key)
}
