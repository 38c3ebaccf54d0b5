package hub

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The group commit. Under Hub.mu, prepare advances the hub watermarks, emits
// the windows they passed, expires old windows and copies everything that
// changed into a writeSet. The bbolt transaction then runs without mu, so
// Apply keeps going while the disk works. Only after the transaction
// commits do the edges' acked sequences advance, the emitted results
// reach subscribers and windows that are durable and cold leave memory
// (evict.go): what an ack promises is on disk.
//
// A failed transaction keeps its writeSet; the next commit writes it again,
// followed by what changed since, so nothing is lost and nothing is acked
// before it is durable.

// opKind says what a write does.
type opKind uint8

const (
	opPutPartial       opKind = iota // partials/<kg>: k -> v
	opPutResult                      // results/<pipeline>: k -> v
	opExpire                         // partials/*, results/<pipeline>: delete the pipeline's windows ending before n
	opPutEdge                        // edges: k -> v
	opPutPipeline                    // pipelines/<pipeline>: k -> v, less the results opExpire deleted
	opPutParked                      // parked: k -> v
	opSweepParked                    // parked: delete the records parked before n
	opDeleteParked                   // parked: delete the records under prefix k (a pipeline now configured)
	opPutArchive                     // archive/log: k -> v
	opPutArchiveSchema               // archive/schemas: k -> v
)

// op is one write; its key and value are ranges of writeSet.buf, which may
// grow (and move) while ops are added.
type op struct {
	kind   opKind
	kg     uint32
	pipe   int32
	k0, k1 int
	v0, v1 int
	n      int64
	at     int // position before sorting
}

// bucketOrder sorts ops by the bucket they write; range deletes after the
// puts they may cover, pipeline records after the range deletes whose
// result count they take.
func (o *op) bucketOrder() uint64 {
	switch o.kind {
	case opPutPartial:
		return 1<<32 | uint64(o.kg)
	case opPutResult:
		return 2<<32 | uint64(o.pipe)
	case opExpire:
		return 3<<32 | uint64(o.pipe)
	case opPutEdge:
		return 4 << 32
	case opPutPipeline:
		return 5 << 32
	case opPutParked:
		return 6 << 32
	case opSweepParked:
		return 7 << 32 // after the puts, which it then counts as left
	case opPutArchive:
		return 9 << 32
	case opPutArchiveSchema:
		return 10 << 32
	}
	return 8 << 32 // opDeleteParked
}

// ackTo is an edge's durable position once the writeSet commits.
type ackTo struct {
	e          *edge
	epoch, seq uint64
}

type writeSet struct {
	// cat is the catalog the ops were prepared with: the pipes they name
	// by index (Define only adds pipes, under commitMu).
	cat     *catalog
	buf     []byte
	ops     []op
	acks    []ackTo
	results []Result
	scratch []byte
	// expired is what the transaction's opExpire found, per pipe.idx;
	// write fills it afresh on every attempt.
	expired []expired
	// sweeping: ops has an opSweepParked, whose outcome is in swept
	// (filled afresh on every attempt).
	sweeping bool
	swept    sweepResult
	// archLast is the highest archive log sequence among ops (0: none).
	archLast uint64
}

// expired is what one transaction's expiry did to a pipeline's store.
type expired struct {
	ran        bool
	results    uint64 // result versions deleted
	storedFrom int64  // the first window end left in the partials buckets
}

func (ws *writeSet) empty() bool { return len(ws.ops) == 0 }

func (ws *writeSet) reset() {
	ws.buf = ws.buf[:0]
	ws.ops = ws.ops[:0]
	ws.acks = ws.acks[:0]
	clear(ws.results) // drop references for the GC
	ws.results = ws.results[:0]
	ws.sweeping = false
	ws.archLast = 0
	ws.swept.ran = false
	clear(ws.swept.swept)
	ws.swept.swept = ws.swept.swept[:0]
}

