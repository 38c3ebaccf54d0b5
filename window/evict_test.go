package window_test

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/runnel-io/runnel/internal/oracle"
	"github.com/runnel-io/runnel/window"
	"github.com/runnel-io/runnel/window/aggregate"
)

// memStore is a committed store of snapshot entries, as the edge's op log
// and bases are: checkpoints' operations are recorded (stage) and applied
// only when the checkpoint commits (apply). It is the operators' KeyStore.
type memStore struct {
	mu     sync.Mutex
	meta   []byte
	slices map[int64]map[string][]byte // slice end -> record key -> partial
	vers   map[string][]byte           // record key -> versions
	sess   map[string][]byte           // record key -> sessions
	loads  int
}

func newMemStore() *memStore {
	return &memStore{slices: map[int64]map[string][]byte{}, vers: map[string][]byte{}, sess: map[string][]byte{}}
}

// staged is one checkpoint's operations, recorded.
type staged struct {
	ops []stagedOp
}

type stagedOp struct {
	kind byte // 'P', 'D', 'X'
	hash uint64
	k, v []byte
}

func (s *staged) Put(h uint64, k, v []byte) error {
	s.ops = append(s.ops, stagedOp{'P', h, slices.Clone(k), slices.Clone(v)})
	return nil
}
func (s *staged) Delete(h uint64, k []byte) error {
	s.ops = append(s.ops, stagedOp{'D', h, slices.Clone(k), nil})
	return nil
}
func (s *staged) DeletePrefix(p []byte) error {
	s.ops = append(s.ops, stagedOp{'X', 0, slices.Clone(p), nil})
	return nil
}

func sliceEnd(k []byte) int64 { return int64(binary.BigEndian.Uint64(k[1:9]) ^ 1<<63) }

func (m *memStore) apply(t testing.TB, s *staged) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range s.ops {
		switch {
		case op.kind == 'X':
			if len(op.k) != 9 || op.k[0] != 's' {
				t.Fatalf("prefix deletion %q: the store knows slice prefixes only", op.k)
			}
			delete(m.slices, sliceEnd(op.k))
		case len(op.k) == 1 && op.k[0] == 'm':
			m.meta = op.v
		case op.k[0] == 's':
			end, key := sliceEnd(op.k), string(op.k[9:])
			if op.kind == 'D' {
				delete(m.slices[end], key)
				continue
			}
			if m.slices[end] == nil {
				m.slices[end] = map[string][]byte{}
			}
			m.slices[end][key] = op.v
		case op.k[0] == 'v' || op.k[0] == 'x':
			byKey := m.vers
			if op.k[0] == 'x' {
				byKey = m.sess
			}
			if op.kind == 'D' {
				delete(byKey, string(op.k[1:]))
			} else {
				byKey[string(op.k[1:])] = op.v
			}
		default:
			t.Fatalf("entry %q", op.k)
		}
	}
}

func (m *memStore) Load(_ uint64, key []byte, fn func(k, v []byte) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.loads++
	var kb []byte
	for end, byKey := range m.slices {
		if v, ok := byKey[string(key)]; ok {
			kb = append(kb[:0], 's')
			kb = binary.BigEndian.AppendUint64(kb, uint64(end)^1<<63)
			if err := fn(append(kb, key...), v); err != nil {
				return err
			}
		}
	}
	if v, ok := m.vers[string(key)]; ok {
		if err := fn(append([]byte{'v'}, key...), v); err != nil {
			return err
		}
	}
	return nil
}

// keys returns how many record keys the store holds entries of.
func (m *memStore) keys() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.recordKeys())
}

// recordKeys returns the record keys the store holds entries of, sorted
// (m.mu held).
func (m *memStore) recordKeys() []string {
	keys := map[string]bool{}
	for _, byKey := range m.slices {
		for k := range byKey {
			keys[k] = true
		}
	}
	for k := range m.vers {
		keys[k] = true
	}
	for k := range m.sess {
		keys[k] = true
	}
	return slices.Sorted(maps.Keys(keys))
}

