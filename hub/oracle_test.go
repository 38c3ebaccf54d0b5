package hub

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/window/aggregate"
)

// The oracle test: edges with random outboxes of partials (later versions
// of a window carry more values) and watermark markers, delivered as
// batches with random splits, resends, interleaving, commits, clean restarts
// and crashes. At the end every window's latest result must be the merge of
// each edge's last partial of it, and its versions 1..n without gaps.
//
// It runs with the default residency (nothing leaves memory) and with small
// ones, where windows the watermark passed are evicted after each commit
// and late partials (the edges' watermarks differ, so one edge's window is
// late for the hub) reload them, also after restarts and crashes.

// entry is one outbox entry: a partial, or a watermark marker when p is nil.
type entry struct {
	p  *runnelv1.Partial
	wm int64 // the edge's watermark after this entry
}

type simEdge struct {
	id     string
	outbox []entry // outbox[i] has seq i+1
	sent   uint64  // highest seq sent in this connection
}

type winID struct {
	key   string
	start int64
}

const (
	oracleEdges   = 3
	oracleKeys    = 4
	oracleWindows = 5
)

// genOutbox builds one edge's outbox and returns each window's last partial.
func genOutbox(r *rand.Rand, p *operators.Pipeline, n int) ([]entry, map[winID][]byte) {
	set := p.Aggregates
	states := map[winID]*aggregate.State{}
	versions := map[winID]uint32{}
	last := map[winID][]byte{}
	var out []entry
	wm := int64(0)
	for len(out) < n {
		seq := uint64(len(out) + 1)
		if r.IntN(5) == 0 {
			wm = min(wm+int64(r.IntN(2000)), oracleWindows*1000)
			out = append(out, entry{wm: wm})
			continue
		}
		id := winID{fmt.Sprintf("k%d", r.IntN(oracleKeys)), int64(r.IntN(oracleWindows)) * 1000}
		st := states[id]
		if st == nil {
			st = set.New()
			states[id] = st
		}
		for range 1 + r.IntN(3) {
			addValues(set, st, float64(r.IntN(200)-100))
		}
		versions[id]++
		enc := set.AppendEncode(nil, st)
		last[id] = enc
		out = append(out, entry{wm: wm, p: &runnelv1.Partial{
			Seq: seq, Pipeline: p.Name, Key: encKey(id.key), WindowStart: id.start, WindowEnd: id.start + 1000,
			Version: versions[id], State: enc,
		}})
	}
	// The last entry moves the watermark past every window.
	out = append(out, entry{wm: oracleWindows * 1000})
	return out, last
}

func TestOracle(t *testing.T) {
	for _, resident := range []time.Duration{0, time.Nanosecond, 1500 * time.Millisecond} {
		t.Run(fmt.Sprint("resident=", resident), func(t *testing.T) {
			var total Status
			for seed := range uint64(40) {
				t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
					st := runOracle(t, seed, resident)
					total.WindowsEvicted += st.WindowsEvicted
					total.WindowsReloaded += st.WindowsReloaded
				})
			}
			if t.Failed() {
				return
			}
			// The property is only tested if eviction and reload happened.
			if resident == 0 && total.WindowsEvicted+total.WindowsReloaded != 0 ||
				resident != 0 && (total.WindowsEvicted == 0 || total.WindowsReloaded == 0) {
				t.Fatalf("over all seeds: %d windows evicted, %d reloaded", total.WindowsEvicted, total.WindowsReloaded)
			}
			t.Logf("over all seeds: %d windows evicted, %d reloaded", total.WindowsEvicted, total.WindowsReloaded)
		})
	}
}