// add appends an op whose key is ws.buf[k0:] up to the value, which the
// caller appended after the key: key is buf[k0:k1], value buf[k1:].
func (ws *writeSet) add(kind opKind, kg uint32, pipe int32, k0, k1 int) {
	ws.ops = append(ws.ops, op{kind: kind, kg: kg, pipe: pipe, k0: k0, k1: k1, v0: k1, v1: len(ws.buf)})
}

// addRecord appends key and the record frame around payload as one op.
func (ws *writeSet) addRecord(kind opKind, kg uint32, pipe int32, key, payload []byte) {
	k0 := len(ws.buf)
	ws.buf = append(ws.buf, key...)
	k1 := len(ws.buf)
	ws.buf = appendRecord(ws.buf, key, payload)
	ws.add(kind, kg, pipe, k0, k1)
}

// Commit runs a group commit now, as the commit loop does every
// CommitInterval: it makes everything applied so far durable, advances the
// acked sequences and delivers the emitted results. Tests and shutdown use
// it; the server need not.
func (h *Hub) Commit() error {
	h.commitMu.Lock()
	defer h.commitMu.Unlock()
	if h.dbClosed {
		return ErrClosed
	}
	return h.commitLocked()
}

func (h *Hub) commitLocked() error {
	began := time.Now()
	h.mu.Lock()
	h.prepare(&h.ws)
	ws := &h.ws
	if ws.empty() {
		h.mu.Unlock()
		return nil
	}
	h.mu.Unlock()

	err := h.db.Update(func(tx *bolt.Tx) error { return h.write(tx, ws) })

	h.mu.Lock()
	if err != nil {
		h.stats.CommitErr = err.Error()
		h.mu.Unlock()
		h.cfg.Logger.Error("hub: commit failed; it is retried with the next", "err", err)
		return err
	}
	for _, a := range ws.acks {
		a.e.ackedEpoch, a.e.acked = a.epoch, a.seq
	}
	for i, x := range ws.expired {
		if x.ran {
			pp := ws.cat.pipes[i]
			pp.storedFrom = x.storedFrom
			pp.results -= x.results
		}
	}
	for _, pp := range h.cat.Load().pipes {
		h.evict(pp)
	}
	if ws.swept.ran {
		h.finishSweep(&ws.swept)
	}
	if ws.archLast > 0 {
		h.arch.last.Store(ws.archLast)
		for _, pp := range ws.cat.pipes {
			pp.archLogged = pp.archLogged || pp.archSchema != nil
		}
	}
	archLogged := ws.archLast > 0
	h.stats.CommitErr = ""
	h.stats.Commits++
	h.stats.Results += uint64(len(ws.results))
	h.stats.CommitNanos = int64(time.Since(began))
	close(h.next)
	h.next = make(chan struct{})
	h.mu.Unlock()

	h.publish(ws.results)
	ws.reset()
	if archLogged && h.cfg.ArchiveNotify != nil {
		h.cfg.ArchiveNotify(h.arch.pending())
	}
	return nil
}

