package hub

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/window/aggregate"
)

// temps3YAML is revision 3 of temps: other aggregates, so not compatible
// with revisions 1 and 2 (tempsYAML, and tempsYAML on another topic).
const temps3YAML = `name: temps
source: {mqtt: {topic: "t/+"}}
event_time: {field: ts}
key: [device]
window: {tumbling: 1s}
aggregates:
  n: count()
  s: sum(v)
`

// tempsRevisions are three managed revisions of temps: 1 and 2 in class
// 1 (2 reads another topic), 3 in class 3.
func tempsRevisions(t testing.TB) []Revision {
	t.Helper()
	return []Revision{
		{Name: "temps", Revision: 1, Class: 1, Pipeline: compile(t, tempsYAML)},
		{Name: "temps", Revision: 2, Class: 1, Pipeline: compile(t, strings.Replace(tempsYAML, `"t/+"`, `"t2/+"`, 1))},
		{Name: "temps", Revision: 3, Class: 3, Pipeline: compile(t, temps3YAML)},
	}
}

// classOf is the class of the test revisions (0: the local pipeline).
func classOf(rev uint32) uint32 {
	if rev == 3 {
		return 3
	}
	return min(rev, 1)
}

// classWin is a window of one class.
type classWin struct {
	class uint32
	id    winID
}

// lastPart is an edge's last partial of a window: its state and revision.
type lastPart struct {
	state []byte
	rev   uint32
}

// revSim drives edges whose outboxes mix the local temps (revision 0) and
// managed revisions 1, 2 and 3 against a test hub, as runOracle does.
type revSim struct {
	t      *testing.T
	r      *rand.Rand
	th     *testHub
	sets   map[uint32]*aggregate.Set // per class
	edges  []*simEdge
	outbox [][]entry
	lastOf []map[classWin]lastPart
	// quiet: while set, the random steps neither restart nor crash the hub.
	quiet bool
}

func newRevSim(t *testing.T, r *rand.Rand, th *testHub, revs []Revision, nEdges int) *revSim {
	s := &revSim{t: t, r: r, th: th, sets: map[uint32]*aggregate.Set{0: th.pipes[0].Aggregates}}
	for _, rv := range revs {
		s.sets[rv.Class] = rv.Pipeline.Aggregates
	}
	for i := range nEdges {
		s.edges = append(s.edges, &simEdge{id: fmt.Sprintf("edge-%d", i)})
		ob, last := s.genOutbox(20 + r.IntN(60))
		s.outbox = append(s.outbox, ob)
		s.lastOf = append(s.lastOf, last)
	}
	return s
}

// genOutbox builds one edge's outbox: partials of random revisions (an
// edge's state of a window carries over between the revisions of one
// class, as an edge keeps it across a compatible change), watermark
// markers, and a last marker past every window.
func (s *revSim) genOutbox(n int) ([]entry, map[classWin]lastPart) {
	states := map[classWin]*aggregate.State{}
	versions := map[classWin]uint32{}
	last := map[classWin]lastPart{}
	var out []entry
	wm := int64(0)
	for len(out) < n {
		seq := uint64(len(out) + 1)
		if s.r.IntN(5) == 0 {
			wm = min(wm+int64(s.r.IntN(2000)), oracleWindows*1000)
			out = append(out, entry{wm: wm})
			continue
		}
		rev := uint32(s.r.IntN(4))
		cw := classWin{classOf(rev), winID{fmt.Sprintf("k%d", s.r.IntN(oracleKeys)), int64(s.r.IntN(oracleWindows)) * 1000}}
		set := s.sets[cw.class]
		st := states[cw]
		if st == nil {
			st = set.New()
			states[cw] = st
		}
		for range 1 + s.r.IntN(3) {
			addValues(set, st, float64(s.r.IntN(200)-100))
		}
		versions[cw]++
		enc := set.AppendEncode(nil, st)
		last[cw] = lastPart{enc, rev}
		out = append(out, entry{wm: wm, p: &runnelv1.Partial{
			Seq: seq, Pipeline: "temps", Revision: rev, Key: encKey(cw.id.key), WindowStart: cw.id.start,
			WindowEnd: cw.id.start + 1000, Version: versions[cw], State: enc,
		}})
	}
	return append(out, entry{wm: oracleWindows * 1000}), last
}

func (s *revSim) hello() {
	s.t.Helper()
	for _, e := range s.edges {
		res, err := s.th.Hello(e.id, 1, uint64(len(e.outbox)+1))
		if err != nil {
			s.t.Fatalf("Hello %s: %v", e.id, err)
		}
		e.sent = res.AckedSeq
	}
}

