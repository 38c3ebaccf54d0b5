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
// partials of pipelines and revisions now known and counts the others
// (restoreParked).
func (h *Hub) restore() error {
	return h.db.Update(func(tx *bolt.Tx) error {
		if err := h.initMeta(tx); err != nil {
			return err
		}
		cat := newCatalog()
		for _, p := range h.cfg.Pipelines {
			cat.addLocal(newPipe(len(cat.pipes), p, 0, h.keyGroups))
		}
		for i := range h.cfg.Revisions {
			r := &h.cfg.Revisions[i]
			pp, known, _ := cat.admit(r) // Validate refused what it would
			switch {
			case known:
				continue
			case pp == nil:
				pp = newPipe(len(cat.pipes), r.Pipeline, r.Class, h.keyGroups)
			}
			cat.add(r, pp)
			pp.addRevision(r)
		}
		h.cat.Store(cat)
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
		if err := h.restoreArchive(tx); err != nil {
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
	switch {
	case len(f) == 1 && f[0] == oldStoreFormat:
		// Every record of format 2 reads the same in 3; from now on the
		// store may hold what a hub reading 2 only would misread.
		if err := meta.Put(metaFormat, appendRecord(nil, metaFormat, []byte{storeFormat})); err != nil {
			return err
		}
		h.cfg.Logger.Info("hub: open: store format 2 upgraded to 3 (managed pipeline revisions)")
	case len(f) != 1 || f[0] != storeFormat:
		return fmt.Errorf("hub: store format %x, this hub reads %d and %d: %w", f, oldStoreFormat, storeFormat, ErrCorrupt)
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

// restorePipelines reads the pipeline records of the pipes the hub knows;
// those of pipelines no longer configured stay, unread.
func (h *Hub) restorePipelines(b *bolt.Bucket) error {
	for _, pp := range h.cat.Load().pipes {
		if err := h.loadPipeRecord(b, pp); err != nil {
			return err
		}
	}
	return nil
}

// loadPipeRecord reads pp's pipeline record, if there is one: its hub
// watermark and result count. It changes pp only; pp's resident windows
// then begin at pp.residentFrom.
func (h *Hub) loadPipeRecord(b *bolt.Bucket, pp *pipe) error {
	k := []byte(pp.store)
	v := b.Get(k)
	if v == nil {
		return nil
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
				"pipeline", pp.store, "watermark_ms", pp.wm, "bound_ms", bound, "max_future", h.cfg.MaxFuture)
			pp.wm, pp.dirty = bound, true
		}
		pp.expiredTo = h.expiryBound(pp, now)
		pp.residentFrom = max(subSat(pp.wm, h.resident), pp.expiredTo)
	}
	return nil
}

func (h *Hub) restoreEdges(b *bolt.Bucket) error {
	byStore := map[string]*pipe{}
	for _, pp := range h.cat.Load().pipes {
		byStore[pp.store] = pp
	}
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
			pp := byStore[w.pipeline]
			if pp == nil {
				continue
			}
			if held := pp.heldAt(w.wm, bound); held != w.wm {
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
	pipes := h.cat.Load().pipes
	for _, pp := range pipes {
		h.residentFrom = max(h.residentFrom, pp.residentFrom)
	}
	err := scanResident(b, h.kgOf, pipes, func(pp *pipe, kg uint32, k, v []byte) error {
		_, err := h.loadRecord(pp, kg, k, v)
		return err
	})
	if err != nil {
		return err
	}
	for _, pp := range pipes {
		pp.markUnemitted()
	}
	return nil
}

// scanResident calls fn for each record of pipes' resident windows (those
// ending at or after their residentFrom) in partials bucket b: per key
// group bucket, per pipe, one key range. kgOf checks a bucket's name.
func scanResident(b *bolt.Bucket, kgOf func([]byte) (uint32, error), pipes []*pipe, fn func(pp *pipe, kg uint32, k, v []byte) error) error {
	var seek []byte
	return b.ForEachBucket(func(name []byte) error {
		kg, err := kgOf(name)
		if err != nil {
			return err
		}
		c := b.Bucket(name).Cursor()
		for _, pp := range pipes {
			seek = appendTime(append(seek[:0], pp.prefix...), pp.residentFrom)
			for k, v := c.Seek(seek); k != nil && bytes.HasPrefix(k, pp.prefix); k, v = c.Next() {
				if err := fn(pp, kg, k, v); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// markUnemitted queues pp's windows never emitted for emission. An
// emitted one has no changes pending: a commit emits every changed window
// the watermark has passed, in the transaction that stores the change.
func (pp *pipe) markUnemitted() {
	for _, g := range pp.ends {
		for _, w := range g.wins {
			if w.version == 0 {
				pp.markPending(w)
			}
		}
	}
}