// restore loads every committed entry into op, key by key as the edge
// does group by group, letting op evict between keys (ShedRestored), and
// returns the most keys op held during it.
func (m *memStore) restore(t testing.TB, op *window.Operator) (peak int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.meta != nil {
		if err := op.Restore(0, []byte{'m'}, m.meta); err != nil {
			t.Fatal(err)
		}
	}
	var kb []byte
	for _, k := range m.recordKeys() {
		h := xxhash.Sum64String(k)
		for end, byKey := range m.slices {
			if v, ok := byKey[k]; ok {
				kb = append(kb[:0], 's')
				kb = binary.BigEndian.AppendUint64(kb, uint64(end)^1<<63)
				kb = append(kb, k...)
				if err := op.Restore(h, kb, v); err != nil {
					t.Fatal(err)
				}
			}
		}
		if v, ok := m.vers[k]; ok {
			if err := op.Restore(h, append([]byte{'v'}, k...), v); err != nil {
				t.Fatal(err)
			}
		}
		if v, ok := m.sess[k]; ok {
			if err := op.Restore(h, append([]byte{'x'}, k...), v); err != nil {
				t.Fatal(err)
			}
		}
		peak = max(peak, op.Resident())
		op.ShedRestored()
	}
	op.FinishRestore()
	return peak
}

// evictCase is one stream and window configuration for the eviction oracle.
type evictCase struct {
	name       string
	cfg        oracle.Config
	keys       int // distinct keys
	events     int
	hot        int     // keys reporting at any moment (a drifting window of the keys)
	cold       float64 // share of events of a random key (mostly evicted: reloads)
	lateShare  float64 // share of events put back by up to the lateness
	resident   int     // MaxResident
	every      int     // events between checkpoint barriers
	commitLag  int     // events between a barrier and its commit
	crashEvery int     // mean events between crashes (0: none)
}

// evictEvents makes the stream: time moves on by 0-2 ms an event, most
// events are of a hot set of keys that drifts through the key space, some
// of any key; some are out of order by up to max_out_of_order, some late
// (by up to the lateness, so they land in fired windows of keys long
// evicted), and some are repeats of an earlier event (same key and time).
func evictEvents(c evictCase, seed uint64) []oracle.Event {
	rng := rand.New(rand.NewPCG(seed, 7))
	events := make([]oracle.Event, c.events)
	now := int64(1_767_225_600_000)
	for i := range events {
		now += rng.Int64N(3)
		var k int
		if rng.Float64() < c.cold {
			k = rng.IntN(c.keys)
		} else {
			k = (i*c.keys/c.events + rng.IntN(c.hot)) % c.keys
		}
		t := now - rng.Int64N(c.cfg.MaxOutOfOrder+1)
		if rng.Float64() < c.lateShare {
			t = now - rng.Int64N(c.cfg.Lateness+c.cfg.Size+1)
		}
		if i > 0 && rng.IntN(20) == 0 {
			events[i] = events[rng.IntN(i)] // a repeat
			continue
		}
		events[i] = oracle.Event{Key: evictKey(k), Time: t}
	}
	return events
}

func evictKey(k int) string { return fmt.Sprintf("k%07d", k) }

// digest folds a key's results, in order, into one number.
type digest uint64

func (d *digest) add(start, end int64, version uint32, count int64, sum, sq, lo, hi float64) {
	h := xxhash.New()
	var b [8 * 9]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(*d))
	binary.LittleEndian.PutUint64(b[8:], uint64(start))
	binary.LittleEndian.PutUint64(b[16:], uint64(end))
	binary.LittleEndian.PutUint64(b[24:], uint64(version))
	binary.LittleEndian.PutUint64(b[32:], uint64(count))
	binary.LittleEndian.PutUint64(b[40:], math.Float64bits(sum))
	binary.LittleEndian.PutUint64(b[48:], math.Float64bits(sq))
	binary.LittleEndian.PutUint64(b[56:], math.Float64bits(lo))
	binary.LittleEndian.PutUint64(b[64:], math.Float64bits(hi))
	_, _ = h.Write(b[:])
	*d = digest(h.Sum64())
}

// sqOf is the second input of event i: small, so that sums of it are exact
// in any order.
func sqOf(i int) float64 { x := float64(i % 4093); return x * x }