// send applies entries first..last of edge i, with the edge's watermark
// after last. Partials of revisions the hub does not know are parked:
// the batch must apply all the same.
func (s *revSim) send(i int, first, last uint64) {
	s.t.Helper()
	e := s.edges[i]
	b := &runnelv1.Batch{EdgeId: e.id, Epoch: 1, FirstSeq: first, LastSeq: last}
	for q := first; q <= last; q++ {
		if en := s.outbox[i][q-1]; en.p != nil {
			b.Partials = append(b.Partials, en.p)
		}
	}
	for rev := range uint32(4) { // as an edge running each of them would
		rwm(b, rev, s.outbox[i][last-1].wm)
	}
	if err := s.th.Apply(b); err != nil {
		s.t.Fatalf("Apply %s %d..%d: %v", e.id, first, last, err)
	}
	e.sent = max(e.sent, last)
}

// step takes one random step: a batch (sometimes a resend), a commit, a
// restart or a crash.
func (s *revSim) step() {
	s.t.Helper()
	switch x := s.r.IntN(100); {
	case x < 60:
		i := s.r.IntN(len(s.edges))
		e := s.edges[i]
		_, acked, _ := s.th.Acked(e.id)
		first := e.sent + 1
		if s.r.IntN(4) == 0 {
			first = acked + 1 + uint64(s.r.IntN(int(e.sent-acked)+1))
		}
		if int(first) > len(s.outbox[i]) {
			return
		}
		s.send(i, first, min(first+uint64(s.r.IntN(8)), uint64(len(s.outbox[i]))))
	case x < 88 || s.quiet:
		s.th.commit()
	case x < 94:
		s.th.restart()
		s.hello()
	default:
		s.th.crash()
		s.hello()
	}
}

// drain has every edge send the rest from its acked sequence.
func (s *revSim) drain() {
	s.t.Helper()
	for done := false; !done; {
		done = true
		for i, e := range s.edges {
			if _, acked, _ := s.th.Acked(e.id); int(acked) < len(s.outbox[i]) {
				done = false
				e.sent = acked
				s.send(i, acked+1, uint64(len(s.outbox[i])))
			}
		}
		s.th.commit()
	}
}

// check compares each class's stored results with the brute-force merge
// of every edge's last partial of each window within that class: values,
// edges, the revisions merged, versions 1..n, and no window of another
// class.
func (s *revSim) check(classes ...uint32) {
	s.t.Helper()
	cat := s.th.cat.Load()
	for _, c := range classes {
		pp := cat.class("temps", c)
		if pp == nil {
			s.t.Fatalf("class %d unknown", c)
		}
		set := s.sets[c]
		type want struct {
			vals  []aggregate.Value
			edges uint32
			revs  []uint32
		}
		wants := map[winID]*want{}
		for _, last := range s.lastOf {
			for cw, lp := range last {
				if cw.class != c {
					continue
				}
				w := wants[cw.id]
				if w == nil {
					w = &want{}
					wants[cw.id] = w
				}
				w.edges++
				if i, found := slices.BinarySearch(w.revs, lp.rev); !found {
					w.revs = slices.Insert(w.revs, i, lp.rev)
				}
			}
		}
		for id, w := range wants {
			st := set.New()
			for _, last := range s.lastOf {
				if lp, ok := last[classWin{c, id}]; ok {
					must(s.t, set.MergeEncoded(st, lp.state))
				}
			}
			for j := range set.Len() {
				w.vals = append(w.vals, set.Result(st, j))
			}
			if c == 0 {
				w.revs = nil
			}
		}
		rs, next, err := s.th.queryPipe(pp, Query{Pipeline: "temps", AllVersions: true, Limit: maxLimit}, nil)
		if err != nil || next != nil {
			s.t.Fatalf("class %d: query: %v (next %x)", c, err, next)
		}
		versions := map[winID]uint32{}
		latest := map[winID]Result{}
		for _, res := range rs {
			id := winID{string(res.Key[2:]), res.Start}
			if res.Version != versions[id]+1 {
				s.t.Fatalf("class %d %v: version %d after %d", c, id, res.Version, versions[id])
			}
			if res.Class != c || res.Pipeline != "temps" {
				s.t.Fatalf("class %d %v: result of pipeline %q class %d", c, id, res.Pipeline, res.Class)
			}
			versions[id] = res.Version
			latest[id] = res
		}
		if len(latest) != len(wants) {
			s.t.Fatalf("class %d: %d windows emitted, want %d", c, len(latest), len(wants))
		}
		for id, w := range wants {
			res, ok := latest[id]
			if !ok {
				s.t.Fatalf("class %d %v: not emitted", c, id)
			}
			got, err := resultValues(set, res.State)
			if err != nil {
				s.t.Fatalf("class %d %v: %v", c, id, err)
			}
			if !slices.Equal(got, w.vals) {
				s.t.Fatalf("class %d %v: %+v, want %+v", c, id, got, w.vals)
			}
			if res.Edges != w.edges || !slices.Equal(res.Revisions, w.revs) {
				s.t.Fatalf("class %d %v: edges %d revisions %v, want %d %v", c, id, res.Edges, res.Revisions, w.edges, w.revs)
			}
		}
	}
}