// prepare adds everything that changed to ws. Caller holds h.mu.
func (h *Hub) prepare(ws *writeSet) {
	now := h.cfg.Now()
	ws.cat = h.cat.Load()
	pipes := ws.cat.pipes
	for _, pp := range pipes {
		h.advanceWatermark(pp, now)
	}

	// Partials applied since the last commit.
	for _, w := range h.dirty {
		w.dirty = false
		for i := range w.parts {
			pt := &w.parts[i]
			if !pt.dirty {
				continue
			}
			pt.dirty = false
			e := h.edges[pt.edge]
			ws.scratch = h.partialKey(ws.scratch[:0], w, tagPartial, e.id)
			k := len(ws.scratch)
			ws.scratch = appendPartialValue(ws.scratch, pt.epoch, pt.seq, pt.version, w.pipe.class != 0, pt.revision, pt.state)
			ws.addRecord(opPutPartial, w.kg, 0, ws.scratch[:k], ws.scratch[k:])
		}
		w.pipe.storedFrom = min(w.pipe.storedFrom, w.end)
	}
	clear(h.dirty)
	h.dirty = h.dirty[:0]

	emitted := now.UnixMilli()
	for _, pp := range pipes {
		if !pp.hasWM {
			continue
		}
		for end, g := range pp.pending {
			if end > pp.wm {
				continue
			}
			for _, w := range g.pending {
				h.emit(ws, pp, w, emitted)
			}
			clear(g.pending)
			g.pending = g.pending[:0]
			delete(pp.pending, end)
		}
		h.expire(ws, pp, now)
	}

	h.prepareParked(ws, emitted)

	for _, e := range h.dirtyEdges {
		if !e.dirty {
			continue // restored clean after it was touched, or listed twice
		}
		e.dirty = false
		rec := edgeRecord{epoch: e.epoch, acked: e.applied, lastSeen: e.lastSeen.UnixNano()}
		for i, pp := range pipes {
			if e.hasWM[i] {
				rec.watermarks = append(rec.watermarks, pipelineWatermark{pp.store, e.wm[i]})
			}
		}
		ws.scratch = appendEdgeValue(ws.scratch[:0], &rec)
		ws.addRecord(opPutEdge, 0, 0, []byte(e.id), ws.scratch)
		ws.acks = append(ws.acks, ackTo{e: e, epoch: e.epoch, seq: e.applied})
	}
	clear(h.dirtyEdges)
	h.dirtyEdges = h.dirtyEdges[:0]
	for _, pp := range pipes {
		if !pp.dirty {
			continue
		}
		pp.dirty = false
		ws.scratch = appendPipelineValue(ws.scratch[:0], pp.hasWM, pp.wm, pp.results)
		ws.addRecord(opPutPipeline, 0, int32(pp.idx), []byte(pp.store), ws.scratch)
	}
}

// advanceWatermark sets pp's hub watermark to the minimum over the live
// edges that reported one, unless that would move it backwards. When none
// of the edges that reported one is live any more, it goes to the highest
// any of them reported: each edge's windows were complete up to its own
// watermark, and the others' later partials become new versions. It never
// goes past the hub's clock plus MaxFuture.
//
// The edges are looked at again only when an edge's watermark was raised
// (Hub.wmGen) or one of the live edges it waits for stops being live: a
// commit of a fleet between two windows' batches does not visit 10,000
// edges 50 times a second. An edge heard from again after EdgeTimeout
// needs no new look: it can only lower the lowest of the live edges'
// watermarks, which the pipe's watermark, never moving back, ignores.
func (h *Hub) advanceWatermark(pp *pipe, now time.Time) {
	sc := &pp.wmScan
	if sc.gen != h.wmGen || !now.Before(sc.until) {
		*sc = h.scanWatermarks(pp.idx, now)
	}
	if !sc.any {
		return
	}
	lo := sc.lo
	if !sc.live {
		lo = sc.hi
	}
	// Edges' watermarks are held at the bound of their time; this bounds
	// the highest by the clock now as well.
	lo = min(lo, h.futureBound(now))
	if !pp.hasWM || lo > pp.wm {
		pp.wm, pp.hasWM = lo, true
		pp.dirty = true
	}
}

// wmScan is what advanceWatermark found in the edges' watermarks of one
// pipe: the lowest of the live edges' (lo, when live), the highest of all
// (hi, when any); valid while Hub.wmGen is gen and until until, when the
// first of the live edges stops being live.
type wmScan struct {
	gen       uint64
	until     time.Time
	lo, hi    int64
	live, any bool
}

// scanWatermarks looks at every edge's watermark of pipe i. Caller holds
// h.mu.
func (h *Hub) scanWatermarks(i int, now time.Time) wmScan {
	sc := wmScan{gen: h.wmGen, lo: math.MaxInt64, hi: math.MinInt64, until: now.Add(h.cfg.EdgeTimeout)}
	for _, e := range h.edges {
		if !e.hasWM[i] {
			continue
		}
		w := e.wm[i]
		sc.hi, sc.any = max(sc.hi, w), true
		if h.live(e, now) {
			sc.lo, sc.live = min(sc.lo, w), true
			if end := h.liveUntil(e); end.Before(sc.until) {
				sc.until = end
			}
		}
	}
	return sc
}

