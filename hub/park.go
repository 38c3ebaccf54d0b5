package hub

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/window/aggregate"
)

// Parking: partials and watermarks of pipelines and revisions the hub
// does not know.
//
// Apply accepts a batch whatever pipelines and revisions it names. A
// partial of a (pipeline, revision) the hub does not know (revision 0:
// a pipeline not in Config.Pipelines; another: a managed revision not
// defined) is parked: encoded into a record of the parked bucket
// (store.go), written by the same commit as the edge's applied sequence,
// so that a crash loses both or neither. An edge's watermark is parked
// too, the latest one per (pipeline, revision, edge), for each revision
// of the pipeline whose partials of the edge are parked (or as revision
// 0's when the hub knows nothing of the pipeline). When the hub opens
// knowing the (pipeline, revision), restore applies its parked partials
// as if they had just arrived, in (edge, epoch, seq) order; when Define
// makes it known while the hub runs, Define does the same (unpark). The
// next commit writes them and deletes the revision's parked records in
// one transaction.
//
// Each edge may have ParkedQuota bytes parked (records' keys and values);
// beyond it, Apply refuses the edge's further partials of unknown
// pipelines per entry (RefusedError), and the edge sets them aside. A
// record parked longer than Retention ago (by the hub's clock) is deleted
// by a sweep of the bucket, which runs when the oldest record is past
// Retention by Retention/16, so at most 16 times per Retention.
//
// Everything here is guarded by Hub.mu.

const defaultParkedQuota = 64 << 20

// ParkedPipeline is what the hub holds parked for a pipeline name whose
// partials or watermarks it cannot apply yet: of revisions it does not
// know (0: the name is not in Config.Pipelines).
type ParkedPipeline struct {
	Pipeline  string
	Revisions []uint32 // with something parked, ascending
	Partials  uint64   // partials parked
	Bytes     int64    // their records' bytes, and the parked watermarks'
	Edges     []string // the edges whose partials are parked, by id
}

type parking struct {
	pending []parkedRecord // parked since the last prepare
	wms     map[parkKey]*parkedWM
	dirtyWM []parkKey
	pipes   map[revKey]*parkedPipe
	// oldest is at or before the parked-at time (Unix ms) of every record
	// held; math.MaxInt64: none.
	oldest int64
	logged map[parkLog]bool
}

// parkLog is one kind of log line of one (pipeline, edge), logged once.
type parkLog struct {
	parkKey
	dropped bool // a watermark dropped for the quota; else parking began
}

type parkKey struct {
	pipeline string
	revision uint32
	edge     int32
}

// parkedWM is an edge's latest watermark for a pipeline the hub does not
// know.
type parkedWM struct {
	wm, at int64
	dirty  bool // in parking.dirtyWM
}

type parkedPipe struct {
	partials uint64
	bytes    int64
	edges    map[int32]uint64 // partials parked per edge
}

// parkedRecord is a record to write: key buf[:k], payload buf[k:].
type parkedRecord struct {
	buf []byte
	k   int
}

// parkedSwept is one record a sweep deleted.
type parkedSwept struct {
	pipeline, edge string
	revision       uint32
	size           int64
	watermark      bool
}