// TestRevisionOracle: edges send partials of the local temps and of
// revisions 1 and 2 (one class) and 3 (another) of the managed temps,
// out of order, resent, across commits, restarts and crashes. Each
// class's results are the brute-force merge of the edges' last partials
// of it, with the revisions merged; nothing crosses classes. Queries pick
// the class by revision.
func TestRevisionOracle(t *testing.T) {
	for _, resident := range []time.Duration{0, time.Nanosecond} {
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("resident=%v/seed=%d", resident, seed), func(t *testing.T) {
				revs := tempsRevisions(t)
				th := newTestHub(t, func(c *Config) { c.Revisions, c.Resident = revs, resident })
				s := newRevSim(t, rand.New(rand.NewPCG(seed, 0x72657673)), th, revs, 3)
				s.hello()
				for range 300 {
					s.step()
				}
				s.drain()
				s.check(0, 1, 3)

				// Revision 0 reads the latest revision's class; 1 and 2 the
				// other; an unknown revision is refused.
				latest := func(rev uint32) []Result {
					rs, _, err := th.Query(Query{Pipeline: "temps", Revision: rev, Limit: maxLimit})
					if err != nil {
						t.Fatalf("query revision %d: %v", rev, err)
					}
					return rs
				}
				one, two, three, zero := latest(1), latest(2), latest(3), latest(0)
				if len(one) == 0 || len(three) == 0 || !equalResults(one, two) || !equalResults(zero, three) || equalResults(one, three) {
					t.Fatalf("revisions 1, 2, 3, 0: %d, %d, %d, %d results", len(one), len(two), len(three), len(zero))
				}
				if _, _, err := th.Query(Query{Pipeline: "temps", Revision: 4}); !errors.Is(err, ErrBadQuery) {
					t.Fatalf("query of revision 4: %v", err)
				}
				if pi := th.Pipelines(); len(pi) != 4 || pi[0].Class != 0 || pi[2].Class != 1 || !slices.Equal(pi[2].Revisions, []uint32{1, 2}) ||
					pi[3].Class != 3 || !slices.Equal(pi[3].Revisions, []uint32{3}) || pi[3].Pipeline != revs[2].Pipeline || pi[2].Pipeline != revs[1].Pipeline {
					t.Fatalf("pipelines %+v", pi)
				}
			})
		}
	}
}

func equalResults(a, b []Result) bool {
	return slices.EqualFunc(a, b, func(x, y Result) bool {
		return string(x.Key) == string(y.Key) && x.Start == y.Start && x.Version == y.Version && string(x.State) == string(y.State) &&
			x.Class == y.Class && slices.Equal(x.Revisions, y.Revisions)
	})
}

// TestDefineUnparks: the hub knows the local temps and revision 1 only.
// Partials of revisions 2 and 3 are parked while the edges' other
// partials keep applying (batches are never refused, acks advance). Then
// revision 2 is defined from another goroutine while the edges stream,
// and 3 later: the parked partials and watermarks apply live, and every
// class's results equal the oracle. A copy of the store taken after the
// last Define but before the commit that follows it, opened with every
// revision, applies them again, once; after a restart nothing is parked
// and nothing is applied twice.
func TestDefineUnparks(t *testing.T) {
	for seed := range uint64(16) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { runDefineUnparks(t, seed) })
	}
}

func runDefineUnparks(t *testing.T, seed uint64) {
	revs := tempsRevisions(t)
	known := revs[:1]
	th := newTestHub(t, func(c *Config) {
		c.Revisions = known
		if seed%2 == 1 {
			c.Resident = time.Nanosecond
		}
	})
	s := newRevSim(t, rand.New(rand.NewPCG(seed, 0x64656669)), th, revs, 3)
	s.hello()
	for range 150 {
		s.step()
	}
	th.commit()
	st := th.Status()
	if st.BatchesRefused != 0 || len(st.Parked) != 1 || st.Parked[0].Pipeline != "temps" || st.Parked[0].Partials == 0 {
		t.Fatalf("before Define: %d batches refused, %d parked, %+v", st.BatchesRefused, st.PartialsParked, st.Parked)
	}
	for _, e := range s.edges {
		if _, acked, _ := th.Acked(e.id); acked == 0 && e.sent > 0 {
			t.Fatalf("%s: nothing acked of %d sent: the uplink stalls", e.id, e.sent)
		}
	}

	// Revision 2, from another goroutine while the edges go on.
	done := make(chan error, 1)
	go func() { done <- th.Define(revs[1]) }()
	s.quiet = true
	for range 20 {
		s.step()
	}
	must(t, <-done)
	known = revs[:2]
	s.quiet = false
	for range 100 {
		s.step()
	}

	// Revision 3, then a copy of the store before any commit.
	th.commit()
	var parked3 uint64
	for _, p := range th.Status().Parked {
		if !slices.Equal(p.Revisions, []uint32{3}) {
			t.Fatalf("before revision 3 is defined, parked %+v", th.Status().Parked)
		}
		parked3 = p.Partials
	}
	must(t, th.Define(revs[2]))
	known = revs
	copyDir := t.TempDir()
	must(t, th.db.View(func(tx *bolt.Tx) error { return tx.CopyFile(filepath.Join(copyDir, "hub.db"), 0o600) }))
	parkedAtCopy := th.Status().Parked
	th.commit()
	if st := th.Status(); len(st.Parked) != 0 {
		t.Fatalf("after the Defines, parked %+v", st.Parked)
	}
	s.drain()
	s.check(0, 1, 3)

	th.restart()
	if st := th.Status(); st.PartialsUnparked != 0 || len(st.Parked) != 0 {
		t.Fatalf("after a restart: %d unparked, parked %+v", st.PartialsUnparked, st.Parked)
	}
	s.check(0, 1, 3)

	// The copy: what Define applied is not in it, its parked records are.
	th2 := &testHub{t: t, dir: copyDir, clock: th.clock, pipes: th.pipes, cfg: th.cfg}
	th2.open()
	t.Cleanup(func() { th2.Hub.Close() })
	if st := th2.Status(); len(st.Parked) != 0 || len(parkedAtCopy) != 0 || st.PartialsUnparked != parked3 {
		t.Fatalf("copy: %d unparked, want %d; parked %+v (at the copy %+v)", st.PartialsUnparked, parked3, st.Parked, parkedAtCopy)
	}
	s.th = th2
	s.hello()
	s.drain()
	s.check(0, 1, 3)
	th2.restart()
	if st := th2.Status(); st.PartialsUnparked != 0 || len(st.Parked) != 0 {
		t.Fatalf("copy after a restart: %d unparked, parked %+v", st.PartialsUnparked, st.Parked)
	}
	s.check(0, 1, 3)
}

