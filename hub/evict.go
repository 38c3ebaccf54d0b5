package hub

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Eviction and reload. Memory holds the windows that are still hot: not
// yet emitted, changed since their last emission, or ending within
// Config.Resident of the hub watermark. After each successful commit the
// others leave memory; the store already holds all of such a window (each
// edge's latest partial and the window record with its last version),
// because a window with nothing to write has had every change committed.
//
// pipe.residentFrom is the line: a window ending before it may exist in
// the store only. Apply looks a partial's window up in memory as always;
// only when it is missing and ends before the line does it read the
// window's records (one Seek in its key group bucket) and put the window
// back, as it was when evicted. The partial then applies as to any
// window, and the next commit emits the next version. Versions and the
// per-edge replace-if-newer rule are therefore those of a window that
// never left.
//
// The reads happen under Hub.mu in a read transaction, which sees the last
// committed state: an evicted window is never in a commit's writeSet (it
// was clean when evicted, and any change since reloaded it first).

// evict drops from memory pp's windows that are emitted, clean and end
// more than Resident before the hub watermark. Caller holds h.mu, after a
// commit succeeded.
func (h *Hub) evict(pp *pipe) {
	if !pp.hasWM {
		return
	}
	bound := subSat(pp.wm, h.resident)
	pp.residentFrom = max(pp.residentFrom, bound)
	h.residentFrom = max(h.residentFrom, pp.residentFrom)
	h.stats.WindowsEvicted += uint64(pp.sweep(bound, false))
}

// reloadEvicted loads from the store every evicted window that a new
// partial of b falls in, before Apply changes anything, so that a store
// error leaves the hub as it was. applied is the edge's applied sequence.
// Caller holds h.mu. It does not allocate when no window needs loading.
func (h *Hub) reloadEvicted(cat *catalog, b *runnelv1.Batch, applied uint64) error {
	var tx *bolt.Tx
	var err error
	var pp *pipe
	var rev uint32 // of the partial pp was looked up for
	for _, p := range b.Partials {
		if p.Seq <= applied {
			continue
		}
		if pp == nil || pp.name != p.Pipeline || rev != p.Revision {
			if pp, rev = cat.pipeOf(p.Pipeline, p.Revision), p.Revision; pp == nil {
				continue // parked
			}
		}
		if p.WindowEnd >= pp.residentFrom || p.WindowEnd < pp.expiredTo {
			continue
		}
		kh := xxhash.Sum64(p.Key)
		kg := uint32(kh % uint64(h.keyGroups))
		if pp.lookup(kg, windowHash(kh, p.WindowStart, p.WindowEnd), p.Key, p.WindowStart, p.WindowEnd) != nil {
			continue
		}
		if tx == nil {
			if tx, err = h.db.Begin(false); err != nil {
				return fmt.Errorf("hub: reload: %w", err)
			}
		}
		if err = h.reload(tx, pp, kg, p.Key, p.WindowStart, p.WindowEnd); err != nil {
			break
		}
	}
	if tx != nil {
		_ = tx.Rollback() // read only
	}
	return err
}

// reload puts the window (pp, key, start, end) of key group kg back in
// memory from the store, if the store has it.
func (h *Hub) reload(tx *bolt.Tx, pp *pipe, kg uint32, key []byte, start, end int64) error {
	b := tx.Bucket(bucketPartials).Bucket(kgBucket(kg))
	if b == nil {
		return nil
	}
	h.loadKey = appendWindowPrefix(h.loadKey[:0], pp.store, start, end, key)
	c := b.Cursor()
	var w *window
	for k, v := c.Seek(h.loadKey); k != nil && bytes.HasPrefix(k, h.loadKey); k, v = c.Next() {
		var err error
		if w, err = h.loadRecord(pp, kg, k, v); err != nil {
			return err
		}
	}
	if w != nil {
		if w.version == 0 {
			pp.markPending(w) // not expected: evicted windows were emitted
		}
		h.stats.WindowsReloaded++
	}
	return nil
}

