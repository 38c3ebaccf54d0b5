package hub

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/window/aggregate"
)

// otherYAML is a pipeline the test hubs do not know until a test adds it.
const otherYAML = `name: other
source: {mqtt: {topic: "o/+"}}
event_time: {field: ts}
key: [device]
window: {tumbling: 1s}
aggregates:
  n: count()
  s: sum(v)
`

// mixedEntry is one outbox entry of an edge running several pipelines: a
// partial, or a watermark marker when p is nil; wms are the edge's
// watermarks per pipeline after it.
type mixedEntry struct {
	p   *runnelv1.Partial
	wms []int64
}

// genMixedOutbox builds an outbox of partials of pipes, and each
// pipeline's windows' last partial.
func genMixedOutbox(r *rand.Rand, pipes []*operators.Pipeline, n int) ([]mixedEntry, []map[winID][]byte) {
	states := make([]map[winID]*aggregate.State, len(pipes))
	versions := make([]map[winID]uint32, len(pipes))
	last := make([]map[winID][]byte, len(pipes))
	for i := range pipes {
		states[i], versions[i], last[i] = map[winID]*aggregate.State{}, map[winID]uint32{}, map[winID][]byte{}
	}
	wms := make([]int64, len(pipes))
	var out []mixedEntry
	for len(out) < n {
		seq := uint64(len(out) + 1)
		i := r.IntN(len(pipes))
		if r.IntN(5) == 0 {
			wms[i] = min(wms[i]+int64(r.IntN(2000)), oracleWindows*1000)
			out = append(out, mixedEntry{wms: append([]int64(nil), wms...)})
			continue
		}
		set := pipes[i].Aggregates
		id := winID{fmt.Sprintf("k%d", r.IntN(oracleKeys)), int64(r.IntN(oracleWindows)) * 1000}
		st := states[i][id]
		if st == nil {
			st = set.New()
			states[i][id] = st
		}
		for range 1 + r.IntN(3) {
			addValues(set, st, float64(r.IntN(200)-100))
		}
		versions[i][id]++
		enc := set.AppendEncode(nil, st)
		last[i][id] = enc
		out = append(out, mixedEntry{wms: append([]int64(nil), wms...), p: &runnelv1.Partial{
			Seq: seq, Pipeline: pipes[i].Name, Key: encKey(id.key), WindowStart: id.start, WindowEnd: id.start + 1000,
			Version: versions[i][id], State: enc,
		}})
	}
	for i := range wms {
		wms[i] = oracleWindows * 1000
	}
	return append(out, mixedEntry{wms: wms}), last
}

// TestParkUnknownPipeline: edges send partials of two pipelines, one of
// which the hub does not know, in random batches with commits, restarts
// and crashes. The known one's results are exactly the oracle's; the other
// one's partials are parked, each exactly once. Reopened with the second
// pipeline configured (after a crash there too, before any commit), the
// hub emits its results from the parked partials, exactly the oracle's.
func TestParkUnknownPipeline(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { runParkOracle(t, seed) })
	}
}