// rpartial is a temps partial of revision rev, with state of set.
func rpartial(set *aggregate.Set, rev uint32, seq uint64, key string, start int64, vs ...float64) *runnelv1.Partial {
	return &runnelv1.Partial{Seq: seq, Pipeline: "temps", Revision: rev, Key: encKey(key), WindowStart: start, WindowEnd: start + 1000,
		Version: 1, State: stateOf(set, vs...)}
}

// TestDefineRefusals: Define refuses a revision in another class than the
// one the hub knows it in, one not compatible with its class, and
// malformed ones, with ErrBadRevision; each refusal changes nothing (the
// pipelines, the parked partials and what a query finds read the same).
// Define of a known revision in its class is a no-op.
func TestDefineRefusals(t *testing.T) {
	revs := tempsRevisions(t)
	th := newTestHub(t, func(c *Config) { c.Revisions = revs[:2] })
	set1, set3 := revs[0].Pipeline.Aggregates, revs[2].Pipeline.Aggregates
	must(t, th.Apply(rwm(rwm(batch("e", 1, 1, 2, rpartial(set1, 1, 1, "k", 0, 1), rpartial(set3, 3, 2, "k", 0, 5)), 1, 5000), 3, 5000)))
	th.commit()
	state := func() string {
		rs, _, err := th.Query(Query{Pipeline: "temps", AllVersions: true})
		st := th.Status()
		return fmt.Sprintf("%+v|%+v|%d|%v|%+v|%d", th.Pipelines(), st.Parked, len(rs), err, th.Hub.cat.Load().revs, st.PartialsUnparked)
	}
	before := state()
	other := compile(t, otherYAML)
	for _, tc := range []struct {
		name string
		r    Revision
		want string
	}{
		{"class change", Revision{"temps", 2, 2, revs[1].Pipeline}, "the hub has it in class 1, not 2"},
		{"not compatible with its class", Revision{"temps", 3, 1, revs[2].Pipeline}, "not compatible with class 1 (aggregates changed)"},
		{"revision 0", Revision{"temps", 0, 0, revs[0].Pipeline}, "revision 0 is a local pipeline's"},
		{"class after revision", Revision{"temps", 3, 4, revs[2].Pipeline}, "class 4: a class is the first revision of its run, 1..3"},
		{"class 0", Revision{"temps", 3, 0, revs[2].Pipeline}, "class 0"},
		{"another pipeline's spec", Revision{"temps", 4, 4, other}, `the pipeline is named "other"`},
		{"not compiled", Revision{"temps", 4, 4, nil}, "not compiled"},
		{"empty name", Revision{"", 4, 4, revs[0].Pipeline}, "name of 0 bytes"},
		{"reserved character", Revision{"temps@1", 4, 4, revs[0].Pipeline}, `the name holds '@'`},
	} {
		err := th.Define(tc.r)
		if !errors.Is(err, ErrBadRevision) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Define: %v, want ErrBadRevision saying %q", tc.name, err, tc.want)
		}
		th.commit()
		if after := state(); after != before {
			t.Fatalf("%s: the refusal changed the state:\n%s\n%s", tc.name, before, after)
		}
	}
	// The same revision in its class again: nothing changes either.
	must(t, th.Define(revs[0]))
	th.commit()
	if after := state(); after != before {
		t.Fatalf("Define of a known revision changed the state:\n%s\n%s", before, after)
	}
	th.Hub.Close()
	if err := th.Define(revs[2]); !errors.Is(err, ErrClosed) {
		t.Fatalf("Define after Close: %v", err)
	}
}