// liveUntil is when e stops being live unless heard from before.
func (h *Hub) liveUntil(e *edge) time.Time {
	seen := e.lastSeen
	if h.opened.After(seen) {
		seen = h.opened
	}
	return seen.Add(h.cfg.EdgeTimeout).Add(time.Nanosecond)
}

// live reports whether e was heard from within EdgeTimeout. The hub's own
// start counts as hearing from every edge it knows, so that a hub that was
// down for longer than EdgeTimeout waits for its edges to reconnect before
// it stops waiting for their watermarks.
func (h *Hub) live(e *edge, now time.Time) bool {
	seen := e.lastSeen
	if h.opened.After(seen) {
		seen = h.opened
	}
	return now.Sub(seen) <= h.cfg.EdgeTimeout
}

// emit merges w's parts into its next version.
func (h *Hub) emit(ws *writeSet, pp *pipe, w *window, emitted int64) {
	w.pending = false
	pp.set.Reset(pp.merged)
	managed := pp.class != 0
	pp.revs = pp.revs[:0]
	for i := range w.parts {
		if err := pp.set.MergeEncoded(pp.merged, w.parts[i].state); err != nil {
			// Validated on the way in, or checked when restored.
			panic(fmt.Sprintf("hub: merge of a validated partial: %v", err))
		}
		if managed {
			if j, found := slices.BinarySearch(pp.revs, w.parts[i].revision); !found {
				pp.revs = slices.Insert(pp.revs, j, w.parts[i].revision)
			}
		}
	}
	var revs []uint32
	if managed {
		revs = slices.Clone(pp.revs)
	}
	w.version++
	pp.results++
	pp.dirty = true
	pp.storedFrom = min(pp.storedFrom, w.end)

	var ver [4]byte
	ws.scratch = h.partialKey(ws.scratch[:0], w, tagWindow, "")
	ws.addRecord(opPutPartial, w.kg, 0, ws.scratch, appendVersion(ver[:0], w.version))

	ws.scratch = appendResultKey(ws.scratch[:0], w.start, w.end, w.key, w.version)
	k := len(ws.scratch)
	ws.scratch = appendResultValue(ws.scratch, uint32(len(w.parts)), emitted, managed, revs, nil)
	s := len(ws.scratch)
	ws.scratch = pp.set.AppendEncode(ws.scratch, pp.merged)
	ws.addRecord(opPutResult, 0, int32(pp.idx), ws.scratch[:k], ws.scratch[k:])

	ws.results = append(ws.results, Result{
		Pipeline:  pp.name,
		Key:       w.key,
		Start:     w.start,
		End:       w.end,
		Version:   w.version,
		State:     bytes.Clone(ws.scratch[s:]),
		Edges:     uint32(len(w.parts)),
		Emitted:   emitted,
		Class:     pp.class,
		Revisions: revs,
	})
	h.logResult(ws, pp, w, revs, emitted)
}