func runParkOracle(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 0x7061726b))
	th := newTestHub(t, func(c *Config) {
		if seed%2 == 1 {
			c.Resident = time.Nanosecond // evictions and reloads, at unpark too
		}
	})
	temps, other := th.pipes[0], compile(t, otherYAML)
	pipes := []*operators.Pipeline{temps, other}

	const nEdges = 2
	edges := make([]*simEdge, nEdges)
	outbox := make([][]mixedEntry, nEdges)
	lastOf := [2][]map[winID][]byte{make([]map[winID][]byte, nEdges), make([]map[winID][]byte, nEdges)}
	otherEntries := uint64(0)
	for i := range edges {
		edges[i] = &simEdge{id: fmt.Sprintf("edge-%d", i)}
		var last []map[winID][]byte
		outbox[i], last = genMixedOutbox(r, pipes, 20+r.IntN(60))
		lastOf[0][i], lastOf[1][i] = last[0], last[1]
		for _, en := range outbox[i] {
			if en.p != nil && en.p.Pipeline == "other" {
				otherEntries++
			}
		}
	}
	hello := func() {
		for _, e := range edges {
			res, err := th.Hello(e.id, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			e.sent = res.AckedSeq
		}
	}
	hello()
	send := func(i int, first, last uint64) {
		e := edges[i]
		b := &runnelv1.Batch{EdgeId: e.id, Epoch: 1, FirstSeq: first, LastSeq: last}
		for s := first; s <= last; s++ {
			if en := outbox[i][s-1]; en.p != nil {
				b.Partials = append(b.Partials, en.p)
			}
		}
		for j, p := range pipes {
			b.Watermarks = append(b.Watermarks, &runnelv1.Watermark{Pipeline: p.Name, WatermarkMs: outbox[i][last-1].wms[j]})
		}
		if err := th.Apply(b); err != nil {
			t.Fatalf("Apply %s %d..%d: %v", e.id, first, last, err)
		}
		e.sent = max(e.sent, last)
	}
	for range 300 {
		switch x := r.IntN(100); {
		case x < 60:
			i := r.IntN(nEdges)
			e := edges[i]
			_, acked, _ := th.Acked(e.id)
			first := e.sent + 1
			if r.IntN(4) == 0 {
				first = acked + 1 + uint64(r.IntN(int(e.sent-acked)+1))
			}
			if int(first) > len(outbox[i]) {
				continue
			}
			send(i, first, min(first+uint64(r.IntN(8)), uint64(len(outbox[i]))))
		case x < 85:
			th.commit()
		case x < 92:
			th.restart()
			hello()
		default:
			th.crash()
			hello()
		}
	}
	for done := false; !done; {
		done = true
		for i, e := range edges {
			if _, acked, _ := th.Acked(e.id); int(acked) < len(outbox[i]) {
				done = false
				e.sent = acked
				send(i, acked+1, uint64(len(outbox[i])))
			}
		}
		th.commit()
	}
	checkOracle(t, th, temps, lastOf[0])
	st := th.Status()
	if len(st.Parked) != 1 || st.Parked[0].Pipeline != "other" || st.Parked[0].Partials != otherEntries ||
		len(st.Parked[0].Edges) != nEdges || st.Parked[0].Bytes <= 0 {
		t.Fatalf("parked %+v, want %d partials of other from %d edges", st.Parked, otherEntries, nEdges)
	}
	if _, _, err := th.Query(Query{Pipeline: "other"}); !errors.Is(err, ErrBadQuery) {
		t.Fatalf("query of the unknown pipeline: %v", err)
	}
	// What is parked survives a restart, counted the same.
	th.restart()
	if st2 := th.Status(); len(st2.Parked) != 1 || st2.Parked[0].Partials != otherEntries || st2.Parked[0].Bytes != st.Parked[0].Bytes {
		t.Fatalf("after a restart parked %+v, before %+v", st2.Parked, st.Parked)
	}

	// The hub learns the pipeline. A crash before the first commit applies
	// nothing twice: the next Open applies the parked partials again.
	th.pipes = append(th.pipes, other)
	th.crash()
	if st := th.Status(); st.PartialsUnparked != otherEntries || len(st.Parked) != 0 {
		t.Fatalf("after the open with other: %d unparked, parked %+v; want %d", st.PartialsUnparked, st.Parked, otherEntries)
	}
	th.crash()
	if st := th.Status(); st.PartialsUnparked != otherEntries {
		t.Fatalf("after a crash: %d unparked, want %d", st.PartialsUnparked, otherEntries)
	}
	th.commit()
	checkOracle(t, th, other, lastOf[1])
	checkOracle(t, th, temps, lastOf[0])
	th.restart()
	if st := th.Status(); st.PartialsUnparked != 0 || len(st.Parked) != 0 {
		t.Fatalf("after the commit the parked partials stay: %+v", st)
	}
	checkOracle(t, th, other, lastOf[1])
}