// oracleDigests runs the oracle key by key: each key's events, each after
// a watermark advance to what the whole stream's watermark was before it.
// The oracle's results for one key depend only on that key's events and
// the watermark they arrive under, so this is the oracle of the whole
// stream, restricted to each key, at a cost linear in the events.
func oracleDigests(events []oracle.Event, cfg oracle.Config, keys int) (ds []digest, late []int) {
	byKey := make([][]int, keys)
	before := make([]int64, len(events))
	wm := int64(math.MinInt64)
	for i, e := range events {
		before[i] = wm
		wm = max(wm, e.Time-cfg.MaxOutOfOrder)
		k, _ := strconv.Atoi(e.Key[1:])
		byKey[k] = append(byKey[k], i)
	}
	ds = make([]digest, keys)
	var evs []oracle.Event
	var idx []int // per-key event index -> global index (-1: an advance)
	for k, is := range byKey {
		if len(is) == 0 {
			continue
		}
		evs, idx = evs[:0], idx[:0]
		for _, i := range is {
			if before[i] != math.MinInt64 {
				evs = append(evs, oracle.Event{Time: before[i], Advance: true})
				idx = append(idx, -1)
			}
			evs = append(evs, events[i])
			idx = append(idx, i)
		}
		ems, kl := oracle.Run(evs, cfg)
		for _, e := range ems {
			var n int64
			var sum, sq float64
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, m := range e.Members {
				g := idx[m]
				n++
				sum += float64(g)
				sq += sqOf(g)
				lo, hi = min(lo, float64(g)), max(hi, float64(g))
			}
			ds[k].add(e.Start, e.End, uint32(e.Version), n, sum, sq, lo, hi)
		}
		for _, m := range kl {
			late = append(late, idx[m])
		}
	}
	slices.Sort(late)
	return ds, late
}

// output is a result or late record waiting for its checkpoint to commit.
type output struct {
	epoch  uint64
	key    int
	late   int // event index; -1 for a result
	start  int64
	end    int64
	ver    uint32
	n      int64
	s, q   float64
	lo, hi float64
}

