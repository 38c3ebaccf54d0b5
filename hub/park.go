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

// Parking: partials and watermarks of pipelines the hub does not know.
//
// Apply accepts a batch whatever pipelines it names. A partial of a
// pipeline that is not configured is parked: encoded into a record of the
// parked bucket (store.go), written by the same commit as the edge's
// applied sequence, so that a crash loses both or neither. An edge's
// watermark for such a pipeline is parked too, the latest one per (edge,
// pipeline). When the hub opens with the pipeline configured, restore
// applies its parked partials as if they had just arrived, in (edge,
// epoch, seq) order, and the first commit writes them and deletes the
// pipeline's parked records in one transaction.
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

// ParkedPipeline is what the hub holds parked for a pipeline it does not
// know.
type ParkedPipeline struct {
	Pipeline string
	Partials uint64   // partials parked
	Bytes    int64    // their records' bytes, and the parked watermarks'
	Edges    []string // the edges whose partials are parked, by id
}

type parking struct {
	pending []parkedRecord // parked since the last prepare
	wms     map[parkKey]*parkedWM
	dirtyWM []parkKey
	pipes   map[string]*parkedPipe
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
	k := 1 + len(p.Pipeline) + 1 + len(edge) + 1 + 16
	v := recordHeader + 28 + uvarintLen(uint64(len(p.Key))) + len(p.Key) + len(p.State)
	return int64(k + v)
}

func parkedWatermarkSize(edge, pipeline string) int64 {
	return int64(1 + len(pipeline) + 1 + len(edge) + 1 + recordHeader + 16)
}

func (pk *parking) pipe(name string) *parkedPipe {
	if pk.pipes == nil {
		pk.pipes = map[string]*parkedPipe{}
	}
	p := pk.pipes[name]
	if p == nil {
		p = &parkedPipe{edges: map[int32]uint64{}}
		pk.pipes[name] = p
	}
	return p
}

