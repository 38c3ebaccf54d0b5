package hub

import (
	"bytes"
	"math"
	"sync"
	"time"

	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/sync/archive"
	"github.com/runnel-io/runnel/window/aggregate"
)

// The in-memory merge state. Everything here is guarded by Hub.mu.
//
// A window is one (pipeline, key, start, end). It holds each contributing
// edge's latest partial, encoded as the edge sent it; merging happens only
// when the window is emitted, so applying a partial is a lookup and a copy.

// pipe is the hub's state for one pipeline: a local one (class 0), or
// one class of managed revisions (revision.go).
type pipe struct {
	idx   int
	name  string // the pipeline's name, as edges and queries give it
	class uint32 // 0: local (Config.Pipelines); else the class's first revision
	store string // the name its records are stored under (storeName)
	// spec0 is the first spec the pipe was made with: its aggregates and
	// key are every revision's of the class (operators.Compatible).
	spec0 *operators.Pipeline
	set   *aggregate.Set
	keyed bool // the pipeline has key fields: keys must be non-empty

	// p is the spec shown for the pipe: the local pipeline's, or the
	// class's latest revision's; revisions are the class's revisions
	// the hub knows, ascending (nil for a local pipe). Both change with
	// Define, under Hub.mu.
	p         *operators.Pipeline
	revisions []uint32
	revs      []uint32 // emit's scratch: the revisions of a window's parts

	// scratch holds *aggregate.State for validating partials outside mu.
	scratch sync.Pool
	merged  *aggregate.State // the emission merge's scratch (under mu)

	// wins is the window index, one map per key group: hash of (key, start,
	// end) -> chain of windows.
	wins []map[uint64]*window
	// ends groups windows by end: emission, eviction and expiry work by
	// end.
	ends    map[int64]*endGroup
	pending map[int64]*endGroup // the groups with windows to emit
	nwin    int
	minEnd  int64 // no group in ends ends before this

	prefix []byte // the partials-bucket key prefix of the pipeline's windows

	// The archive schema of its results (archive.go): made at the first
	// result logged; archLogged once a commit wrote it.
	archSchema *archive.Schema
	archID     uint64
	archLogged bool

	wm        int64 // hub watermark, valid when hasWM
	hasWM     bool
	wmScan    wmScan // advanceWatermark's last look at the edges
	expiredTo int64  // windows ending before this were deleted; partials for them are dropped
	// residentFrom: a window ending at or after it is in memory if it
	// exists at all; one ending before it may be in the store only
	// (evicted), and a partial for it looks there first.
	residentFrom int64
	// storedFrom: no window in the partials buckets ends before it (a
	// lower bound; expiry deletes a key range only when it is passed).
	// Written under Hub.mu by prepare, and after a commit that expired.
	storedFrom int64
	results    uint64 // result versions stored
	dirty      bool   // wm or results changed since the last commit
}

type endGroup struct {
	end     int64
	wins    []*window
	pending []*window // changed since their last emission (or never emitted)
}

type window struct {
	pipe       *pipe
	key        []byte // immutable once the window exists
	hash       uint64 // index hash of (key, start, end)
	kg         uint32
	start, end int64
	version    uint32 // last emitted version, 0: never
	pending    bool   // in its endGroup's pending list
	dirty      bool   // in Hub.dirty: some part awaits writing
	parts      []part
	next       *window // hash chain
}

// part is one edge's latest partial of a window.
type part struct {
	edge       int32 // index into Hub.edges
	dirty      bool
	version    uint32
	revision   uint32 // of the pipeline that produced it (0: local)
	epoch, seq uint64
	state      []byte
}

// edge is the hub's state for one edge.
type edge struct {
	id    string
	idx   int32
	epoch uint64
	// applied is the highest sequence of epoch applied in memory; acked is
	// the highest made durable, valid for ackedEpoch.
	applied           uint64
	ackedEpoch, acked uint64
	lastSeen          time.Time
	wm                []int64 // per pipe.idx, valid where hasWM
	hasWM             []bool
	dirty             bool  // its record awaits the next commit (Hub.touch)
	parked            int64 // bytes parked (park.go), written or not
}

// adopt moves e to epoch; the caller marks it dirty (Hub.touch).
func (e *edge) adopt(epoch uint64) {
	e.epoch = epoch
	e.applied = 0
}

// ackedSeq is the durable sequence of the edge's current epoch.
func (e *edge) ackedSeq() uint64 {
	if e.ackedEpoch == e.epoch {
		return e.acked
	}
	return 0
}