// evictRun drives an operator with eviction over events as the runtime and
// the edge do: batches of records (each under its watermark), a barrier
// every c.every events (Checkpoint into a staged record), its commit
// c.commitLag events later (applied to the store, outputs of earlier epochs
// committed, Committed), and crashes: the operator, the staged checkpoints
// and the uncommitted outputs are lost, a new operator restores the last
// committed checkpoint and the stream replays from its position. It
// returns the committed outputs' digests per key and late events.
func evictRun(t testing.TB, events []oracle.Event, c evictCase, seed uint64, evict bool) (ds []digest, late []int, st window.Stats) {
	set, err := aggregate.NewSet(digestAggs, aggregate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var a window.Assigner
	switch c.cfg.Kind {
	case oracle.Tumbling:
		a = window.TumblingWindows(c.cfg.Size)
	case oracle.Sliding:
		a = window.SlidingWindows(c.cfg.Size, c.cfg.Slide)
	case oracle.Session:
		a = window.SessionWindows(c.cfg.Gap)
	}
	rng := rand.New(rand.NewPCG(seed, 11))
	store := newMemStore()
	var pending []output // emitted, not committed
	ds = make([]digest, c.keys)
	epoch := uint64(0) // last barrier passed
	var op *window.Operator
	cur := -1 // key of the record being added
	newOp := func() {
		cfg := window.Config{Assigner: a, Lateness: c.cfg.Lateness, Aggregates: set,
			Emit: func(r *window.Result) {
				k, _ := strconv.Atoi(string(r.Key[1:]))
				pending = append(pending, output{epoch: epoch, key: k, late: -1, start: r.Start, end: r.End, ver: r.Version,
					n: set.Result(r.State, 0).Int, s: set.Result(r.State, 1).Float, q: set.Result(r.State, 2).Float,
					lo: set.Result(r.State, 3).Float, hi: set.Result(r.State, 4).Float})
			}}
		if evict {
			cfg.MaxResident, cfg.Store = c.resident, store
		}
		if op, err = window.NewOperator(cfg); err != nil {
			t.Fatal(err)
		}
	}
	newOp()
	_ = cur
	restores, restoredPeak := 0, 0 // crashes, the most keys stored at one
	wms := window.NewWatermarks(1, c.cfg.MaxOutOfOrder, 0)
	type ckpt struct {
		id   uint64
		pos  int // first event after the barrier
		wm   window.State
		ops  *staged
		due  int // event index at which it commits
		outs int // pending outputs of epochs before it
	}
	var inflight []ckpt
	lastPos, lastWM := 0, wms.State()
	var stats window.Stats
	addStats := func() {
		s := op.Stats()
		stats.Evicted += s.Evicted
		stats.Reloaded += s.Reloaded
		stats.Lookups += s.Lookups
	}
	commit := func(ck ckpt) {
		store.apply(t, ck.ops)
		// Outputs with epoch < id are the checkpoint's (BarrierSink).
		n := 0
		for _, o := range pending {
			if o.epoch < ck.id {
				if o.late >= 0 {
					late = append(late, o.late)
				} else {
					ds[o.key].add(o.start, o.end, o.ver, o.n, o.s, o.q, o.lo, o.hi)
				}
			} else {
				pending[n] = o
				n++
			}
		}
		pending = pending[:n]
		lastPos, lastWM = ck.pos, ck.wm
		op.Committed(ck.id)
	}
	var r window.Records
	var batch []int
	flush := func() {
		if len(batch) == 0 {
			return
		}
		op.AddRecords(&r, func(i int, _ int64) {
			k, _ := strconv.Atoi(events[batch[i]].Key[1:])
			pending = append(pending, output{epoch: epoch, key: k, late: batch[i]})
		})
		if err := op.Err(); err != nil {
			t.Fatal(err)
		}
		r = window.Records{Keys: r.Keys[:0], KeyEnds: r.KeyEnds[:0], Hashes: r.Hashes[:0], Times: r.Times[:0],
			Marks: r.Marks[:0], Nums: r.Nums[:0]}
		batch = batch[:0]
	}
	bsize := 1 + rng.IntN(64)
	id := uint64(0)
	nextCrash := func() int {
		if c.crashEvery == 0 {
			return math.MaxInt
		}
		return 1 + rng.IntN(2*c.crashEvery)
	}
	crashIn := nextCrash()
	for i := 0; i < len(events); i++ {
		if crashIn--; crashIn == 0 && evict {
			crashIn = nextCrash()
			flush()
			addStats()
			// Crash: what was not committed is lost.
			pending, inflight = pending[:0], inflight[:0]
			newOp()
			stored := store.keys()
			peak := store.restore(t, op)
			// Keys that cannot leave (windows to fire, versions) stay;
			// of the others at most 9/8 of the bound (ShedRestored).
			if c.cfg.Kind != oracle.Session && peak > op.Resident()+c.resident*9/8+1 {
				t.Fatalf("restore of %d stored keys held %d at once, %d after it: the bound %d was not kept during it", stored, peak, op.Resident(), c.resident)
			}
			restores++
			restoredPeak = max(restoredPeak, stored)
			wms = window.NewWatermarks(1, c.cfg.MaxOutOfOrder, 0)
			wms.Restore(lastWM)
			epoch = id // barrier ids go on from the last injected, as the edge's do
			i = lastPos - 1
			continue
		}
		e := events[i]
		wm := wms.Observe(0, e.Time)
		r.Keys = append(r.Keys, e.Key...)
		r.KeyEnds = append(r.KeyEnds, len(r.Keys))
		r.Hashes = append(r.Hashes, xxhash.Sum64String(e.Key))
		r.Times = append(r.Times, e.Time)
		r.Marks = append(r.Marks, wm)
		r.Nums = append(r.Nums, float64(i), sqOf(i))
		batch = append(batch, i)
		if len(batch) == bsize {
			flush()
			bsize = 1 + rng.IntN(64)
		}
		if (i+1)%c.every == 0 {
			flush()
			op.Advance(wms.Current())
			id++
			s := &staged{}
			if err := op.Checkpoint(id, s); err != nil {
				t.Fatal(err)
			}
			epoch = id
			inflight = append(inflight, ckpt{id: id, pos: i + 1, wm: wms.State(), ops: s, due: i + c.commitLag})
		}
		for len(inflight) > 0 && inflight[0].due <= i {
			flush()
			commit(inflight[0])
			inflight = inflight[1:]
		}
	}
	flush()
	op.Advance(window.MaxTime)
	// End of input commits everything.
	id++
	s := &staged{}
	if err := op.Checkpoint(id, s); err != nil {
		t.Fatal(err)
	}
	for _, ck := range inflight {
		commit(ck)
	}
	commit(ckpt{id: id + 1, pos: len(events), ops: s})
	addStats()
	if restores > 0 {
		t.Logf("%d restores, up to %d keys stored", restores, restoredPeak)
	}
	slices.Sort(late)
	return ds, late, stats
}

func evictCases() []evictCase {
	keys, events := 20_000, 200_000
	if s := os.Getenv("RUNNEL_EVICT_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			panic(err)
		}
		keys, events = n, 3*n
	}
	return []evictCase{
		{name: "tumbling", cfg: oracle.Config{Kind: oracle.Tumbling, Size: 100, Slide: 100, MaxOutOfOrder: 20, Lateness: 2000},
			keys: keys, events: events, hot: 200, cold: 0.05, lateShare: 0.05, resident: 256, every: 300, commitLag: 10},
		{name: "tumbling/crash", cfg: oracle.Config{Kind: oracle.Tumbling, Size: 50, Slide: 50, MaxOutOfOrder: 10, Lateness: 1000},
			keys: keys, events: events, hot: 100, cold: 0.05, lateShare: 0.1, resident: 200, every: 700, commitLag: 500, crashEvery: 20_000},
		{name: "tumbling/restore", cfg: oracle.Config{Kind: oracle.Tumbling, Size: 50, Slide: 50, MaxOutOfOrder: 10, Lateness: 5000},
			keys: keys, events: events, hot: 100, cold: 0.2, lateShare: 0.1, resident: 128, every: 700, commitLag: 500, crashEvery: 20_000},
		{name: "sliding", cfg: oracle.Config{Kind: oracle.Sliding, Size: 60, Slide: 20, MaxOutOfOrder: 10, Lateness: 1000},
			keys: keys, events: events, hot: 200, cold: 0.05, lateShare: 0.05, resident: 256, every: 1000, commitLag: 100},
		{name: "sliding/blocks", cfg: oracle.Config{Kind: oracle.Sliding, Size: 64, Slide: 4, MaxOutOfOrder: 10, Lateness: 500},
			keys: keys, events: events, hot: 200, cold: 0.05, lateShare: 0.05, resident: 256, every: 500, commitLag: 100, crashEvery: 50_000},
		{name: "session", cfg: oracle.Config{Kind: oracle.Session, Gap: 30, MaxOutOfOrder: 10, Lateness: 500},
			keys: keys / 10, events: events / 10, hot: 100, cold: 0.05, lateShare: 0.05, resident: 100, every: 500, commitLag: 100, crashEvery: 5_000},
	}
}