func appendVersion(dst []byte, v uint32) []byte {
	return append(dst, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// expire deletes the windows of pp that ended more than Retention before
// the hub watermark or the hub's clock, whichever is earlier, with their
// partials and results: from memory here, from the store by key ranges in
// the transaction (opExpire), which also reaches the evicted ones. The
// ranges are only walked when the store may hold such a window
// (storedFrom), about once per window length.
func (h *Hub) expire(ws *writeSet, pp *pipe, now time.Time) {
	bound := h.expiryBound(pp, now)
	if bound <= pp.expiredTo {
		return
	}
	pp.expiredTo = bound
	pp.sweep(bound, true)
	if bound > pp.storedFrom {
		ws.ops = append(ws.ops, op{kind: opExpire, pipe: int32(pp.idx), n: bound})
		pp.dirty = true // the pipeline record follows with the result count
	}
}

// expiryBound is the end before which pp's windows are deleted at hub
// clock now: min(hub watermark, now) - Retention. Bounding by the clock
// means a watermark far ahead of it deletes nothing recent; bounding by
// the watermark, that one far behind deletes nothing not yet emitted.
func (h *Hub) expiryBound(pp *pipe, now time.Time) int64 {
	return subSat(min(pp.wm, now.UnixMilli()), int64(h.cfg.Retention/time.Millisecond))
}

// partialKey appends the partials-bucket key of w's window record (tag
// tagWindow) or of edge's partial (tagPartial).
func (h *Hub) partialKey(dst []byte, w *window, tag byte, edgeID string) []byte {
	dst = appendWindowPrefix(dst, w.pipe.store, w.start, w.end, w.key)
	dst = append(dst, tag)
	return append(dst, edgeID...)
}

// write applies ws in one transaction, in order.
func (h *Hub) write(tx *bolt.Tx, ws *writeSet) error {
	partials := tx.Bucket(bucketPartials)
	results := tx.Bucket(bucketResults)
	edges := tx.Bucket(bucketEdges)
	pipeRecs := tx.Bucket(bucketPipelines)
	parked := tx.Bucket(bucketParked)
	arch := tx.Bucket(bucketArchive)
	kgs := make([]*bolt.Bucket, h.keyGroups)
	kgBucketOf := func(kg uint32) (*bolt.Bucket, error) {
		if kgs[kg] == nil {
			b, err := partials.CreateBucketIfNotExists(kgBucket(kg))
			if err != nil {
				return nil, err
			}
			kgs[kg] = b
		}
		return kgs[kg], nil
	}
	pipes := ws.cat.pipes
	res := make([]*bolt.Bucket, len(pipes))
	resultsOf := func(i int32) (*bolt.Bucket, error) {
		if res[i] == nil {
			b, err := results.CreateBucketIfNotExists([]byte(pipes[i].store))
			if err != nil {
				return nil, err
			}
			res[i] = b
		}
		return res[i], nil
	}
	// Sorted by bucket and key, bbolt's puts walk its pages in order.
	// Writes of one key keep their order (ties go by position: a stable
	// sort, without the cost of one); range deletes go last (they only
	// cover windows no later put can touch).
	for i := range ws.ops {
		ws.ops[i].at = i
	}
	slices.SortFunc(ws.ops, func(a, b op) int {
		if c := cmp.Compare(a.bucketOrder(), b.bucketOrder()); c != 0 {
			return c
		}
		if c := bytes.Compare(ws.buf[a.k0:a.k1], ws.buf[b.k0:b.k1]); c != 0 {
			return c
		}
		return cmp.Compare(a.at, b.at)
	})
	if len(ws.expired) < len(pipes) {
		ws.expired = make([]expired, len(pipes))
	}
	clear(ws.expired)
	ws.swept.ran = false
	for _, o := range ws.ops {
		k, v := ws.buf[o.k0:o.k1], ws.buf[o.v0:o.v1]
		var err error
		switch o.kind {
		case opPutPartial:
			var b *bolt.Bucket
			if b, err = kgBucketOf(o.kg); err == nil {
				err = b.Put(k, v)
			}
		case opPutResult:
			var b *bolt.Bucket
			if b, err = resultsOf(o.pipe); err == nil {
				err = b.Put(k, v)
			}
		case opExpire:
			var b *bolt.Bucket
			if b, err = resultsOf(o.pipe); err == nil {
				err = h.expireStored(partials, b, pipes[o.pipe], o.n, &ws.expired[o.pipe], &ws.scratch)
			}
		case opPutEdge:
			err = edges.Put(k, v)
		case opPutPipeline:
			if x := ws.expired[o.pipe]; x.results > 0 {
				v, err = lessResults(k, v, x.results, &ws.scratch)
			}
			if err == nil {
				err = pipeRecs.Put(k, v)
			}
		case opPutParked:
			err = parked.Put(k, v)
		case opSweepParked:
			err = h.sweepParked(ws.cat, parked, o.n, &ws.swept)
		case opDeleteParked:
			err = deletePrefix(parked, k, &ws.scratch)
		case opPutArchive:
			err = arch.Bucket(archiveLog).Put(k, v)
		case opPutArchiveSchema:
			err = arch.Bucket(archiveSchema).Put(k, v)
		}
		if err != nil {
			return fmt.Errorf("hub: commit: %w", err)
		}
	}
	if ws.archLast > 0 {
		last := binary.BigEndian.AppendUint64(nil, ws.archLast)
		if err := arch.Put(archiveLast, appendRecord(nil, archiveLast, last)); err != nil {
			return fmt.Errorf("hub: commit: %w", err)
		}
	}
	return nil
}

// expireStored deletes the records of pipe pp's windows ending before
// bound from every key group bucket, and their results, noting in x what
// it deleted and the first window end left. scratch is a reusable buffer.
func (h *Hub) expireStored(partials, results *bolt.Bucket, pp *pipe, bound int64, x *expired, scratch *[]byte) error {
	prefix := pp.prefix
	x.ran = true
	x.storedFrom = math.MaxInt64
	var name [4]byte
	for kg := range uint32(h.keyGroups) {
		binary.BigEndian.PutUint32(name[:], kg)
		b := partials.Bucket(name[:])
		if b == nil {
			continue
		}
		first, err := deleteWindowsBefore(b, prefix, bound, scratch)
		if err != nil {
			return fmt.Errorf("partials/%x: %w", name, err)
		}
		x.storedFrom = min(x.storedFrom, first)
	}
	n, err := deleteResultsBefore(results, bound, scratch)
	x.results += n
	return err
}

// deleteWindowsBefore deletes the records under prefix (one pipeline's, in
// one key group bucket) of windows ending before bound: the keys from
// prefix up to prefix|bound. It returns the end of the first window left,
// math.MaxInt64 when none is.
func deleteWindowsBefore(b *bolt.Bucket, prefix []byte, bound int64, scratch *[]byte) (int64, error) {
	c := b.Cursor()
	k, _ := c.Seek(prefix)
	for k != nil && bytes.HasPrefix(k, prefix) {
		if len(k) < len(prefix)+8 {
			return 0, fmt.Errorf("short key %x: %w", k, ErrCorrupt)
		}
		if end := readTime(k[len(prefix):]); end >= bound {
			return end, nil
		}
		// After Delete the cursor may sit on the next item or past it (and
		// k's memory may be reused); Seek to a copy of the deleted key
		// finds the right next one either way.
		*scratch = append((*scratch)[:0], k...)
		if err := c.Delete(); err != nil {
			return 0, err
		}
		k, _ = c.Seek(*scratch)
	}
	return math.MaxInt64, nil
}

// deletePrefix deletes the keys of b that begin with prefix.
func deletePrefix(b *bolt.Bucket, prefix []byte, scratch *[]byte) error {
	*scratch = append((*scratch)[:0], prefix...)
	c := b.Cursor()
	for k, _ := c.Seek(*scratch); k != nil && bytes.HasPrefix(k, *scratch); k, _ = c.Seek(*scratch) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// lessResults re-encodes the pipeline record v under k with n fewer result
// versions stored, into scratch.
func lessResults(k, v []byte, n uint64, scratch *[]byte) ([]byte, error) {
	payload, err := openRecord(k, v)
	if err != nil {
		return nil, err
	}
	hasWM, wm, results, err := parsePipelineValue(payload)
	if err != nil {
		return nil, err
	}
	*scratch = appendPipelineValue((*scratch)[:0], hasWM, wm, results-n)
	return appendRecord(nil, k, *scratch), nil
}

// deleteResultsBefore deletes the results of windows ending before bound
// and returns how many it deleted. Such a window starts before bound too,
// so the scan stops at the first start at or past it.
func deleteResultsBefore(b *bolt.Bucket, bound int64, scratch *[]byte) (uint64, error) {
	var n uint64
	c := b.Cursor()
	for k, _ := c.First(); k != nil; {
		if len(k) < 16 || readTime(k) >= bound {
			return n, nil
		}
		if readTime(k[8:]) < bound {
			*scratch = append((*scratch)[:0], k...)
			if err := c.Delete(); err != nil {
				return n, err
			}
			n++
			k, _ = c.Seek(*scratch)
			continue
		}
		k, _ = c.Next()
	}
	return n, nil
}