// sweepResult is what one transaction's sweep of the parked bucket did.
type sweepResult struct {
	ran    bool
	bound  int64
	swept  []parkedSwept
	oldest int64 // parked-at of the oldest record left
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// parkedPartialSize is the bytes partial p of edge takes parked: its
// record's key, payload and frame.
func parkedPartialSize(edge string, p *runnelv1.Partial) int64 {
	k := parkedRangeLen(p.Pipeline, p.Revision) + 1 + len(edge) + 1 + 16
	v := recordHeader + 28 + uvarintLen(uint64(len(p.Key))) + len(p.Key) + len(p.State)
	return int64(k + v)
}

func parkedWatermarkSize(edge, pipeline string, revision uint32) int64 {
	return int64(parkedRangeLen(pipeline, revision) + 1 + len(edge) + 1 + recordHeader + 16)
}

// pipe returns the parked pipe of (name, rev), creating it.
func (pk *parking) pipe(name string, rev uint32) *parkedPipe {
	if pk.pipes == nil {
		pk.pipes = map[revKey]*parkedPipe{}
	}
	p := pk.pipes[revKey{name, rev}]
	if p == nil {
		p = &parkedPipe{edges: map[int32]uint64{}}
		pk.pipes[revKey{name, rev}] = p
	}
	return p
}

// drop forgets the parked pipe of (name, rev).
func (pk *parking) drop(name string, rev uint32) {
	delete(pk.pipes, revKey{name, rev})
}

// parkRefusals returns refused (validate's, in sequence order) with the
// partials of b added that Apply would park beyond the edge's quota: used
// is what the edge has parked, applied its applied sequence (older
// partials are dropped, not parked). It returns refused itself when there
// are none to add.
func (h *Hub) parkRefusals(cat *catalog, b *runnelv1.Batch, used int64, applied uint64, refused []Refused) []Refused {
	var over []Refused
	j := 0
	for _, p := range b.Partials {
		for j < len(refused) && refused[j].Seq < p.Seq {
			j++
		}
		if j < len(refused) && refused[j].Seq == p.Seq || p.Seq <= applied || cat.pipeOf(p.Pipeline, p.Revision) != nil {
			continue
		}
		n := parkedPartialSize(b.EdgeId, p)
		if used+n > h.cfg.ParkedQuota {
			what := fmt.Sprintf("pipeline %q", p.Pipeline)
			if p.Revision != 0 {
				what = fmt.Sprintf("revision %d of pipeline %q", p.Revision, p.Pipeline)
			}
			over = append(over, Refused{Seq: p.Seq, Reason: fmt.Sprintf(
				"the hub does not know %s, and this edge's parking quota (%d bytes) is full", what, h.cfg.ParkedQuota)})
			continue
		}
		used += n
	}
	if over == nil {
		return refused
	}
	out := append(slices.Clip(refused), over...)
	slices.SortFunc(out, func(a, b Refused) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// park holds partial p of edge e, epoch epoch, of a (pipeline, revision)
// the hub does not know, for the next commit; now is the hub's clock in
// Unix ms.
func (h *Hub) park(now int64, e *edge, epoch uint64, p *runnelv1.Partial) {
	size := parkedPartialSize(e.id, p)
	buf := make([]byte, 0, size)
	buf = appendParkedPartialKey(buf, p.Pipeline, p.Revision, e.id, epoch, p.Seq)
	k := len(buf)
	buf = appendParkedPartial(buf, now, p.WindowStart, p.WindowEnd, p.Version, p.Key, p.State)
	h.parking.pending = append(h.parking.pending, parkedRecord{buf: buf, k: k})
	e.parked += size
	pp := h.parking.pipe(p.Pipeline, p.Revision)
	pp.partials++
	pp.bytes += size
	pp.edges[e.idx]++
	h.parking.oldest = min(h.parking.oldest, now)
	h.stats.PartialsParked++
	wk := parkKey{p.Pipeline, p.Revision, e.idx}
	if m := h.parking.wms[wk]; m != nil {
		// The watermark is kept as long as the partials it covers.
		h.touchWatermark(wk, m, m.wm, now)
	}
	h.logParked(e, p.Pipeline, p.Revision, false)
}

// parkWatermark holds w as edge e's watermark for a (pipeline, revision)
// the hub does not know, if it is later than the one held.
func (h *Hub) parkWatermark(now int64, e *edge, pipeline string, rev uint32, w int64) {
	k := parkKey{pipeline, rev, e.idx}
	m := h.parking.wms[k]
	if m == nil {
		size := parkedWatermarkSize(e.id, pipeline, rev)
		if e.parked+size > h.cfg.ParkedQuota {
			h.logParked(e, pipeline, rev, true)
			return
		}
		if h.parking.wms == nil {
			h.parking.wms = map[parkKey]*parkedWM{}
		}
		m = &parkedWM{wm: math.MinInt64}
		h.parking.wms[k] = m
		e.parked += size
		h.parking.pipe(pipeline, rev).bytes += size
		h.logParked(e, pipeline, rev, false)
	}
	if w > m.wm {
		h.touchWatermark(k, m, w, now)
	}
}

// touchWatermark sets a parked watermark to w, parked at now, for the
// next commit to write.
func (h *Hub) touchWatermark(k parkKey, m *parkedWM, w, now int64) {
	m.wm, m.at = w, now
	h.parking.oldest = min(h.parking.oldest, now)
	if !m.dirty {
		m.dirty = true
		h.parking.dirtyWM = append(h.parking.dirtyWM, k)
	}
}

// logParked logs, once per (edge, pipeline, revision), that the hub parks
// what the edge sends of the pipeline revision, or that it dropped a
// watermark of it for the quota.
func (h *Hub) logParked(e *edge, pipeline string, rev uint32, dropped bool) {
	k := parkLog{parkKey{pipeline, rev, e.idx}, dropped}
	if h.parking.logged[k] {
		return
	}
	if h.parking.logged == nil {
		h.parking.logged = map[parkLog]bool{}
	}
	h.parking.logged[k] = true
	msg := "hub: parking what an edge sends of a pipeline the hub does not know; it applies once the pipeline is configured"
	if rev != 0 {
		msg = "hub: parking what an edge sends of a pipeline revision the hub does not know; it applies once the revision is defined"
	}
	if dropped {
		msg = "hub: dropped an edge's watermark of a pipeline the hub does not know: its parking quota is full"
	}
	h.cfg.Logger.Warn(msg, "edge", e.id, "pipeline", pipeline, "revision", rev, "edge_parked_bytes", e.parked, "quota", h.cfg.ParkedQuota)
}

// prepareParked adds the records parked since the last commit, the changed
// parked watermarks and, when due, a sweep to ws. Caller holds h.mu.
func (h *Hub) prepareParked(ws *writeSet, now int64) {
	for _, r := range h.parking.pending {
		ws.addRecord(opPutParked, 0, 0, r.buf[:r.k], r.buf[r.k:])
	}
	clear(h.parking.pending)
	h.parking.pending = h.parking.pending[:0]
	for _, k := range h.parking.dirtyWM {
		m := h.parking.wms[k]
		if m == nil || !m.dirty {
			continue
		}
		m.dirty = false
		ws.scratch = appendParkedPrefix(ws.scratch[:0], k.pipeline, k.revision, h.edges[k.edge].id, parkTagWatermark)
		n := len(ws.scratch)
		ws.scratch = appendParkedWatermark(ws.scratch, m.at, m.wm)
		ws.addRecord(opPutParked, 0, 0, ws.scratch[:n], ws.scratch[n:])
	}
	clear(h.parking.dirtyWM)
	h.parking.dirtyWM = h.parking.dirtyWM[:0]
	r := int64(h.cfg.Retention / time.Millisecond)
	if !ws.sweeping && h.parking.oldest < subSat(now, r+r/16) {
		ws.sweeping = true
		ws.ops = append(ws.ops, op{kind: opSweepParked, n: subSat(now, r)})
	}
}

// sweepParked deletes the records of the parked bucket parked before
// bound, noting them in x, except those of the pipelines and revisions
// cat knows (the commit that unparks them deletes them).
func (h *Hub) sweepParked(cat *catalog, b *bolt.Bucket, bound int64, x *sweepResult) error {
	x.ran, x.bound, x.oldest = true, bound, math.MaxInt64
	x.swept = x.swept[:0]
	c := b.Cursor()
	for k, v := c.First(); k != nil; {
		pk, err := parseParkedKey(k)
		if err != nil {
			return fmt.Errorf("parked key %x: %v: %w", k, err, ErrCorrupt)
		}
		if cat.pipeOf(string(pk.pipeline), pk.revision) != nil {
			k, v = c.Next()
			continue
		}
		payload, err := openRecord(k, v)
		if err != nil {
			return err
		}
		at, err := parkedAt(payload)
		if err != nil {
			return fmt.Errorf("parked key %x: %v: %w", k, err, ErrCorrupt)
		}
		if at >= bound {
			x.oldest = min(x.oldest, at)
			k, v = c.Next()
			continue
		}
		x.swept = append(x.swept, parkedSwept{pipeline: string(pk.pipeline), edge: string(pk.edge), revision: pk.revision,
			size: int64(len(k) + len(v)), watermark: pk.tag == parkTagWatermark})
		key := bytes.Clone(k)
		if err := c.Delete(); err != nil {
			return err
		}
		k, v = c.Seek(key)
	}
	return nil
}

// finishSweep forgets what a committed sweep deleted. Caller holds h.mu.
func (h *Hub) finishSweep(x *sweepResult) {
	for _, s := range x.swept {
		i, ok := h.edgeIdx[s.edge]
		if !ok {
			continue
		}
		e := h.edges[i]
		k := parkKey{s.pipeline, s.revision, i}
		pp := h.parking.pipes[revKey{s.pipeline, s.revision}]
		if s.watermark {
			if m := h.parking.wms[k]; m == nil || m.at >= x.bound {
				continue // updated since: written again by the next commit
			}
			delete(h.parking.wms, k)
		} else {
			h.stats.ParkedExpired++
			if pp != nil {
				pp.partials--
				if pp.edges[i]--; pp.edges[i] == 0 {
					delete(pp.edges, i)
				}
			}
		}
		e.parked -= s.size
		if pp != nil {
			if pp.bytes -= s.size; pp.partials == 0 && pp.bytes <= 0 {
				h.parking.drop(s.pipeline, s.revision)
			}
		}
	}
	oldest := x.oldest
	for _, r := range h.parking.pending {
		at, _ := parkedAt(r.buf[r.k:])
		oldest = min(oldest, at)
	}
	for _, m := range h.parking.wms {
		oldest = min(oldest, m.at)
	}
	h.parking.oldest = oldest
}

// restoreParked reads the parked bucket at Open. The records of the
// pipelines and revisions now known are applied as if their partials had
// just arrived, and the first commit deletes them; the others are counted
// against their edges' quotas and wait.
func (h *Hub) restoreParked(tx *bolt.Tx) error {
	cat := h.cat.Load()
	b := tx.Bucket(bucketParked)
	now := h.cfg.Now()
	expired := subSat(now.UnixMilli(), int64(h.cfg.Retention/time.Millisecond))
	bound := h.futureBound(now)
	byRev := map[revKey]*unparked{}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		bad := func(err error) error { return fmt.Errorf("hub: store: parked key %x: %v: %w", k, err, ErrCorrupt) }
		pk, err := parseParkedKey(k)
		if err != nil {
			return bad(err)
		}
		payload, err := openRecord(k, v)
		if err != nil {
			return err
		}
		at, err := parkedAt(payload)
		if err != nil {
			return bad(err)
		}
		e := h.edgeFor(string(pk.edge), 0)
		name := string(pk.pipeline)
		pp := cat.pipeOf(name, pk.revision)
		if pp == nil {
			if err := h.holdParked(pk, payload, e, at, int64(len(k)+len(v))); err != nil {
				return bad(err)
			}
			continue
		}
		rk := revKey{name, pk.revision}
		u := byRev[rk]
		if u == nil {
			u = &unparked{pp: pp, edges: map[string]bool{}}
			byRev[rk] = u
		}
		if at < expired {
			if pk.tag == parkTagPartial {
				h.stats.ParkedExpired++
			}
			continue
		}
		if pk.tag == parkTagWatermark {
			_, w, err := parseParkedWatermark(payload)
			if err != nil {
				return bad(err)
			}
			h.unparkWatermark(pp, e, pp.heldAt(w, bound))
			continue
		}
		p, err := parseParkedPartial(payload)
		if err != nil {
			return bad(err)
		}
		if reason := h.unparkable(pp, &p); reason != "" {
			h.dropUnparkable(u, pp, e, &pk, reason)
			continue
		}
		kh := xxhash.Sum64(p.key)
		kg := uint32(kh % uint64(h.keyGroups))
		if p.end < pp.residentFrom && p.end >= pp.expiredTo && pp.lookup(kg, windowHash(kh, p.start, p.end), p.key, p.start, p.end) == nil {
			if err := h.reload(tx, pp, kg, p.key, p.start, p.end); err != nil {
				return err
			}
		}
		h.unparkPartial(u, pp, e, &pk, &p)
	}
	for rk, u := range byRev {
		h.deleteParked(rk)
		h.cfg.Logger.Info("hub: open: applied the partials parked for a pipeline now known",
			"pipeline", rk.name, "revision", rk.rev, "partials", u.partials, "edges", len(u.edges), "dropped", u.dropped)
	}
	return nil
}

// unparked counts what unparking one (pipeline, revision) applied.
type unparked struct {
	pp                *pipe
	partials, dropped int
	edges             map[string]bool
}

// unparkPartial applies parked partial p of edge e (key pk) to pp as if it
// had just arrived: under the replace-if-newer rule and expiry, its
// window reloaded first if it was evicted. Caller holds h.mu (or is
// restore).
func (h *Hub) unparkPartial(u *unparked, pp *pipe, e *edge, pk *parkedKey, p *parkedPartial) {
	h.applyPartial(pp, e, pk.epoch, &runnelv1.Partial{
		Seq: pk.seq, Pipeline: pp.name, Revision: pk.revision, Key: p.key, WindowStart: p.start, WindowEnd: p.end,
		Version: p.version, State: p.state,
	})
	h.stats.PartialsUnparked++
	u.partials++
	u.edges[e.id] = true
}

// dropUnparkable counts and logs a parked partial that does not fit the
// pipe it would apply to (the edge ran another spec).
func (h *Hub) dropUnparkable(u *unparked, pp *pipe, e *edge, pk *parkedKey, reason string) {
	u.dropped++
	h.stats.PartialsRefused++
	h.cfg.Logger.Warn("hub: a parked partial does not fit its pipeline; dropped",
		"pipeline", pp.name, "revision", pk.revision, "edge", e.id, "epoch", pk.epoch, "seq", pk.seq, "reason", reason)
}

// unparkWatermark takes a parked watermark w of edge e as its watermark of
// pp.
func (h *Hub) unparkWatermark(pp *pipe, e *edge, w int64) {
	if i := pp.idx; !e.hasWM[i] || w > e.wm[i] {
		h.takeWatermark(e, i, w)
		h.touch(e)
	}
}

// deleteParked has the next commit delete the parked records of rk, after
// it writes what they applied. Caller holds commitMu (or is restore).
func (h *Hub) deleteParked(rk revKey) {
	k0 := len(h.ws.buf)
	h.ws.buf = appendParkedRange(h.ws.buf, rk.name, rk.rev)
	h.ws.add(opDeleteParked, 0, 0, k0, len(h.ws.buf))
}

// unparkable says why parked partial p cannot apply to pp ("" when it
// can).
func (h *Hub) unparkable(pp *pipe, p *parkedPartial) string {
	switch {
	case len(p.key) > maxKeyLen:
		return fmt.Sprintf("key of %d bytes, at most %d", len(p.key), maxKeyLen)
	case p.end <= p.start:
		return fmt.Sprintf("window end %d not after start %d", p.end, p.start)
	case pp.keyed && len(p.key) == 0:
		return "empty key, and the pipeline has key fields"
	case !pp.keyed && len(p.key) > 0:
		return "a key, and the pipeline has no key fields"
	}
	st := pp.scratch.Get().(*aggregate.State)
	defer pp.scratch.Put(st)
	if err := pp.set.Decode(st, p.state); err != nil {
		return fmt.Sprintf("state does not decode with the pipeline's aggregates: %v", err)
	}
	return ""
}

// holdParked counts a parked record of a pipeline or revision still
// unknown at Open.
func (h *Hub) holdParked(pk parkedKey, payload []byte, e *edge, at, size int64) error {
	name := string(pk.pipeline)
	pp := h.parking.pipe(name, pk.revision)
	if pk.tag == parkTagWatermark {
		_, w, err := parseParkedWatermark(payload)
		if err != nil {
			return err
		}
		if h.parking.wms == nil {
			h.parking.wms = map[parkKey]*parkedWM{}
		}
		h.parking.wms[parkKey{name, pk.revision, e.idx}] = &parkedWM{wm: w, at: at}
	} else {
		pp.partials++
		pp.edges[e.idx]++
	}
	pp.bytes += size
	e.parked += size
	h.parking.oldest = min(h.parking.oldest, at)
	return nil
}

// parkedStatus describes what is parked, by pipeline name. Caller holds
// h.mu.
func (h *Hub) parkedStatus() []ParkedPipeline {
	byName := map[string]*ParkedPipeline{}
	edges := map[string]map[int32]bool{}
	for rk, pp := range h.parking.pipes {
		if pp.partials == 0 && pp.bytes <= 0 {
			continue
		}
		p := byName[rk.name]
		if p == nil {
			p = &ParkedPipeline{Pipeline: rk.name}
			byName[rk.name] = p
			edges[rk.name] = map[int32]bool{}
		}
		p.Revisions = append(p.Revisions, rk.rev)
		p.Partials += pp.partials
		p.Bytes += pp.bytes
		for i := range pp.edges {
			edges[rk.name][i] = true
		}
	}
	out := make([]ParkedPipeline, 0, len(byName))
	for name, p := range byName {
		for i := range edges[name] {
			p.Edges = append(p.Edges, h.edges[i].id)
		}
		slices.Sort(p.Edges)
		slices.Sort(p.Revisions)
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b ParkedPipeline) int { return cmp.Compare(a.Pipeline, b.Pipeline) })
	if len(out) == 0 {
		return nil
	}
	return out
}

// parkedItem is one parked partial of the (pipeline, revision) Define
// makes known: its key, decoded, and its size against the edge's quota.
// Its slices point into a read transaction or the writeSet's buffer.
type parkedItem struct {
	key  []byte
	pk   parkedKey
	p    parkedPartial
	size int64
}

// readParked returns the parked partials of rk in the store, in key order.
// The caller holds commitMu, so the store does not change under tx.
func (h *Hub) readParked(tx *bolt.Tx, rk revKey) ([]parkedItem, error) {
	var out []parkedItem
	prefix := appendParkedRange(nil, rk.name, rk.rev)
	c := tx.Bucket(bucketParked).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		it, ok, err := parseParkedItem(k, v, true)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, it)
		}
	}
	return out, nil
}

