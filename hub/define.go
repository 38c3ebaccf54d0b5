package hub

import (
	"bytes"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"
)

// Define makes a managed pipeline revision known while the hub runs (the
// fleet API calls it when an operator creates a revision). From its return
// on, Apply merges partials of r into r's class, and the partials and
// watermarks parked for r (sent before the hub knew it) are applied, in
// their (edge, epoch, seq) order, as if they had just arrived; the next
// commit writes them and deletes their parked records in one transaction,
// so they apply exactly once (after a crash before that commit, the next
// Open applies them again, if its Config.Revisions holds r).
//
// A revision already known in the same class is a no-op. One known in
// another class, one whose spec is not operators.Compatible with its
// class's, or a malformed one is refused with ErrBadRevision, and nothing
// changes. When r becomes the pipeline's latest revision and is of
// another class than the one before, the subscriptions of the pipeline
// are closed (resubscribing follows the new class).
//
// Define is safe to call while edges stream. It waits for a commit in
// progress, and holds Apply back while it reads the store for r's parked
// records (and, for a class new to this run, the class's resident
// windows).
func (h *Hub) Define(r Revision) error {
	if err := r.check(); err != nil {
		return err
	}
	h.commitMu.Lock()
	defer h.commitMu.Unlock()
	if h.dbClosed {
		return ErrClosed
	}
	// The catalog and the store change only under commitMu: what is read
	// here holds until the end.
	cat := h.cat.Load()
	pp, known, err := cat.admit(&r)
	if err != nil || known {
		return err
	}
	tx, err := h.db.Begin(false)
	if err != nil {
		return fmt.Errorf("hub: define: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // read only
	rk := revKey{r.Name, r.Revision}
	fresh := pp == nil
	var load *classLoad
	if fresh {
		// A class new to this run: it may have records from an earlier
		// one, which it takes over as Open would have.
		pp = newPipe(len(cat.pipes), r.Pipeline, r.Class, h.keyGroups)
		if load, err = h.readClass(tx, pp); err != nil {
			return err
		}
	}
	items, err := h.readParked(tx, rk)
	if err != nil {
		return err
	}

	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	if items, err = h.moreParked(items, rk); err != nil {
		h.mu.Unlock()
		return err
	}
	// Still reading only: the evicted windows the parked partials fall
	// in (a fresh pipe holds nothing yet: its windows before its resident
	// line are the evicted ones, those after it are in load).
	reloads, err := h.readEvictedFor(tx, pp, items)
	if err != nil {
		h.mu.Unlock()
		return err
	}

	// Nothing fails from here on.
	before := cat.resolve(r.Name, 0)
	next := cat.with(&r, pp)
	h.cat.Store(next)
	for _, e := range h.edges {
		e.grow(len(next.pipes))
	}
	pp.addRevision(&r)
	if fresh {
		h.takeClass(pp, load)
	}
	for i := range reloads {
		h.insertReloaded(pp, &reloads[i])
	}
	u := &unparked{pp: pp, edges: map[string]bool{}}
	h.unparkItems(u, pp, items)
	h.unparkWatermarks(pp, rk)
	h.forgetParked(rk, items)
	h.deleteParked(rk)
	h.mu.Unlock()

	h.cfg.Logger.Info("hub: defined a pipeline revision", "pipeline", r.Name, "revision", r.Revision, "class", r.Class,
		"new_class", fresh, "unparked", u.partials, "edges", len(u.edges), "dropped", u.dropped)
	if after := next.resolve(r.Name, 0); before != nil && after != before {
		h.dropSubsOf(r.Name, before.class)
	}
	return nil
}

// classLoad is what the store holds of a class Define adds: its resident
// windows' records, and the edges' watermarks of it.
type classLoad struct {
	records []storedRecord
	wms     []edgeWatermark
}

type edgeWatermark struct {
	edge string
	wm   int64
}

// readClass reads what the store holds of pp, a class not yet in the
// catalog: its pipeline record (into pp), the records of its resident
// windows and the edges' stored watermarks of it.
func (h *Hub) readClass(tx *bolt.Tx, pp *pipe) (*classLoad, error) {
	if err := h.loadPipeRecord(tx.Bucket(bucketPipelines), pp); err != nil {
		return nil, err
	}
	load := &classLoad{}
	err := scanResident(tx.Bucket(bucketPartials), h.kgOf, []*pipe{pp}, func(pp *pipe, kg uint32, k, v []byte) error {
		r, err := h.parseRecord(pp, kg, k, v)
		load.records = append(load.records, r)
		return err
	})
	if err != nil {
		return nil, err
	}
	err = tx.Bucket(bucketEdges).ForEach(func(k, v []byte) error {
		payload, err := openRecord(k, v)
		if err != nil {
			return err
		}
		rec, err := parseEdgeValue(payload)
		if err != nil {
			return fmt.Errorf("hub: store: edge %q: %v: %w", k, err, ErrCorrupt)
		}
		for _, w := range rec.watermarks {
			if w.pipeline == pp.store {
				load.wms = append(load.wms, edgeWatermark{string(k), w.wm})
			}
		}
		return nil
	})
	return load, err
}

// takeClass puts what readClass read into memory: pp is in the catalog
// now. Caller holds h.mu.
func (h *Hub) takeClass(pp *pipe, load *classLoad) {
	for i := range load.records {
		// Parsed, and each (window, edge) once: the store's keys are
		// unique, and the class had nothing in memory.
		_, _ = h.insertRecord(pp, &load.records[i])
	}
	pp.markUnemitted()
	bound := h.futureBound(h.cfg.Now())
	for _, w := range load.wms {
		if i, ok := h.edgeIdx[w.edge]; ok {
			e := h.edges[i]
			h.takeWatermark(e, pp.idx, pp.heldAt(w.wm, bound))
			h.touch(e)
		}
	}
	h.residentFrom = max(h.residentFrom, pp.residentFrom)
}

// readEvictedFor reads the records of the evicted windows of pp that
// parked items fall in: those ending before pp.residentFrom (and not
// expired) that are not in memory. Caller holds commitMu and h.mu (or pp
// is not in the catalog yet); it changes nothing.
func (h *Hub) readEvictedFor(tx *bolt.Tx, pp *pipe, items []parkedItem) ([]storedRecord, error) {
	var out []storedRecord
	seen := map[string]bool{}
	var prefix []byte
	for i := range items {
		p := &items[i].p
		if p.end >= pp.residentFrom || p.end < pp.expiredTo || len(p.key) > maxKeyLen || p.end <= p.start {
			continue
		}
		kh := xxhash.Sum64(p.key)
		kg := uint32(kh % uint64(h.keyGroups))
		if pp.lookup(kg, windowHash(kh, p.start, p.end), p.key, p.start, p.end) != nil {
			continue
		}
		prefix = appendWindowPrefix(prefix[:0], pp.store, p.start, p.end, p.key)
		if seen[string(prefix)] {
			continue
		}
		seen[string(prefix)] = true
		b := tx.Bucket(bucketPartials).Bucket(kgBucket(kg))
		if b == nil {
			continue
		}
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			r, err := h.parseRecord(pp, kg, k, v)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// insertReloaded puts a record of an evicted window back in memory, as a
// reload does. Caller holds h.mu.
func (h *Hub) insertReloaded(pp *pipe, r *storedRecord) {
	w, err := h.insertRecord(pp, r)
	if err != nil {
		return // each (window, edge) once: the store's keys are unique
	}
	if r.window {
		h.stats.WindowsReloaded++
		if w.version == 0 {
			pp.markPending(w)
		}
	}
}

// unparkItems applies the parked partials items to pp, in order, as
// restoreParked does at Open. Caller holds h.mu.
func (h *Hub) unparkItems(u *unparked, pp *pipe, items []parkedItem) {
	expired := subSat(h.cfg.Now().UnixMilli(), int64(h.cfg.Retention/time.Millisecond))
	for i := range items {
		it := &items[i]
		e := h.edgeFor(string(it.pk.edge), 0)
		if it.p.at < expired {
			h.stats.ParkedExpired++
			continue
		}
		if reason := h.unparkable(pp, &it.p); reason != "" {
			h.dropUnparkable(u, pp, e, &it.pk, reason)
			continue
		}
		h.unparkPartial(u, pp, e, &it.pk, &it.p)
	}
}

// unparkWatermarks takes the parked watermarks of rk as the edges'
// watermarks of pp. Caller holds h.mu.
func (h *Hub) unparkWatermarks(pp *pipe, rk revKey) {
	bound := h.futureBound(h.cfg.Now())
	for k, m := range h.parking.wms {
		if k.pipeline == rk.name && k.revision == rk.rev {
			h.unparkWatermark(pp, h.edges[k.edge], pp.heldAt(m.wm, bound))
		}
	}
}

// forgetParked releases what rk held parked (its partials items, its
// watermarks) from the edges' quotas and the parked counts: its records
// are deleted by the next commit. Caller holds h.mu.
func (h *Hub) forgetParked(rk revKey, items []parkedItem) {
	for i := range items {
		if j, ok := h.edgeIdx[string(items[i].pk.edge)]; ok {
			h.edges[j].parked -= items[i].size
		}
	}
	for k := range h.parking.wms {
		if k.pipeline == rk.name && k.revision == rk.rev {
			h.edges[k.edge].parked -= parkedWatermarkSize(h.edges[k.edge].id, rk.name, rk.rev)
			delete(h.parking.wms, k)
		}
	}
	h.parking.drop(rk.name, rk.rev)
}