// TestConfigRevisions: Validate lists every problem of Config.Revisions at
// once, as Define would refuse them, and a local pipeline whose name holds
// the class separator.
func TestConfigRevisions(t *testing.T) {
	revs := tempsRevisions(t)
	bad := compile(t, tempsYAML)
	bad.Name = "a@b"
	err := (&Config{Dir: "x", Pipelines: []*operators.Pipeline{bad}, Revisions: []Revision{
		revs[0], revs[1], {"temps", 1, 1, revs[0].Pipeline}, // a repeat in its class: fine
		{"temps", 2, 2, revs[1].Pipeline},
		{"temps", 4, 1, revs[2].Pipeline},
		{"temps", 0, 0, revs[0].Pipeline},
	}}).Validate()
	for _, want := range []string{`pipeline "a@b": the name holds '@'`, "revisions[3]: hub: revision 2 of \"temps\": the hub has it in class 1, not 2",
		"revisions[4]: hub: revision 4 of \"temps\": not compatible with class 1", "revisions[5]"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "revisions[2]") || strings.Count(err.Error(), "\n") != 3 {
		t.Errorf("Validate: %v, want 4 problems", err)
	}
	if _, err := Open(Config{Dir: t.TempDir(), Revisions: []Revision{{"temps", 0, 0, revs[0].Pipeline}}}); !errors.Is(err, ErrBadRevision) {
		t.Fatalf("Open: %v", err)
	}
}

// TestRevisionWatermarks: an edge's watermark is of one revision: it
// moves the class of that revision (or the local pipeline, revision 0) and
// no other, so an edge running revision 3 does not hold back the
// watermark of revision 1's class, nor moves it.
func TestRevisionWatermarks(t *testing.T) {
	revs := tempsRevisions(t)
	th := newTestHub(t, func(c *Config) { c.Revisions = revs })
	set1, set3 := revs[0].Pipeline.Aggregates, revs[2].Pipeline.Aggregates
	must(t, th.Apply(rwm(batch("a", 1, 1, 1, rpartial(set1, 1, 1, "k", 0, 1)), 1, 3000)))
	must(t, th.Apply(rwm(rwm(batch("b", 1, 1, 1, rpartial(set3, 3, 1, "k", 0, 1)), 3, 1000), 2, 3500)))
	must(t, th.Apply(rwm(batch("c", 1, 1, 0), 0, 500)))
	th.commit()
	if got, want := th.classWatermarks(), "map[0:500 1:3000 3:1000]"; got != want {
		t.Fatalf("hub watermarks per class %s, want %s", got, want)
	}
	th.restart()
	must(t, th.Apply(rwm(batch("a", 1, 2, 1), 1, 5000)))
	must(t, th.Apply(rwm(rwm(batch("b", 1, 2, 1), 3, 2000), 2, 4000)))
	th.commit()
	if got, want := th.classWatermarks(), "map[0:500 1:4000 3:2000]"; got != want {
		t.Fatalf("after a restart: hub watermarks per class %s, want %s", got, want)
	}
	if e := th.Edges(); e[0].Watermarks["temps"] != 5000 || e[1].Watermarks["temps"] != 4000 || e[2].Watermarks["temps"] != 500 {
		t.Fatalf("edges %+v", e)
	}
}

// classWatermarks formats the hub watermark of each class of temps.
func (th *testHub) classWatermarks() string {
	out := map[uint32]int64{}
	for _, pi := range th.Pipelines() {
		if pi.Pipeline.Name == "temps" && pi.HasWatermark {
			out[pi.Class] = pi.Watermark
		}
	}
	return fmt.Sprint(out)
}

// rwm adds the edge's watermark of revision rev of temps to b.
func rwm(b *runnelv1.Batch, rev uint32, ms int64) *runnelv1.Batch {
	b.Watermarks = append(b.Watermarks, &runnelv1.Watermark{Pipeline: "temps", Revision: rev, WatermarkMs: ms})
	return b
}