// TestParkQuota: an edge's partials of unknown pipelines beyond its
// parking quota are refused per entry, with a reason saying so; the batch
// resent without them applies; the quota counts after a restart too, and
// frees up when parked partials expire after Retention.
func TestParkQuota(t *testing.T) {
	other := compile(t, otherYAML)
	one := partial(other, 0, "k0", 0, 1)
	size := parkedPartialSize("e", one)
	quota := 3*size + parkedWatermarkSize("e", "other", 0)
	th := newTestHub(t, func(c *Config) { c.ParkedQuota = quota })
	p := th.pipes[0]
	var ps []*runnelv1.Partial
	for i := range 5 {
		ps = append(ps, partial(other, uint64(i+2), fmt.Sprintf("k%d", i), 0, 1))
	}
	// With a bad partial of a known pipeline too: every refusal is named.
	long := partial(p, 1, "k", 0, 1)
	long.Key = make([]byte, MaxKeyBytes+1)
	b := wm(batch("e", 1, 1, 6, append([]*runnelv1.Partial{long}, ps...)...), "other", 1000)
	err := th.Apply(b)
	var re *RefusedError
	if !errors.As(err, &re) || len(re.Entries) != 3 || re.Entries[0].Seq != 1 || re.Entries[1].Seq != 5 || re.Entries[2].Seq != 6 ||
		!strings.Contains(re.Entries[0].Reason, "key of") ||
		!strings.Contains(re.Entries[1].Reason, `the hub does not know pipeline "other", and this edge's parking quota`) {
		t.Fatalf("err %v, want seq 1 refused for its key, 5 and 6 for the quota", err)
	}
	if st := th.Status(); st.Batches != 0 || len(st.Parked) != 0 || st.EdgesKnown != 0 {
		t.Fatalf("a refused batch parked something: %+v", st)
	}
	must(t, th.Apply(wm(batch("e", 1, 1, 6, partial(p, 1, "k", 0, 1), ps[0], ps[1], ps[2]), "other", 1000)))
	th.commit()
	st := th.Status()
	if len(st.Parked) != 1 || st.Parked[0].Partials != 3 || st.Parked[0].Bytes != quota || st.PartialsParked != 3 {
		t.Fatalf("parked %+v (%d), want 3 partials of %d bytes", st.Parked, st.PartialsParked, quota)
	}
	th.restart()
	if err := th.Apply(batch("e", 1, 7, 7, partial(other, 7, "k9", 0, 1))); !errors.As(err, &re) {
		t.Fatalf("over the quota after a restart: %v", err)
	}
	// A known pipeline's partials are never held back by the quota.
	must(t, th.Apply(batch("e", 1, 7, 7, partial(p, 7, "k", 1000, 1))))
	th.commit()

	// Past Retention (+1/16) the parked partials go, and the quota frees.
	th.clock.Advance(time.Hour + 4*time.Minute)
	th.commit()
	if st := th.Status(); len(st.Parked) != 0 || st.ParkedExpired != 3 {
		t.Fatalf("after retention parked %+v, %d expired", st.Parked, st.ParkedExpired)
	}
	must(t, th.Apply(batch("e", 1, 8, 10, partial(other, 8, "k0", 0, 1), partial(other, 9, "k1", 0, 1), partial(other, 10, "k2", 0, 1))))
	th.commit()
	th.restart()
	if st := th.Status(); len(st.Parked) != 1 || st.Parked[0].Partials != 3 {
		t.Fatalf("parked after restart %+v", st.Parked)
	}
}

// TestParkRetention: parked partials older than Retention are deleted and
// are not applied when the pipeline is configured later; younger ones are.
func TestParkRetention(t *testing.T) {
	th := newTestHub(t, nil) // Retention 1h
	other := compile(t, otherYAML)
	must(t, th.Apply(wm(batch("e", 1, 1, 1, partial(other, 1, "old", 0, 1)), "other", 5000)))
	th.commit()
	th.clock.Advance(50 * time.Minute)
	must(t, th.Apply(batch("e", 1, 2, 2, partial(other, 2, "new", 0, 1))))
	th.commit()
	th.clock.Advance(15 * time.Minute) // "old" is past Retention + 1/16, "new" is not
	th.commit()
	if st := th.Status(); st.ParkedExpired != 1 || len(st.Parked) != 1 || st.Parked[0].Partials != 1 {
		t.Fatalf("status %+v", st)
	}
	th.pipes = append(th.pipes, other)
	th.restart()
	th.commit()
	rs, _, err := th.Query(Query{Pipeline: "other"})
	if err != nil || len(rs) != 1 || string(rs[0].Key) != string(encKey("new")) {
		t.Fatalf("results %+v, %v; want the younger one only", rs, err)
	}
}