// parkRefusals returns refused (validate's, in sequence order) with the
// partials of b added that Apply would park beyond the edge's quota: used
// is what the edge has parked, applied its applied sequence (older
// partials are dropped, not parked). It returns refused itself when there
// are none to add.
func (h *Hub) parkRefusals(b *runnelv1.Batch, used int64, applied uint64, refused []Refused) []Refused {
	var over []Refused
	j := 0
	for _, p := range b.Partials {
		for j < len(refused) && refused[j].Seq < p.Seq {
			j++
		}
		if j < len(refused) && refused[j].Seq == p.Seq || p.Seq <= applied || h.pipes[p.Pipeline] != nil {
			continue
		}
		n := parkedPartialSize(b.EdgeId, p)
		if used+n > h.cfg.ParkedQuota {
			over = append(over, Refused{Seq: p.Seq, Reason: fmt.Sprintf(
				"the hub does not know pipeline %q, and this edge's parking quota (%d bytes) is full", p.Pipeline, h.cfg.ParkedQuota)})
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

// park holds partial p of edge e, epoch epoch, of a pipeline the hub does
// not know, for the next commit; now is the hub's clock in Unix ms.
func (h *Hub) park(now int64, e *edge, epoch uint64, p *runnelv1.Partial) {
	size := parkedPartialSize(e.id, p)
	buf := make([]byte, 0, size)
	buf = appendParkedPartialKey(buf, p.Pipeline, e.id, epoch, p.Seq)
	k := len(buf)
	buf = appendParkedPartial(buf, now, p.WindowStart, p.WindowEnd, p.Version, p.Key, p.State)
	h.parking.pending = append(h.parking.pending, parkedRecord{buf: buf, k: k})
	e.parked += size
	pp := h.parking.pipe(p.Pipeline)
	pp.partials++
	pp.bytes += size
	pp.edges[e.idx]++
	h.parking.oldest = min(h.parking.oldest, now)
	h.stats.PartialsParked++
	if m := h.parking.wms[parkKey{p.Pipeline, e.idx}]; m != nil {
		// The watermark is kept as long as the partials it covers.
		h.touchWatermark(parkKey{p.Pipeline, e.idx}, m, m.wm, now)
	}
	h.logParked(e, p.Pipeline, false)
}

// parkWatermark holds w as edge e's watermark for a pipeline the hub does
// not know, if it is later than the one held.
func (h *Hub) parkWatermark(now int64, e *edge, pipeline string, w int64) {
	k := parkKey{pipeline, e.idx}
	m := h.parking.wms[k]
	if m == nil {
		size := parkedWatermarkSize(e.id, pipeline)
		if e.parked+size > h.cfg.ParkedQuota {
			h.logParked(e, pipeline, true)
			return
		}
		if h.parking.wms == nil {
			h.parking.wms = map[parkKey]*parkedWM{}
		}
		m = &parkedWM{wm: math.MinInt64}
		h.parking.wms[k] = m
		e.parked += size
		h.parking.pipe(pipeline).bytes += size
		h.logParked(e, pipeline, false)
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

// logParked logs, once per (edge, pipeline), that the hub parks what the
// edge sends of the pipeline, or that it dropped a watermark of it for
// the quota.
func (h *Hub) logParked(e *edge, pipeline string, dropped bool) {
	k := parkLog{parkKey{pipeline, e.idx}, dropped}
	if h.parking.logged[k] {
		return
	}
	if h.parking.logged == nil {
		h.parking.logged = map[parkLog]bool{}
	}
	h.parking.logged[k] = true
	msg := "hub: parking what an edge sends of a pipeline the hub does not know; it applies once the pipeline is configured"
	if dropped {
		msg = "hub: dropped an edge's watermark of a pipeline the hub does not know: its parking quota is full"
	}
	h.cfg.Logger.Warn(msg, "edge", e.id, "pipeline", pipeline, "edge_parked_bytes", e.parked, "quota", h.cfg.ParkedQuota)
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
		ws.scratch = appendParkedPrefix(ws.scratch[:0], k.pipeline, h.edges[k.edge].id, parkTagWatermark)
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
// bound, noting them in x, except those of configured pipelines (the
// commit that unparks them deletes them).
func (h *Hub) sweepParked(b *bolt.Bucket, bound int64, x *sweepResult) error {
	x.ran, x.bound, x.oldest = true, bound, math.MaxInt64
	x.swept = x.swept[:0]
	c := b.Cursor()
	for k, v := c.First(); k != nil; {
		pk, err := parseParkedKey(k)
		if err != nil {
			return fmt.Errorf("parked key %x: %v: %w", k, err, ErrCorrupt)
		}
		if h.pipes[string(pk.pipeline)] != nil {
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
		x.swept = append(x.swept, parkedSwept{pipeline: string(pk.pipeline), edge: string(pk.edge),
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
		k := parkKey{s.pipeline, i}
		pp := h.parking.pipes[s.pipeline]
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
				delete(h.parking.pipes, s.pipeline)
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

// restoreParked reads the parked bucket at Open. The records of pipelines
// now configured are applied as if their partials had just arrived, and
// the first commit deletes them; the others are counted against their
// edges' quotas and wait.
func (h *Hub) restoreParked(tx *bolt.Tx) error {
	b := tx.Bucket(bucketParked)
	now := h.cfg.Now()
	expired := subSat(now.UnixMilli(), int64(h.cfg.Retention/time.Millisecond))
	bound := h.futureBound(now)
	type unparked struct {
		partials, dropped int
		edges             map[string]bool
	}
	byPipe := map[*pipe]*unparked{}
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
		pp := h.pipes[string(pk.pipeline)]
		if pp == nil {
			if err := h.holdParked(pk, payload, e, at, int64(len(k)+len(v))); err != nil {
				return bad(err)
			}
			continue
		}
		u := byPipe[pp]
		if u == nil {
			u = &unparked{edges: map[string]bool{}}
			byPipe[pp] = u
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
			if w = min(w, bound); !e.hasWM[pp.idx] || w > e.wm[pp.idx] {
				e.wm[pp.idx], e.hasWM[pp.idx], e.dirty = w, true, true
			}
			continue
		}
		p, err := parseParkedPartial(payload)
		if err != nil {
			return bad(err)
		}
		st := pp.scratch.Get().(*aggregate.State)
		reason := h.unparkable(pp, &p, st)
		pp.scratch.Put(st)
		if reason != "" {
			u.dropped++
			h.stats.PartialsRefused++
			h.cfg.Logger.Warn("hub: open: a parked partial does not fit its pipeline; dropped",
				"pipeline", pp.p.Name, "edge", e.id, "epoch", pk.epoch, "seq", pk.seq, "reason", reason)
			continue
		}
		kh := xxhash.Sum64(p.key)
		kg := uint32(kh % uint64(h.keyGroups))
		if p.end < pp.residentFrom && p.end >= pp.expiredTo && pp.lookup(kg, windowHash(kh, p.start, p.end), p.key, p.start, p.end) == nil {
			if err := h.reload(tx, pp, kg, p.key, p.start, p.end); err != nil {
				return err
			}
		}
		h.applyPartial(pp, e, pk.epoch, &runnelv1.Partial{
			Seq: pk.seq, Pipeline: pp.p.Name, Key: p.key, WindowStart: p.start, WindowEnd: p.end, Version: p.version, State: p.state,
		})
		h.stats.PartialsUnparked++
		u.partials++
		u.edges[e.id] = true
	}
	for pp, u := range byPipe {
		k0 := len(h.ws.buf)
		h.ws.buf = append(h.ws.buf, pp.prefix...)
		h.ws.add(opDeleteParked, 0, int32(pp.idx), k0, len(h.ws.buf))
		h.cfg.Logger.Info("hub: open: applied the partials parked for a pipeline now configured",
			"pipeline", pp.p.Name, "partials", u.partials, "edges", len(u.edges), "dropped", u.dropped)
	}
	return nil
}

// unparkable says why parked partial p cannot apply to pp ("" when it
// can); st is scratch for decoding.
func (h *Hub) unparkable(pp *pipe, p *parkedPartial, st *aggregate.State) string {
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
	if err := pp.set.Decode(st, p.state); err != nil {
		return fmt.Sprintf("state does not decode with the pipeline's aggregates: %v", err)
	}
	return ""
}

// holdParked counts a parked record of a pipeline still unknown at Open.
func (h *Hub) holdParked(pk parkedKey, payload []byte, e *edge, at, size int64) error {
	name := string(pk.pipeline)
	pp := h.parking.pipe(name)
	if pk.tag == parkTagWatermark {
		_, w, err := parseParkedWatermark(payload)
		if err != nil {
			return err
		}
		if h.parking.wms == nil {
			h.parking.wms = map[parkKey]*parkedWM{}
		}
		h.parking.wms[parkKey{name, e.idx}] = &parkedWM{wm: w, at: at}
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
	var out []ParkedPipeline
	for name, pp := range h.parking.pipes {
		if pp.partials == 0 && pp.bytes <= 0 {
			continue
		}
		p := ParkedPipeline{Pipeline: name, Partials: pp.partials, Bytes: pp.bytes}
		for i := range pp.edges {
			p.Edges = append(p.Edges, h.edges[i].id)
		}
		slices.Sort(p.Edges)
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b ParkedPipeline) int { return cmp.Compare(a.Pipeline, b.Pipeline) })
	return out
}