// TestEndOfTime: an edge whose revision ended (an incompatible one
// replaced it) sends the end of time as that revision's last watermark.
// It is no clock error: nothing is clamped or logged, the edge holds the
// old class back no more while it lives on, the class's last windows are
// emitted (its hub watermark is bounded by the clock), and the end of
// time survives a restart without a warning; the edge's watermark shown
// for the pipeline is the new revision's.
func TestEndOfTime(t *testing.T) {
	revs := tempsRevisions(t)
	logs := &logBuffer{}
	th := newTestHub(t, func(c *Config) { c.Revisions, c.Logger = revs, logs.logger() })
	set1, set3 := revs[0].Pipeline.Aggregates, revs[2].Pipeline.Aggregates
	now := th.nowMs()
	must(t, th.Apply(rwm(batch("a", 1, 1, 1, rpartial(set1, 1, 1, "k", now, 1)), 1, now)))
	must(t, th.Apply(rwm(batch("b", 1, 1, 1, rpartial(set1, 1, 1, "k", now+1000, 1)), 1, now+500)))
	th.commit()
	// b switches to revision 3: its revision 1 ends.
	must(t, th.Apply(rwm(rwm(batch("b", 1, 2, 2, rpartial(set3, 3, 2, "k", now+1000, 1)), 1, endOfTime), 3, now+1500)))
	must(t, th.Apply(rwm(batch("a", 1, 2, 1), 1, now+3000)))
	th.commit()
	if got, want := th.classWatermarks(), fmt.Sprintf("map[1:%d 3:%d]", now+3000, now+1500); got != want {
		t.Fatalf("hub watermarks %s, want %s", got, want)
	}
	rs, _, err := th.Query(Query{Pipeline: "temps", Revision: 1})
	if err != nil || len(rs) != 2 {
		t.Fatalf("class 1 results %+v, %v; want both windows", rs, err)
	}
	if st := th.Status(); st.WatermarksClamped != 0 || len(st.Clamps) != 0 {
		t.Fatalf("the end of time was clamped: %+v", st)
	}
	if e := th.Edges(); e[1].Watermarks["temps"] != now+1500 {
		t.Fatalf("edge b's watermark %+v, want revision 3's", e[1].Watermarks)
	}
	th.restart()
	if got := logs.lines("ahead of the clock"); len(got) != 0 {
		t.Fatalf("log lines %q", got)
	}
	// a goes quiet for good; the class ends at the clock's bound.
	must(t, th.Apply(rwm(batch("a", 1, 2, 1), 1, endOfTime)))
	th.commit()
	if w := th.Pipelines()[2].Watermark; w != th.clock.Now().Add(time.Hour).UnixMilli() {
		t.Fatalf("class 1's watermark %d with every edge ended, want the clock's bound", w)
	}
}

// TestDefineParkedWatermark: an edge sends partials of a revision the hub
// does not know, with its watermark, and goes quiet. Define applies the
// parked watermark too, so the class's windows are emitted without the
// edge sending anything more; the results name the revision.
func TestDefineParkedWatermark(t *testing.T) {
	revs := tempsRevisions(t)
	th := newTestHub(t, nil)
	set3 := revs[2].Pipeline.Aggregates
	must(t, th.Apply(rwm(batch("e", 1, 1, 2, rpartial(set3, 3, 1, "k", 0, 1, 2), rpartial(set3, 3, 2, "k", 1000, 3)), 3, 1500)))
	th.commit()
	if st := th.Status(); len(st.Parked) != 1 || st.Parked[0].Partials != 2 || !slices.Equal(st.Parked[0].Revisions, []uint32{3}) {
		t.Fatalf("parked %+v", st.Parked)
	}
	if _, _, err := th.Query(Query{Pipeline: "temps", Revision: 3}); !errors.Is(err, ErrBadQuery) {
		t.Fatalf("query of an unknown revision: %v", err)
	}
	must(t, th.Define(revs[2]))
	th.commit()
	rs, _, err := th.Query(Query{Pipeline: "temps", Revision: 3})
	if err != nil || len(rs) != 1 || rs[0].Start != 0 || rs[0].Class != 3 || !slices.Equal(rs[0].Revisions, []uint32{3}) {
		t.Fatalf("results %+v, %v; want window 0 of class 3, from revision 3", rs, err)
	}
	if vs, _ := resultValues(set3, rs[0].State); vs[0].Int != 2 || vs[1].Float != 3 {
		t.Fatalf("values %+v", vs)
	}
	if st := th.Status(); len(st.Parked) != 0 || st.PartialsUnparked != 2 {
		t.Fatalf("status %+v", st)
	}
	// The quota the parked records took is free again.
	th.Hub.mu.Lock()
	parked := th.edges[0].parked
	th.Hub.mu.Unlock()
	if parked != 0 {
		t.Fatalf("edge still has %d bytes parked", parked)
	}
}

