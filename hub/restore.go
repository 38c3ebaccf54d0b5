package hub

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"
)

// restore creates the buckets of a new store, checks the layout and key
// groups of an existing one, and loads edges, watermarks, windows and
// partials into memory.
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
		for _, name := range [][]byte{bucketEdges, bucketPipelines, bucketPartials, bucketResults} {
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
		return h.restorePartials(tx.Bucket(bucketPartials))
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
			pp.expiredTo = subSat(pp.wm, int64(h.cfg.Retention/time.Millisecond))
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
		e.lastSeen = time.Unix(0, r.lastSeen)
		e.dirty = false
		for _, w := range r.watermarks {
			if pp := h.pipes[w.pipeline]; pp != nil {
				e.wm[pp.idx], e.hasWM[pp.idx] = w.wm, true
			}
		}
		return nil
	})
}

func (h *Hub) restorePartials(b *bolt.Bucket) error {
	err := b.ForEachBucket(func(name []byte) error {
		if len(name) != 4 || int(binary.BigEndian.Uint32(name)) >= h.keyGroups {
			return fmt.Errorf("hub: store: key group bucket %x of %d: %w", name, h.keyGroups, ErrCorrupt)
		}
		return b.Bucket(name).ForEach(func(k, v []byte) error {
			bad := func(err error) error {
				return fmt.Errorf("hub: store: partials/%x key %x: %v: %w", name, k, err, ErrCorrupt)
			}
			pk, err := parsePartialKey(k)
			if err != nil {
				return bad(err)
			}
			pp := h.pipes[string(pk.pipeline)]
			if pp == nil {
				return nil // not configured any more; kept on disk
			}
			payload, err := openRecord(k, v)
			if err != nil {
				return err
			}
			kh := xxhash.Sum64(pk.key)
			kg := uint32(kh % uint64(h.keyGroups))
			if kg != binary.BigEndian.Uint32(name) {
				return bad(fmt.Errorf("key hashes to key group %d", kg))
			}
			wh := windowHash(kh, pk.start, pk.end)
			w := pp.lookup(kg, wh, pk.key, pk.start, pk.end)
			if w == nil {
				w = pp.create(kg, wh, pk.key, pk.start, pk.end)
			}
			if pk.tag == tagWindow {
				if w.version, err = parseWindowValue(payload); err != nil {
					return bad(err)
				}
				return nil
			}
			epoch, seq, version, state, err := parsePartialValue(payload)
			if err != nil {
				return bad(err)
			}
			if err := pp.set.MergeEncoded(pp.merged, state); err != nil {
				return bad(err) // checked now so that emit can rely on it
			}
			e := h.edgeFor(string(pk.edge), 0)
			w.parts = append(w.parts, part{edge: e.idx, epoch: epoch, seq: seq, version: version, state: append([]byte(nil), state...)})
			return nil
		})
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
