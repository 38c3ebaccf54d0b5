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
func (h *Hub) reloadEvicted(b *runnelv1.Batch, applied uint64) error {
	var tx *bolt.Tx
	var err error
	var pp *pipe
	for _, p := range b.Partials {
		if p.Seq <= applied {
			continue
		}
		if pp == nil || pp.p.Name != p.Pipeline {
			if pp = h.pipes[p.Pipeline]; pp == nil {
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
	h.loadKey = appendWindowPrefix(h.loadKey[:0], pp.p.Name, start, end, key)
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
	bad := func(err error) error {
		return fmt.Errorf("hub: store: partials/%x key %x: %v: %w", kgBucket(kg), k, err, ErrCorrupt)
	}
	pk, err := parsePartialKey(k)
	if err != nil {
		return nil, bad(err)
	}
	payload, err := openRecord(k, v)
	if err != nil {
		return nil, err
	}
	kh := xxhash.Sum64(pk.key)
	if got := uint32(kh % uint64(h.keyGroups)); got != kg {
		return nil, bad(fmt.Errorf("key hashes to key group %d", got))
	}
	wh := windowHash(kh, pk.start, pk.end)
	w := pp.lookup(kg, wh, pk.key, pk.start, pk.end)
	if w == nil {
		w = pp.create(kg, wh, pk.key, pk.start, pk.end)
	}
	if pk.tag == tagWindow {
		if w.version, err = parseWindowValue(payload); err != nil {
			return nil, bad(err)
		}
		return w, nil
	}
	epoch, seq, version, state, err := parsePartialValue(payload)
	if err != nil {
		return nil, bad(err)
	}
	pp.set.Reset(pp.merged)
	if err := pp.set.MergeEncoded(pp.merged, state); err != nil {
		return nil, bad(err) // checked now so that emit can rely on it
	}
	e := h.edgeFor(string(pk.edge), 0)
	if w.partOf(e.idx) != nil {
		return nil, bad(fmt.Errorf("edge %q's partial loaded twice", pk.edge))
	}
	if epoch > MaxEpoch {
		epoch = 0 // see restoreEdges: any partial the edge sends replaces it
	}
	w.parts = append(w.parts, part{edge: e.idx, epoch: epoch, seq: seq, version: version, state: bytes.Clone(state)})
	return w, nil
}

// kgOf returns the key group named by a partials sub-bucket name.
func (h *Hub) kgOf(name []byte) (uint32, error) {
	if len(name) != 4 || int(binary.BigEndian.Uint32(name)) >= h.keyGroups {
		return 0, fmt.Errorf("hub: store: key group bucket %x of %d: %w", name, h.keyGroups, ErrCorrupt)
	}
	return binary.BigEndian.Uint32(name), nil
}