// loadRecord adds one record of a key group bucket (bucket kg, under the
// pipeline pp's prefix) to its window in memory, creating the window, and
// returns the window. The record's bytes are copied.
func (h *Hub) loadRecord(pp *pipe, kg uint32, k, v []byte) (*window, error) {
	r, err := h.parseRecord(pp, kg, k, v)
	if err != nil {
		return nil, err
	}
	return h.insertRecord(pp, &r)
}

// storedRecord is one record of a key group bucket, checked and decoded:
// a window record (window, with its last emitted version), or an edge's
// partial. Its state points into the record's memory.
type storedRecord struct {
	kg         uint32
	kh         uint64 // xxhash of pk.key
	pk         partialKey
	window     bool
	version    uint32 // the window's last emitted, or the partial's
	epoch, seq uint64
	revision   uint32
	state      []byte
}

// parseRecord checks and decodes record (k, v) of key group bucket kg
// under pp's prefix, changing nothing. It uses pp.merged: the caller
// holds h.mu, or pp is not yet in the catalog.
func (h *Hub) parseRecord(pp *pipe, kg uint32, k, v []byte) (storedRecord, error) {
	r := storedRecord{kg: kg}
	bad := func(err error) error {
		return fmt.Errorf("hub: store: partials/%x key %x: %v: %w", kgBucket(kg), k, err, ErrCorrupt)
	}
	var err error
	if r.pk, err = parsePartialKey(k); err != nil {
		return r, bad(err)
	}
	payload, err := openRecord(k, v)
	if err != nil {
		return r, err
	}
	r.kh = xxhash.Sum64(r.pk.key)
	if got := uint32(r.kh % uint64(h.keyGroups)); got != kg {
		return r, bad(fmt.Errorf("key hashes to key group %d", got))
	}
	if r.pk.tag == tagWindow {
		r.window = true
		if r.version, err = parseWindowValue(payload); err != nil {
			return r, bad(err)
		}
		return r, nil
	}
	if r.epoch, r.seq, r.version, r.revision, r.state, err = parsePartialValue(payload, pp.class != 0); err != nil {
		return r, bad(err)
	}
	pp.set.Reset(pp.merged)
	if err := pp.set.MergeEncoded(pp.merged, r.state); err != nil {
		return r, bad(err) // checked now so that emit can rely on it
	}
	return r, nil
}

// insertRecord adds a parsed record to its window in memory, creating the
// window, and returns the window. Caller holds h.mu (or is restore).
func (h *Hub) insertRecord(pp *pipe, r *storedRecord) (*window, error) {
	pk := &r.pk
	wh := windowHash(r.kh, pk.start, pk.end)
	w := pp.lookup(r.kg, wh, pk.key, pk.start, pk.end)
	if w == nil {
		w = pp.create(r.kg, wh, pk.key, pk.start, pk.end)
	}
	if r.window {
		w.version = r.version
		return w, nil
	}
	e := h.edgeFor(string(pk.edge), 0)
	if w.partOf(e.idx) != nil {
		return nil, fmt.Errorf("hub: store: partials/%x: window of key %x: edge %q's partial loaded twice: %w",
			kgBucket(r.kg), pk.key, pk.edge, ErrCorrupt)
	}
	epoch := r.epoch
	if epoch > MaxEpoch {
		epoch = 0 // see restoreEdges: any partial the edge sends replaces it
	}
	w.parts = append(w.parts, part{edge: e.idx, epoch: epoch, seq: r.seq, version: r.version, revision: r.revision,
		state: bytes.Clone(r.state)})
	return w, nil
}

// kgOf returns the key group named by a partials sub-bucket name.
func (h *Hub) kgOf(name []byte) (uint32, error) {
	if len(name) != 4 || int(binary.BigEndian.Uint32(name)) >= h.keyGroups {
		return 0, fmt.Errorf("hub: store: key group bucket %x of %d: %w", name, h.keyGroups, ErrCorrupt)
	}
	return binary.BigEndian.Uint32(name), nil
}
