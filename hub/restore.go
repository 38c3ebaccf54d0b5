package hub

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// restore creates the buckets of a new store, checks the layout and key
// groups of an existing one, and loads edges, watermarks and the resident
// windows with their partials into memory; then it applies the parked
// partials of pipelines now configured and counts the others
// (restoreParked).
func (h *Hub) restore() error {
	return h.db.Update(func(tx *bolt.Tx) error {
		if err := h.initMeta(tx); err != nil {
			return err
		}
		for i, p := range h.cfg.Pipelines {
			pp := newPipe(i, p, h.keyGroups)
			h.pipes[p.Name] = pp
			h.pipeList = append(h.pipeList, pp)
		}
		for _, name := range [][]byte{bucketEdges, bucketPipelines, bucketPartials, bucketResults, bucketParked} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if err := h.restorePipelines(tx.Bucket(bucketPipelines)); err != nil {
			return err
		}
		if err := h.restoreEdges(tx.Bucket(bucketEdges)); err != nil {
			return err
		}
		if err := h.restorePartials(tx.Bucket(bucketPartials)); err != nil {
			return err
		}
		return h.restoreParked(tx)
	})
}

func (h *Hub) initMeta(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		kg := h.cfg.KeyGroups
		if kg == 0 {
			kg = defaultKeyGroups
		}
		var err error
		if meta, err = tx.CreateBucket(bucketMeta); err != nil {
			return err
		}
		if err := meta.Put(metaFormat, appendRecord(nil, metaFormat, []byte{storeFormat})); err != nil {
			return err
		}
		v := binary.BigEndian.AppendUint32(nil, uint32(kg))
		if err := meta.Put(metaKeyGroups, appendRecord(nil, metaKeyGroups, v)); err != nil {
			return err
		}
		h.keyGroups = kg
		return nil
	}
	f, err := openRecord(metaFormat, meta.Get(metaFormat))
	if err != nil {
		return err
	}
	if len(f) != 1 || f[0] != storeFormat {
		return fmt.Errorf("hub: store format %x, this hub reads %d: %w", f, storeFormat, ErrCorrupt)
	}
	v, err := openRecord(metaKeyGroups, meta.Get(metaKeyGroups))
	if err != nil {
		return err
	}
	if len(v) != 4 || binary.BigEndian.Uint32(v) == 0 {
		return fmt.Errorf("hub: store key groups %x: %w", v, ErrCorrupt)
	}
	stored := int(binary.BigEndian.Uint32(v))
	if h.cfg.KeyGroups != 0 && h.cfg.KeyGroups != stored {
		return fmt.Errorf("hub: the store has %d key groups, the config asks for %d; the count is fixed once the store exists",
			stored, h.cfg.KeyGroups)
	}
	h.keyGroups = stored
	return nil
}

func (h *Hub) restorePipelines(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		pp := h.pipes[string(k)]
		if pp == nil {
			return nil // a pipeline no longer configured: its results stay queryable by nobody
		}
		payload, err := openRecord(k, v)
		if err != nil {
			return err
		}
		if pp.hasWM, pp.wm, pp.results, err = parsePipelineValue(payload); err != nil {
			return fmt.Errorf("hub: store: pipeline %q: %v: %w", k, err, ErrCorrupt)
		}
		if pp.hasWM {
			now := h.cfg.Now()
			if bound := h.futureBound(now); pp.wm > bound {
				// Written by a hub that did not bound watermarks by its clock.
				h.cfg.Logger.Warn("hub: open: the stored hub watermark is ahead of the clock; held at the bound",
					"pipeline", pp.p.Name, "watermark_ms", pp.wm, "bound_ms", bound, "max_future", h.cfg.MaxFuture)
				pp.wm, pp.dirty = bound, true
			}
			pp.expiredTo = h.expiryBound(pp, now)
		}
		return nil
	})
}

func (h *Hub) restoreEdges(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		payload, err := openRecord(k, v)
		if err != nil {
			return err
		}
		r, err := parseEdgeValue(payload)
		if err != nil {
			return fmt.Errorf("hub: store: edge %q: %v: %w", k, err, ErrCorrupt)
		}
		e := h.edgeFor(string(k), r.epoch)
		e.applied, e.acked, e.ackedEpoch = r.acked, r.acked, r.epoch
		if r.epoch > MaxEpoch {
			// Adopted by a hub that took any epoch. Held as none, the
			// edge's next Hello is adopted; its partials stay, and the
			// ones it resends under that epoch replace them (loadRecord
			// reads such a partial's epoch as 0).
			h.cfg.Logger.Warn("hub: open: an edge's stored epoch is beyond any an edge reaches; it holds none now",
				"edge", string(k), "epoch", r.epoch, "max_epoch", uint64(MaxEpoch))
			e.epoch, e.applied, e.acked, e.ackedEpoch = 0, 0, 0, 0
		}
		e.lastSeen = time.Unix(0, r.lastSeen)
		e.dirty = r.epoch > MaxEpoch // rewritten at the next commit
		bound := h.futureBound(h.cfg.Now())
		for _, w := range r.watermarks {
			pp := h.pipes[w.pipeline]
			if pp == nil {
				continue
			}
			if w.wm > bound {
				h.cfg.Logger.Warn("hub: open: an edge's stored watermark is ahead of the clock; held at the bound",
					"edge", e.id, "pipeline", w.pipeline, "watermark_ms", w.wm, "bound_ms", bound, "max_future", h.cfg.MaxFuture)
				w.wm, e.dirty = bound, true
			}
			e.wm[pp.idx], e.hasWM[pp.idx] = w.wm, true
		}
		return nil
	})
}

// restorePartials loads the resident windows: per key group bucket and
// pipeline, the key range of windows ending at or after the pipeline's
// residentFrom (its hub watermark less Resident; everything without a
// watermark). Older windows stay in the store until a late partial reloads
// them or expiry deletes them; their records are checked then.
func (h *Hub) restorePartials(b *bolt.Bucket) error {
	for _, pp := range h.pipeList {
		if pp.hasWM {
			pp.residentFrom = max(subSat(pp.wm, h.resident), pp.expiredTo)
			h.residentFrom = max(h.residentFrom, pp.residentFrom)
		}
	}
	var seek []byte
	err := b.ForEachBucket(func(name []byte) error {
		kg, err := h.kgOf(name)
		if err != nil {
			return err
		}
		c := b.Bucket(name).Cursor()
		for _, pp := range h.pipeList {
			seek = appendTime(append(seek[:0], pp.prefix...), pp.residentFrom)
			for k, v := c.Seek(seek); k != nil && bytes.HasPrefix(k, pp.prefix); k, v = c.Next() {
				if _, err := h.loadRecord(pp, kg, k, v); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A window never emitted waits for the watermark. An emitted one has
	// no changes pending: a commit emits every changed window the
	// watermark has passed, in the transaction that stores the change.
	for _, pp := range h.pipeList {
		for _, g := range pp.ends {
			for _, w := range g.wins {
				if w.version == 0 {
					pp.markPending(w)
				}
			}
		}
	}
	return nil
}