// TestEvictionMatchesOracle runs random out-of-order streams with repeats
// and late records over many keys through operators that keep a small
// resident budget, evict and reload, checkpoint with a commit lag and
// crash: the committed results, per key and in order, and the late records
// are exactly the oracle's, and keys were evicted and reloaded. Set
// RUNNEL_EVICT_KEYS=1000000 for 10^6 keys (3·10^6 events).
func TestEvictionMatchesOracle(t *testing.T) {
	for ci, c := range evictCases() {
		t.Run(c.name, func(t *testing.T) {
			seed := uint64(ci + 1)
			events := evictEvents(c, seed)
			want, wantLate := oracleDigests(events, c.cfg, c.keys)
			got, gotLate, st := evictRun(t, events, c, seed, true)
			t.Logf("%d keys, %d events: evicted %d, reloaded %d, lookups %d, late %d", c.keys, c.events, st.Evicted, st.Reloaded, st.Lookups, len(wantLate))
			if !slices.Equal(gotLate, wantLate) {
				t.Errorf("late records: got %d, want %d (first difference at %d)", len(gotLate), len(wantLate), firstDiff(gotLate, wantLate))
			}
			bad := 0
			for k := range want {
				if got[k] != want[k] {
					if bad < 5 {
						t.Errorf("key %s: results differ from the oracle's", evictKey(k))
					}
					bad++
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d keys differ", bad, c.keys)
			}
			if c.cfg.Kind == oracle.Session {
				if st.Evicted != 0 {
					t.Errorf("a session operator evicted %d keys", st.Evicted)
				}
				return
			}
			if st.Evicted == 0 || st.Reloaded == 0 {
				t.Errorf("evicted %d, reloaded %d: the stream does not exercise eviction", st.Evicted, st.Reloaded)
			}
		})
	}
}

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