// runOracle runs one seed with the given Config.Resident and returns the
// eviction counters summed over the hub's incarnations.
func runOracle(t *testing.T, seed uint64, resident time.Duration) (total Status) {
	r := rand.New(rand.NewPCG(seed, 0x6875620a))
	th := newTestHub(t, func(c *Config) { c.Resident = resident })
	count := func() {
		st := th.Status()
		total.WindowsEvicted += st.WindowsEvicted
		total.WindowsReloaded += st.WindowsReloaded
	}
	p := th.pipes[0]

	edges := make([]*simEdge, oracleEdges)
	lastOf := make([]map[winID][]byte, oracleEdges)
	for i := range edges {
		edges[i] = &simEdge{id: fmt.Sprintf("edge-%d", i)}
		edges[i].outbox, lastOf[i] = genOutbox(r, p, 20+r.IntN(60))
	}
	hello := func(e *simEdge) {
		res, err := th.Hello(e.id, 1, uint64(len(e.outbox)+1))
		if err != nil {
			t.Fatalf("Hello %s: %v", e.id, err)
		}
		e.sent = res.AckedSeq
	}
	for _, e := range edges {
		hello(e)
	}
	send := func(e *simEdge, first, last uint64) {
		b := &runnelv1.Batch{EdgeId: e.id, Epoch: 1, FirstSeq: first, LastSeq: last}
		for s := first; s <= last; s++ {
			if en := e.outbox[s-1]; en.p != nil {
				b.Partials = append(b.Partials, en.p)
			}
		}
		b.Watermarks = []*runnelv1.Watermark{{Pipeline: p.Name, WatermarkMs: e.outbox[last-1].wm}}
		if err := th.Apply(b); err != nil {
			t.Fatalf("Apply %s %d..%d (sent %d): %v", e.id, first, last, e.sent, err)
		}
		e.sent = max(e.sent, last)
	}
	for step := 0; step < 400; step++ {
		switch x := r.IntN(100); {
		case x < 60:
			e := edges[r.IntN(len(edges))]
			_, acked, _ := th.Acked(e.id)
			if int(acked) == len(e.outbox) {
				continue
			}
			first := e.sent + 1
			if r.IntN(4) == 0 { // resend from somewhere already sent
				first = acked + 1 + uint64(r.IntN(int(e.sent-acked)+1))
			}
			if int(first) > len(e.outbox) {
				continue
			}
			last := min(first+uint64(r.IntN(8)), uint64(len(e.outbox)))
			send(e, first, last)
		case x < 85:
			th.commit()
		case x < 90:
			count()
			th.restart()
			for _, e := range edges {
				hello(e)
			}
		case x < 95:
			count()
			th.crash()
			for _, e := range edges {
				hello(e)
			}
		default:
			// A heartbeat.
			e := edges[r.IntN(len(edges))]
			if e.sent > 0 {
				b := &runnelv1.Batch{EdgeId: e.id, Epoch: 1, FirstSeq: e.sent + 1, LastSeq: e.sent}
				if err := th.Apply(b); err != nil && !errors.Is(err, ErrGap) {
					t.Fatalf("heartbeat: %v", err)
				}
			}
		}
	}
	// Drain: every edge sends the rest from its acked sequence.
	for {
		done := true
		for _, e := range edges {
			_, acked, _ := th.Acked(e.id)
			if int(acked) < len(e.outbox) {
				done = false
				e.sent = acked
				send(e, acked+1, uint64(len(e.outbox)))
			}
		}
		th.commit()
		if done {
			break
		}
	}

	rs := checkOracle(t, th, p, lastOf)
	if resident == time.Nanosecond {
		// Only the windows ending at the final watermark stay.
		if st := th.Status(); st.WindowsResident > oracleKeys {
			t.Fatalf("%d windows resident, want at most %d", st.WindowsResident, oracleKeys)
		}
	}
	count()
	if st := th.Status(); st.Results != uint64(len(rs)) && st.Commits > 0 {
		// Results counts this process's emissions only; after restarts it
		// is less. Pipelines().Results counts what is stored.
		if pr := th.Pipelines()[0].Results; pr != uint64(len(rs)) {
			t.Fatalf("pipeline results %d, stored %d", pr, len(rs))
		}
	}
	return total
}

// checkOracle checks that the latest stored result of every window of p
// is the merge of each edge's last partial of it (lastOf, per edge), with
// versions 1..n without gaps, and returns every stored version.
func checkOracle(t *testing.T, th *testHub, p *operators.Pipeline, lastOf []map[winID][]byte) []Result {
	t.Helper()
	set := p.Aggregates
	// The brute-force merge.
	want := map[winID][]aggregate.Value{}
	wantEdges := map[winID]uint32{}
	for i := range lastOf {
		for id := range lastOf[i] {
			wantEdges[id]++
			want[id] = nil
		}
	}
	for id := range want {
		st := set.New()
		for i := range lastOf {
			if enc, ok := lastOf[i][id]; ok {
				if err := set.MergeEncoded(st, enc); err != nil {
					t.Fatal(err)
				}
			}
		}
		vs := make([]aggregate.Value, set.Len())
		for j := range vs {
			vs[j] = set.Result(st, j)
		}
		want[id] = vs
	}

	rs, next, err := th.Query(Query{Pipeline: p.Name, AllVersions: true, Limit: maxLimit})
	if err != nil || next != nil {
		t.Fatalf("Query: %v (next %x)", err, next)
	}
	versions := map[winID]uint32{}
	latest := map[winID]Result{}
	for _, res := range rs {
		id := winID{string(res.Key[2:]), res.Start}
		if res.Version != versions[id]+1 {
			t.Fatalf("%v: version %d after %d", id, res.Version, versions[id])
		}
		versions[id] = res.Version
		latest[id] = res
	}
	if len(latest) != len(want) {
		t.Fatalf("%d windows emitted, want %d", len(latest), len(want))
	}
	for id, w := range want {
		res := latest[id]
		got, err := resultValues(set, res.State)
		if err != nil {
			t.Fatalf("%v: %v", id, err)
		}
		for j := range w {
			if got[j] != w[j] {
				t.Fatalf("%v: aggregate %q = %+v, want %+v (all %+v / %+v)", id, set.Spec(j).Name, got[j], w[j], got, w)
			}
		}
		if res.Edges != wantEdges[id] {
			t.Fatalf("%v: %d edges, want %d", id, res.Edges, wantEdges[id])
		}
	}
	return rs
}