// TestSubscribeFollowsClass: a subscription reads the class of the
// latest revision; when Define makes a revision of another class the
// latest, the subscription is closed, and a new one reads the new class.
func TestSubscribeFollowsClass(t *testing.T) {
	revs := tempsRevisions(t)
	th := newTestHub(t, func(c *Config) { c.Revisions = revs[:2] })
	set1, set3 := revs[0].Pipeline.Aggregates, revs[2].Pipeline.Aggregates
	ctx := t.Context()
	sub := th.Subscribe(ctx, "temps", nil)
	if p := th.Pipeline("temps"); p != revs[1].Pipeline {
		t.Fatalf("Pipeline(temps) is not revision 2's spec")
	}
	must(t, th.Apply(rwm(rwm(batch("e", 1, 1, 2, rpartial(set1, 1, 1, "k", 0, 1), partial(th.pipes[0], 2, "k", 0, 1)), 1, 1000), 0, 1000)))
	th.commit()
	if r := <-sub; r.Class != 1 || !slices.Equal(r.Revisions, []uint32{1}) {
		t.Fatalf("result %+v, want class 1's", r)
	}
	must(t, th.Define(revs[1])) // known: nothing happens
	must(t, th.Define(revs[2]))
	if p := th.Pipeline("temps"); p != revs[2].Pipeline {
		t.Fatalf("Pipeline(temps) is not revision 3's spec")
	}
	select { // closed by Define, before it returns
	case r, ok := <-sub:
		if ok {
			t.Fatalf("after Define of another class: %+v", r)
		}
	default:
		t.Fatal("the subscription of class 1 is still open after Define of class 3")
	}
	sub = th.Subscribe(ctx, "temps", nil)
	must(t, th.Apply(rwm(rwm(batch("e", 1, 3, 4, rpartial(set1, 2, 3, "k", 1000, 1), rpartial(set3, 3, 4, "k", 1000, 1)), 2, 2000), 3, 2000)))
	th.commit()
	if r := <-sub; r.Class != 3 || r.Start != 1000 || !slices.Equal(r.Revisions, []uint32{3}) {
		t.Fatalf("result %+v, want class 3's", r)
	}
	select {
	case r := <-sub:
		t.Fatalf("a result of another class: %+v", r)
	default:
	}
}

// TestQueryCursorKeepsClass: a cursor keeps its class: the next page of a
// query with revision 0 stays in the class of the first page after a
// revision of another class became the latest; with a revision of another
// class it is refused.
func TestQueryCursorKeepsClass(t *testing.T) {
	revs := tempsRevisions(t)
	th := newTestHub(t, func(c *Config) { c.Revisions = revs[:2] })
	set1 := revs[0].Pipeline.Aggregates
	must(t, th.Apply(rwm(batch("e", 1, 1, 3, rpartial(set1, 1, 1, "a", 0, 1), rpartial(set1, 2, 2, "b", 0, 1), rpartial(set1, 2, 3, "c", 0, 1)), 1, 1000)))
	th.commit()
	page, next, err := th.Query(Query{Pipeline: "temps", Limit: 1})
	if err != nil || len(page) != 1 || next == nil {
		t.Fatalf("first page %+v %x %v", page, next, err)
	}
	must(t, th.Define(revs[2]))
	page, next, err = th.Query(Query{Pipeline: "temps", Limit: 1, After: next})
	if err != nil || len(page) != 1 || page[0].Class != 1 || string(page[0].Key) != string(encKey("b")) {
		t.Fatalf("second page %+v %v, want b of class 1", page, err)
	}
	if _, _, err := th.Query(Query{Pipeline: "temps", Revision: 3, After: next}); !errors.Is(err, ErrBadQuery) || !strings.Contains(err.Error(), "of class 1") {
		t.Fatalf("cursor of class 1 with revision 3: %v", err)
	}
	if _, _, err := th.Query(Query{Pipeline: "temps", Revision: 2, After: next}); err != nil {
		t.Fatalf("cursor of class 1 with revision 2: %v", err)
	}
	if _, _, err := th.Query(Query{Pipeline: "global", After: next}); !errors.Is(err, ErrBadQuery) {
		t.Fatalf("cursor of class 1 for a local pipeline: %v", err)
	}
	if _, _, err := th.Query(Query{Pipeline: "temps", After: []byte{0, 0, 0}}); !errors.Is(err, ErrBadQuery) {
		t.Fatalf("short cursor: %v", err)
	}
}