// parseParkedItem decodes a parked record (framed when framed, else the
// bare payload); ok is false for a watermark record.
func parseParkedItem(k, v []byte, framed bool) (it parkedItem, ok bool, err error) {
	bad := func(err error) error { return fmt.Errorf("hub: store: parked key %x: %v: %w", k, err, ErrCorrupt) }
	if it.pk, err = parseParkedKey(k); err != nil {
		return it, false, bad(err)
	}
	payload, size := v, int64(len(k)+len(v))
	if framed {
		if payload, err = openRecord(k, v); err != nil {
			return it, false, err
		}
	} else {
		size += recordHeader
	}
	if it.pk.tag == parkTagWatermark {
		return it, false, nil
	}
	if it.p, err = parseParkedPartial(payload); err != nil {
		return it, false, bad(err)
	}
	it.key, it.size = k, size
	return it, true, nil
}

// moreParked adds to items (read from the store) the parked partials of rk
// not yet in it: those of a commit that failed (still in h.ws) and those
// parked since the last commit, and returns them all in key order,
// (edge, epoch, seq). Caller holds commitMu and h.mu.
func (h *Hub) moreParked(items []parkedItem, rk revKey) ([]parkedItem, error) {
	prefix := appendParkedRange(nil, rk.name, rk.rev)
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		seen[string(it.key)] = true
	}
	add := func(k, v []byte, framed bool) error {
		if !bytes.HasPrefix(k, prefix) || seen[string(k)] {
			return nil
		}
		it, ok, err := parseParkedItem(k, v, framed)
		if err == nil && ok {
			seen[string(k)] = true
			items = append(items, it)
		}
		return err
	}
	for _, o := range h.ws.ops {
		if o.kind == opPutParked {
			if err := add(h.ws.buf[o.k0:o.k1], h.ws.buf[o.v0:o.v1], true); err != nil {
				return nil, err
			}
		}
	}
	for _, r := range h.parking.pending {
		if err := add(r.buf[:r.k], r.buf[r.k:], false); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(items, func(a, b parkedItem) int { return bytes.Compare(a.key, b.key) })
	return items, nil
}