// newPipe makes the pipe of pipeline p's class (0: p is local).
func newPipe(idx int, p *operators.Pipeline, class uint32, keyGroups int) *pipe {
	store := storeName(p.Name, class)
	pp := &pipe{
		idx:       idx,
		name:      p.Name,
		class:     class,
		store:     store,
		spec0:     p,
		p:         p,
		set:       p.Aggregates,
		keyed:     len(p.KeyFields()) > 0,
		merged:    p.Aggregates.New(),
		wins:      make([]map[uint64]*window, keyGroups),
		ends:      map[int64]*endGroup{},
		pending:   map[int64]*endGroup{},
		minEnd:    math.MaxInt64,
		prefix:    appendPipePrefix(nil, store),
		expiredTo: math.MinInt64,
		// Nothing evicted, and expiry's first key range finds out what the
		// store holds.
		residentFrom: math.MinInt64,
		storedFrom:   math.MinInt64,
	}
	pp.scratch.New = func() any { return pp.set.New() }
	for i := range pp.wins {
		pp.wins[i] = map[uint64]*window{}
	}
	return pp
}

// grow extends the edge's per-pipe slices to n pipes.
func (e *edge) grow(n int) {
	for len(e.wm) < n {
		e.wm = append(e.wm, 0)
		e.hasWM = append(e.hasWM, false)

	}
}

// windowHash mixes the key hash with the bounds (a murmur3 finalizer).
func windowHash(kh uint64, start, end int64) uint64 {
	x := kh ^ uint64(start)*0x9E3779B97F4A7C15 ^ uint64(end)*0xC2B2AE3D27D4EB4F
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

func (pp *pipe) lookup(kg uint32, h uint64, key []byte, start, end int64) *window {
	for w := pp.wins[kg][h]; w != nil; w = w.next {
		if w.start == start && w.end == end && bytes.Equal(w.key, key) {
			return w
		}
	}
	return nil
}

// create adds an empty window; the caller knows it does not exist.
func (pp *pipe) create(kg uint32, h uint64, key []byte, start, end int64) *window {
	w := &window{pipe: pp, key: bytes.Clone(key), hash: h, kg: kg, start: start, end: end}
	if w.key == nil {
		w.key = []byte{}
	}
	w.next = pp.wins[kg][h]
	pp.wins[kg][h] = w
	g := pp.ends[end]
	if g == nil {
		g = &endGroup{end: end}
		pp.ends[end] = g
		pp.minEnd = min(pp.minEnd, end)
	}
	g.wins = append(g.wins, w)
	pp.nwin++
	return w
}

// remove unlinks w from the index; the caller drops its end group.
func (pp *pipe) remove(w *window) {
	m := pp.wins[w.kg]
	if m[w.hash] == w {
		if w.next == nil {
			delete(m, w.hash)
		} else {
			m[w.hash] = w.next
		}
	} else {
		for p := m[w.hash]; p != nil; p = p.next {
			if p.next == w {
				p.next = w.next
				break
			}
		}
	}
	pp.nwin--
}

// sweep removes from memory the windows of pp that end before bound: all
// of them when all (expiry), else those that are emitted with nothing to
// write or emit (eviction: the store holds them whole). It returns how many
// it removed. Work is only done when some group ends before bound.
func (pp *pipe) sweep(bound int64, all bool) int {
	if bound <= pp.minEnd {
		return 0
	}
	n := 0
	lo := int64(math.MaxInt64)
	for end, g := range pp.ends {
		if end >= bound {
			lo = min(lo, end)
			continue
		}
		kept := g.wins[:0]
		for _, w := range g.wins {
			if !all && (w.dirty || w.pending || w.version == 0) {
				kept = append(kept, w)
				continue
			}
			pp.remove(w)
			n++
		}
		clear(g.wins[len(kept):])
		g.wins = kept
		if len(kept) == 0 {
			delete(pp.ends, end)
			delete(pp.pending, end) // nothing left to emit
		} else {
			lo = min(lo, end)
		}
	}
	pp.minEnd = lo
	return n
}

// markPending queues w for emission once the hub watermark passes its end.
func (pp *pipe) markPending(w *window) {
	if w.pending {
		return
	}
	w.pending = true
	g := pp.ends[w.end]
	g.pending = append(g.pending, w)
	pp.pending[w.end] = g
}

// partOf returns w's part for edge e, or nil.
func (w *window) partOf(e int32) *part {
	for i := range w.parts {
		if w.parts[i].edge == e {
			return &w.parts[i]
		}
	}
	return nil
}

// newer reports whether (epoch, seq) is after (pe, ps).
func newer(epoch, seq, pe, ps uint64) bool {
	return epoch > pe || epoch == pe && seq > ps
}