// TestUnparkMismatch: a parked partial that does not decode with the
// aggregates the pipeline is configured with (the edge ran another spec)
// is dropped with a log line and counted as refused; the others apply.
func TestUnparkMismatch(t *testing.T) {
	logs := &logBuffer{}
	th := newTestHub(t, func(c *Config) { c.Logger = logs.logger() })
	other := compile(t, otherYAML)
	bad := partial(other, 2, "bad", 0, 1)
	bad.State = stateOf(th.pipes[0].Aggregates, 1) // temps' aggregates
	must(t, th.Apply(wm(batch("e", 1, 1, 2, partial(other, 1, "good", 0, 1), bad), "other", 5000)))
	th.commit()
	if got := logs.lines("parking what an edge sends of a pipeline the hub does not know", "pipeline=other", "edge=e"); len(got) != 1 {
		t.Fatalf("log lines %q, want one per (edge, pipeline)", logs.lines("parked"))
	}
	th.pipes = append(th.pipes, other)
	th.restart()
	if st := th.Status(); st.PartialsUnparked != 1 || st.PartialsRefused != 1 {
		t.Fatalf("status %+v", st)
	}
	if got := logs.lines("does not fit its pipeline", "seq=2"); len(got) != 1 {
		t.Fatalf("log lines %q", logs.lines("open:"))
	}
	th.commit()
	rs, _, err := th.Query(Query{Pipeline: "other"})
	if err != nil || len(rs) != 1 || string(rs[0].Key) != string(encKey("good")) {
		t.Fatalf("results %+v, %v", rs, err)
	}
}

// TestUnparkReloadsEvicted: a pipeline the hub merged, then did not know
// for a while (its partials parked), then knows again: a parked partial
// of a window emitted and evicted back then reloads the window, so the
// other edges' partials of it stay in the next version.
func TestUnparkReloadsEvicted(t *testing.T) {
	other := compile(t, otherYAML)
	th := newTestHub(t, func(c *Config) { c.Resident = time.Nanosecond })
	th.pipes = append(th.pipes, other)
	th.restart()
	must(t, th.Apply(wm(batch("a", 1, 1, 1, partial(other, 1, "k", 0, 1)), "other", 5000)))
	must(t, th.Apply(wm(batch("b", 1, 1, 1, partial(other, 1, "k", 0, 1, 1)), "other", 5000)))
	th.commit()
	if st := th.Status(); st.WindowsEvicted != 1 {
		t.Fatalf("evicted %d", st.WindowsEvicted)
	}
	th.pipes = th.pipes[:2]
	th.restart()
	must(t, th.Apply(batch("a", 1, 2, 2, partial(other, 2, "k", 0, 1, 1, 1, 1, 1))))
	th.commit()
	th.pipes = append(th.pipes, other)
	th.restart()
	th.commit()
	rs, _, err := th.Query(Query{Pipeline: "other", AllVersions: true})
	if err != nil || len(rs) != 2 {
		t.Fatalf("results %+v, %v; want versions 1 and 2", rs, err)
	}
	vs, _ := resultValues(other.Aggregates, rs[1].State)
	if r := rs[1]; r.Version != 2 || r.Edges != 2 || vs[0].Int != 7 {
		t.Fatalf("version 2: %+v, count %d; want 2 edges, count 7", r, vs[0].Int)
	}
}

// TestUnparkSkipsExpired: a hub that was stopped while parked partials
// passed Retention does not apply them when it opens with their pipeline.
func TestUnparkSkipsExpired(t *testing.T) {
	th := newTestHub(t, nil) // Retention 1h
	other := compile(t, otherYAML)
	must(t, th.Apply(wm(batch("e", 1, 1, 1, partial(other, 1, "stale", 0, 1)), "other", 5000)))
	th.Hub.Close()
	th.clock.Advance(30 * time.Minute)
	th.open()
	must(t, th.Apply(wm(batch("e", 1, 2, 2, partial(other, 2, "fresh", 0, 1)), "other", 6000)))
	th.commit()
	th.Hub.Close()
	th.clock.Advance(40 * time.Minute)
	th.pipes = append(th.pipes, other)
	th.open()
	if st := th.Status(); st.ParkedExpired != 1 || st.PartialsUnparked != 1 {
		t.Fatalf("status %+v", st)
	}
	th.commit()
	rs, _, err := th.Query(Query{Pipeline: "other"})
	if err != nil || len(rs) != 1 || string(rs[0].Key) != string(encKey("fresh")) {
		t.Fatalf("results %+v, %v; want the fresh one only", rs, err)
	}
}