// TestUpgradeFormat2: a store written by the hub before revisions existed
// (testdata/format2.db; testdata/format2-gen.go.txt wrote it, at commit
// 056c3bf) opens: its results read as the local pipelines' (class 0,
// revision 0), its edges resume where they were, its unemitted window
// emits, its parked partial applies once its pipeline is configured, and
// the store is marked format 3. A managed revision of the same name then
// merges apart from them.
func TestUpgradeFormat2(t *testing.T) {
	data, err := os.ReadFile("testdata/format2.db")
	if err != nil {
		t.Fatal(err)
	}
	other := compile(t, otherYAML)
	th := &testHub{t: t, dir: t.TempDir(), clock: newClock(), pipes: []*operators.Pipeline{compile(t, tempsYAML), compile(t, globalYAML), other}}
	must(t, os.WriteFile(filepath.Join(th.dir, "hub.db"), data, 0o600))
	th.open()
	t.Cleanup(func() { th.Hub.Close() })

	if st := th.Status(); st.PartialsUnparked != 1 || len(st.Parked) != 0 {
		t.Fatalf("status %+v", st)
	}
	for id, want := range map[string]uint64{"a": 5, "b": 1} {
		if r, err := th.Hello(id, 1, want+1); err != nil || r.AckedSeq != want {
			t.Fatalf("Hello %s: %+v %v, want acked %d", id, r, err, want)
		}
	}
	rs, _, err := th.Query(Query{Pipeline: "temps", AllVersions: true})
	if err != nil || len(rs) != 2 {
		t.Fatalf("temps results %+v %v", rs, err)
	}
	for i, want := range []int64{3, 4} {
		if r := rs[i]; r.Version != uint32(i+1) || th.count(r) != want || r.Class != 0 || r.Revisions != nil || r.Edges != 2 {
			t.Fatalf("temps version %d: %+v, count %d", i+1, r, th.count(r))
		}
	}
	th.commit()
	if rs, _, err := th.Query(Query{Pipeline: "other"}); err != nil || len(rs) != 1 || rs[0].Revisions != nil {
		t.Fatalf("other results %+v %v", rs, err)
	}
	must(t, th.Apply(wm(batch("a", 1, 6, 5), "temps", 2000)))
	must(t, th.Apply(wm(batch("b", 1, 2, 1), "temps", 2000)))
	th.commit()
	if r := th.latest("k2", 1000); r.Version != 1 || th.count(r) != 1 {
		t.Fatalf("k2: %+v", r)
	}
	must(t, th.db.View(func(tx *bolt.Tx) error {
		if f := th.getRecord(tx, bucketMeta, metaFormat); len(f) != 1 || f[0] != 3 {
			t.Fatalf("store format %x, want 3", f)
		}
		return nil
	}))

	// A managed revision of temps: apart from the local results.
	revs := tempsRevisions(t)
	must(t, th.Define(revs[0]))
	must(t, th.Apply(rwm(batch("a", 1, 6, 6, rpartial(revs[0].Pipeline.Aggregates, 1, 6, "k1", 0, 9)), 1, 2000)))
	th.commit()
	th.restart() // without the revision in its config: the class waits
	if rs, _, err := th.Query(Query{Pipeline: "temps", AllVersions: true}); err != nil || len(rs) != 3 {
		t.Fatalf("local temps after the class was added: %+v %v", rs, err)
	}
	must(t, th.Define(revs[0]))
	rs, _, err = th.Query(Query{Pipeline: "temps"})
	if err != nil || len(rs) != 1 || rs[0].Class != 1 || th.count(rs[0]) != 1 || !slices.Equal(rs[0].Revisions, []uint32{1}) {
		t.Fatalf("class 1 results %+v %v", rs, err)
	}
}

// TestDefineUnparksUnwritten: Define also applies the parked partials not
// in the store yet: those of a commit that failed (its writeSet is kept
// for the next) and those parked since the last commit. The commit after
// it writes them and deletes them in one transaction.
func TestDefineUnparksUnwritten(t *testing.T) {
	revs := tempsRevisions(t)
	th := newTestHub(t, nil)
	set3 := revs[2].Pipeline.Aggregates
	must(t, th.Apply(rwm(batch("e", 1, 1, 1, rpartial(set3, 3, 1, "k1", 0, 1)), 3, 2000)))
	// As a commit that failed leaves it: prepared, not written.
	th.commitMu.Lock()
	th.Hub.mu.Lock()
	th.prepare(&th.ws)
	th.Hub.mu.Unlock()
	th.commitMu.Unlock()
	must(t, th.Apply(batch("e", 1, 2, 2, rpartial(set3, 3, 2, "k2", 0, 2))))
	must(t, th.Define(revs[2]))
	th.commit()
	rs, _, err := th.Query(Query{Pipeline: "temps"})
	if err != nil || len(rs) != 2 || string(rs[0].Key) != string(encKey("k1")) || string(rs[1].Key) != string(encKey("k2")) {
		t.Fatalf("results %+v, %v; want k1 and k2", rs, err)
	}
	th.Hub.Close()
	th.cfg = func(c *Config) { c.Revisions = revs[2:] }
	th.open()
	if st := th.Status(); st.PartialsUnparked != 0 || len(st.Parked) != 0 {
		t.Fatalf("after a restart: %d unparked, parked %+v", st.PartialsUnparked, st.Parked)
	}
}

// TestDefineDuringApply: a Define that lands between Apply's validation
// and its applying (the partial was checked as one to park, state
// unread) makes Apply check the batch again, with what is known now: the
// partial's state, which does not decode with the revision's aggregates,
// is refused rather than merged.
func TestDefineDuringApply(t *testing.T) {
	revs := tempsRevisions(t)
	th := newTestHub(t, nil)
	t.Cleanup(func() { testAfterValidate = nil })
	testAfterValidate = func() {
		testAfterValidate = nil
		must(t, th.Define(revs[2]))
	}
	bad := rpartial(revs[0].Pipeline.Aggregates, 3, 1, "k", 0, 1) // revision 1's aggregates
	err := th.Apply(wm(batch("e", 1, 1, 1, bad), "temps", 2000))
	var re *RefusedError
	if !errors.As(err, &re) || len(re.Entries) != 1 || !strings.Contains(re.Entries[0].Reason, "does not decode") {
		t.Fatalf("Apply: %v, want the partial refused", err)
	}
	th.commit()
	if st := th.Status(); st.Partials != 0 || len(st.Parked) != 0 || st.Results != 0 {
		t.Fatalf("status %+v", st)
	}
}
