package hub

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// latest returns the latest result of one temps window, or fails.
func (th *testHub) latest(key string, start int64) Result {
	th.t.Helper()
	rs, _, err := th.Query(Query{Pipeline: "temps", Key: encKey(key), From: start, To: start + 1000})
	if err != nil {
		th.t.Fatalf("Query: %v", err)
	}
	if len(rs) != 1 {
		th.t.Fatalf("Query %s@%d: %d results, want 1", key, start, len(rs))
	}
	return rs[0]
}

// count returns the count() of a temps result.
func (th *testHub) count(r Result) int64 {
	th.t.Helper()
	vs, err := resultValues(th.pipes[0].Aggregates, r.State)
	if err != nil {
		th.t.Fatalf("decode result: %v", err)
	}
	return vs[0].Int
}

func TestApplyCommitQuery(t *testing.T) {
	th := newTestHub(t, nil)
	p := th.pipes[0]
	if err := th.Apply(wm(batch("a", 1, 1, 3, partial(p, 1, "k1", 0, 1, 2), partial(p, 3, "k2", 0, 5)), "temps", 1000)); err != nil {
		t.Fatal(err)
	}
	if err := th.Apply(wm(batch("b", 1, 1, 1, partial(p, 1, "k1", 0, 10)), "temps", 1000)); err != nil {
		t.Fatal(err)
	}
	if epoch, seq, _ := th.Acked("a"); epoch != 1 || seq != 0 {
		t.Fatalf("Acked before commit = %d,%d, want 1,0", epoch, seq)
	}
	_, _, next := th.Acked("a")
	th.commit()
	select {
	case <-next:
	default:
		t.Fatal("next not closed by commit")
	}
	if epoch, seq, _ := th.Acked("a"); epoch != 1 || seq != 3 {
		t.Fatalf("Acked = %d,%d, want 1,3", epoch, seq)
	}
	r := th.latest("k1", 0)
	vs, _ := resultValues(p.Aggregates, r.State)
	if vs[0].Int != 3 || vs[1].Float != 13 || vs[2].Float != 1 || vs[3].Float != 10 || r.Edges != 2 || r.Version != 1 {
		t.Fatalf("k1 = %+v (edges %d, v%d)", vs, r.Edges, r.Version)
	}
	if got := th.count(th.latest("k2", 0)); got != 1 {
		t.Fatalf("k2 count = %d", got)
	}
	st := th.Status()
	if st.Batches != 2 || st.Partials != 3 || st.Results != 2 || st.OpenWindows != 2 || st.EdgesKnown != 2 || st.EdgesLive != 2 {
		t.Fatalf("status %+v", st)
	}

	// Everything survives a restart.
	th.restart()
	if got := th.count(th.latest("k1", 0)); got != 3 {
		t.Fatalf("after restart k1 count = %d", got)
	}
	if r, err := th.Hello("a", 1, 4); err != nil || r != (Resume{1, 3}) {
		t.Fatalf("Hello = %+v, %v", r, err)
	}
	ps := th.Pipelines()
	if !ps[0].HasWatermark || ps[0].Watermark != 1000 || ps[0].Results != 2 || ps[1].HasWatermark {
		t.Fatalf("pipelines %+v", ps)
	}
	// A late partial of b replaces b's, and makes version 2.
	if err := th.Apply(batch("b", 1, 2, 2, partial(p, 2, "k1", 0, 10, 20))); err != nil {
		t.Fatal(err)
	}
	th.commit()
	if r := th.latest("k1", 0); r.Version != 2 || th.count(r) != 4 {
		t.Fatalf("k1 after late partial: v%d count %d", r.Version, th.count(r))
	}
}

func TestHello(t *testing.T) {
	th := newTestHub(t, nil)
	if r, err := th.Hello("e", 5, 1); err != nil || r != (Resume{5, 0}) {
		t.Fatalf("Hello new = %+v, %v", r, err)
	}
	if err := th.Apply(batch("e", 5, 1, 4, partial(th.pipes[0], 2, "k", 0, 1))); err != nil {
		t.Fatal(err)
	}
	th.commit()
	if r, err := th.Hello("e", 5, 1); err != nil || r != (Resume{5, 4}) {
		t.Fatalf("Hello behind = %+v, %v (the hub only reports)", r, err)
	}
	if r, err := th.Hello("e", 4, 100); err != nil || r != (Resume{5, 4}) {
		t.Fatalf("Hello older epoch = %+v, %v; want the hub's epoch", r, err)
	}
	if r, err := th.Hello("e", 6, 1); err != nil || r != (Resume{6, 0}) {
		t.Fatalf("Hello newer = %+v, %v", r, err)
	}
	if epoch, seq, _ := th.Acked("e"); epoch != 6 || seq != 0 {
		t.Fatalf("Acked after new epoch = %d,%d", epoch, seq)
	}
}

func TestEpochFencing(t *testing.T) {
	th := newTestHub(t, nil)
	p := th.pipes[0]
	if err := th.Apply(wm(batch("e", 2, 1, 1, partial(p, 1, "k", 0, 1, 1, 1, 1, 1)), "temps", 1000)); err != nil {
		t.Fatal(err)
	}
	th.commit()
	before := th.Status()
	err := th.Apply(wm(batch("e", 1, 1, 1, partial(p, 1, "k", 0, 7)), "temps", 5000))
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("older epoch: %v", err)
	}
	th.commit()
	if after := th.Status(); after.Partials != before.Partials || after.Results != before.Results {
		t.Fatalf("fenced batch changed status: %+v -> %+v", before, after)
	}
	if e := th.Edges()[0]; e.Epoch != 2 || e.Watermarks["temps"] != 1000 {
		t.Fatalf("fenced batch changed the edge: %+v", e)
	}
	// Epoch 3 starts over at seq 1 and resends the same window: replaced.
	if err := th.Apply(wm(batch("e", 3, 1, 1, partial(p, 1, "k", 0, 1, 1, 1, 1, 1)), "temps", 1000)); err != nil {
		t.Fatal(err)
	}
	th.commit()
	if r := th.latest("k", 0); th.count(r) != 5 || r.Version != 2 {
		t.Fatalf("after epoch 3 resend: count %d v%d, want 5 v2", th.count(r), r.Version)
	}
	if epoch, seq, _ := th.Acked("e"); epoch != 3 || seq != 1 {
		t.Fatalf("Acked = %d,%d", epoch, seq)
	}
}

func TestGapAndDuplicates(t *testing.T) {
	th := newTestHub(t, nil)
	p := th.pipes[0]
	// The first batch of an epoch may start anywhere.
	if err := th.Apply(batch("e", 1, 10, 12, partial(p, 11, "k", 0, 1))); err != nil {
		t.Fatal(err)
	}
	before := th.Status()
	if err := th.Apply(batch("e", 1, 14, 14, partial(p, 14, "k", 0, 1, 2))); !errors.Is(err, ErrGap) {
		t.Fatalf("gap: %v", err)
	}
	if after := th.Status(); after.Partials != before.Partials || after.Batches != before.Batches {
		t.Fatal("gap batch applied something")
	}
	// Overlapping resend: 11 is a duplicate, 13 is new.
	if err := th.Apply(batch("e", 1, 11, 13, partial(p, 11, "k", 0, 1), partial(p, 13, "k2", 0, 1))); err != nil {
		t.Fatal(err)
	}
	// Whole duplicate.
	if err := th.Apply(batch("e", 1, 10, 12, partial(p, 11, "k", 0, 1))); err != nil {
		t.Fatal(err)
	}
	st := th.Status()
	if st.Partials != 2 || st.PartialsDup != 2 || st.BatchesDup != 1 || st.Batches != 2 {
		t.Fatalf("status %+v", st)
	}
	// A heartbeat moves nothing but the watermark and liveness.
	if err := th.Apply(wm(batch("e", 1, 14, 13), "temps", 1000)); err != nil {
		t.Fatal(err)
	}
	th.commit()
	if _, seq, _ := th.Acked("e"); seq != 13 {
		t.Fatalf("acked %d, want 13", seq)
	}
	if got := th.count(th.latest("k", 0)); got != 1 {
		t.Fatalf("count %d", got)
	}
}

func TestBadBatches(t *testing.T) {
	th := newTestHub(t, nil)
	p := th.pipes[0]
	good := func() *runnelv1.Batch {
		return wm(batch("e", 1, 1, 3, partial(p, 1, "k", 0, 1), partial(p, 3, "k", 1000, 2)), "temps", 500)
	}
	corrupt := stateOf(p.Aggregates, 1)
	corrupt[0] = 9
	other := compile(t, strings.Replace(tempsYAML, "q: quantile(v, 0.5)", "q: quantile(v, 0.5)\n  d: distinct(device)", 1))
	future := th.clock.Now().Add(time.Hour).UnixMilli() + 1
	tests := []struct {
		name   string
		mutate func(b *runnelv1.Batch)
		want   string
		entry  bool // refused per entry (partial seq 3), not as a whole
	}{
		{"empty edge", func(b *runnelv1.Batch) { b.EdgeId = "" }, "empty edge id", false},
		{"long edge", func(b *runnelv1.Batch) { b.EdgeId = strings.Repeat("x", 256) }, "edge id of 256 bytes", false},
		{"seq 0", func(b *runnelv1.Batch) { b.FirstSeq = 0 }, "first_seq 0", false},
		{"first after last+1", func(b *runnelv1.Batch) { b.FirstSeq = 5 }, "first_seq after last_seq + 1", false},
		{"heartbeat with partials", func(b *runnelv1.Batch) { b.FirstSeq, b.LastSeq = 4, 3 }, "heartbeat", false},
		{"seq below first", func(b *runnelv1.Batch) { b.FirstSeq = 2 }, "seq 1 not after 1", false},
		{"seq not increasing", func(b *runnelv1.Batch) { b.Partials[1].Seq = 1 }, "seq 1 not after 1", false},
		{"seq after last", func(b *runnelv1.Batch) { b.Partials[1].Seq = 4 }, "seq 4 after last_seq", false},
		{"nil partial", func(b *runnelv1.Batch) { b.Partials[1] = nil }, "nil", false},
		{"too many partials", func(b *runnelv1.Batch) {
			b.LastSeq = MaxBatchPartials + 1
			b.Partials = b.Partials[:0]
			for s := range uint64(MaxBatchPartials + 1) {
				b.Partials = append(b.Partials, &runnelv1.Partial{Seq: s + 1})
			}
		}, "100001 partials, at most 100000", false},
		{"watermark of a long pipeline name", func(b *runnelv1.Batch) { b.Watermarks[0].Pipeline = strings.Repeat("p", 256) },
			"watermark for a pipeline name of 256 bytes", false},
		{"nil watermark", func(b *runnelv1.Batch) { b.Watermarks[0] = nil }, "nil watermark", false},
		{"long pipeline name", func(b *runnelv1.Batch) { b.Partials[1].Pipeline = strings.Repeat("p", 256) }, "pipeline name of 256 bytes", true},
		{"empty pipeline name", func(b *runnelv1.Batch) { b.Partials[1].Pipeline = "" }, "pipeline name of 0 bytes", true},
		{"empty window", func(b *runnelv1.Batch) { b.Partials[1].WindowEnd = b.Partials[1].WindowStart }, "window end", true},
		{"window in the future", func(b *runnelv1.Batch) { b.Partials[1].WindowStart, b.Partials[1].WindowEnd = future, future+1000 },
			"more than 1h0m0s after the hub's clock", true},
		{"empty key", func(b *runnelv1.Batch) { b.Partials[1].Key = nil }, "empty key", true},
		{"key on keyless", func(b *runnelv1.Batch) { b.Partials[1].Pipeline = "global" }, "key given", true},
		{"long key", func(b *runnelv1.Batch) { b.Partials[1].Key = make([]byte, 4097) }, "key of 4097 bytes, at most 4096", true},
		{"long state", func(b *runnelv1.Batch) { b.Partials[1].State = make([]byte, MaxStateBytes+1) }, "state of 1048577 bytes, at most 1048576", true},
		{"corrupt state", func(b *runnelv1.Batch) { b.Partials[1].State = corrupt }, "state does not decode", true},
		{"state of another set", func(b *runnelv1.Batch) { b.Partials[1].State = stateOf(other.Aggregates, 1) }, "state does not decode", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := th.Status()
			b := good()
			tt.mutate(b)
			err := th.Apply(b)
			if !errors.Is(err, ErrBadBatch) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrBadBatch naming %q", err, tt.want)
			}
			var re *RefusedError
			switch {
			case errors.As(err, &re) != tt.entry:
				t.Fatalf("err = %#v: refused per entry %v, want %v", err, re != nil, tt.entry)
			case tt.entry && (len(re.Entries) != 1 || re.Entries[0].Seq != 3 || !strings.Contains(re.Entries[0].Reason, tt.want) ||
				re.Edge != "e" || re.Epoch != 1):
				t.Fatalf("refused %+v", re)
			}
			st := th.Status()
			if st.Batches != 0 || st.Partials != 0 || st.EdgesKnown != 0 {
				t.Fatalf("bad batch left traces: %+v", st)
			}
			if st.BatchesRefused != before.BatchesRefused+1 || st.PartialsRefused != before.PartialsRefused+uint64(len(re.entries())) {
				t.Fatalf("refused %d batches, %d partials; before %d, %d", st.BatchesRefused, st.PartialsRefused, before.BatchesRefused, before.PartialsRefused)
			}
		})
	}
	if err := th.Apply(good()); err != nil {
		t.Fatalf("the good batch: %v", err)
	}
	if err := th.Apply(nil); !errors.Is(err, ErrBadBatch) {
		t.Fatalf("nil batch: %v", err)
	}
}

func TestWatermark(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.EdgeTimeout = time.Minute })
	p := th.pipes[0]
	hub := func() (int64, bool) { pi := th.Pipelines()[0]; return pi.Watermark, pi.HasWatermark }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	th.commit()
	if _, ok := hub(); ok {
		t.Fatal("watermark before any edge reported one")
	}
	must(th.Apply(wm(batch("a", 1, 1, 1, partial(p, 1, "k", 0, 1)), "temps", 5000)))
	must(th.Apply(wm(batch("b", 1, 1, 1, partial(p, 1, "k", 2000, 1)), "temps", 3000)))
	th.commit()
	if w, _ := hub(); w != 3000 {
		t.Fatalf("hub watermark %d, want min 3000", w)
	}
	if r := th.latest("k", 2000); r.Version != 1 || r.Edges != 1 {
		t.Fatalf("window 2000: %+v", r)
	}
	if rs, _, _ := th.Query(Query{Pipeline: "temps", From: 3000}); len(rs) != 0 {
		t.Fatalf("window past the watermark emitted: %+v", rs)
	}

	// b goes silent; after EdgeTimeout only a holds the watermark.
	th.clock.Advance(2 * time.Minute)
	must(th.Apply(wm(batch("a", 1, 2, 2, partial(p, 2, "k", 3000, 4)), "temps", 6000)))
	th.commit()
	if w, _ := hub(); w != 6000 {
		t.Fatalf("hub watermark %d, want 6000 with b silent", w)
	}
	if e := th.Edges(); e[0].Live != true || e[1].Live != false {
		t.Fatalf("liveness %+v", e)
	}
	// b returns, behind: the watermark does not move back, and b's late
	// partial for window 2000 makes version 2.
	must(th.Apply(wm(batch("b", 1, 2, 2, partial(p, 2, "k", 2000, 1, 2)), "temps", 4000)))
	th.commit()
	if w, _ := hub(); w != 6000 {
		t.Fatalf("hub watermark %d moved backwards", w)
	}
	if r := th.latest("k", 2000); r.Version != 2 || th.count(r) != 2 {
		t.Fatalf("late partial: v%d count %d, want v2 count 2", r.Version, th.count(r))
	}
	// The watermark survives a restart.
	th.restart()
	if w, ok := hub(); !ok || w != 6000 {
		t.Fatalf("after restart %d %v", w, ok)
	}
}

func TestRetention(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.Retention = 10 * time.Second })
	p := th.pipes[0]
	if err := th.Apply(wm(batch("a", 1, 1, 2, partial(p, 1, "k", 0, 1), partial(p, 2, "k", 20_000, 1)), "temps", 21_000)); err != nil {
		t.Fatal(err)
	}
	th.commit()
	// Window [0, 1000) ended 20 s before the watermark: gone.
	rs, _, err := th.Query(Query{Pipeline: "temps", AllVersions: true})
	if err != nil || len(rs) != 1 || rs[0].Start != 20_000 {
		t.Fatalf("after retention: %+v, %v", rs, err)
	}
	st := th.Status()
	if st.OpenWindows != 1 || th.Pipelines()[0].Results != 1 {
		t.Fatalf("open windows %d, results %d", st.OpenWindows, th.Pipelines()[0].Results)
	}
	// A partial for the expired window is dropped and counted.
	if err := th.Apply(batch("a", 1, 3, 3, partial(p, 3, "k", 0, 1))); err != nil {
		t.Fatal(err)
	}
	th.commit()
	if st := th.Status(); st.PartialsExpired != 1 || st.OpenWindows != 1 {
		t.Fatalf("status %+v", st)
	}
	th.restart()
	if st := th.Status(); st.OpenWindows != 1 {
		t.Fatalf("after restart: %d windows", st.OpenWindows)
	}
	if err := th.Apply(batch("a", 1, 4, 4, partial(p, 4, "k", 0, 1))); err != nil {
		t.Fatal(err)
	}
	if st := th.Status(); st.PartialsExpired != 1 {
		t.Fatalf("after restart expired partial kept: %+v", st)
	}
}

func TestQueryPaging(t *testing.T) {
	th := newTestHub(t, nil)
	p := th.pipes[0]
	// 3 windows × 5 keys, window 1000 in two versions.
	var ps []*runnelv1.Partial
	seq := uint64(0)
	for w := range int64(3) {
		for k := range 5 {
			seq++
			ps = append(ps, partial(p, seq, fmt.Sprintf("k%d", k), w*1000, 1))
		}
	}
	if err := th.Apply(wm(batch("a", 1, 1, seq, ps...), "temps", 3000)); err != nil {
		t.Fatal(err)
	}
	th.commit()
	if err := th.Apply(batch("a", 1, seq+1, seq+1, partial(p, seq+1, "k3", 1000, 1, 1))); err != nil {
		t.Fatal(err)
	}
	th.commit()

	all := func(q Query) []Result {
		t.Helper()
		var out []Result
		for page := 0; ; page++ {
			rs, next, err := th.Query(q)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) > q.Limit && q.Limit > 0 {
				t.Fatalf("page of %d, limit %d", len(rs), q.Limit)
			}
			out = append(out, rs...)
			if next == nil {
				return out
			}
			q.After = next
		}
	}
	describe := func(rs []Result) string {
		var b strings.Builder
		for _, r := range rs {
			fmt.Fprintf(&b, "%d:%s:v%d ", r.Start, r.Key[2:], r.Version)
		}
		return b.String()
	}
	for _, limit := range []int{0, 1, 2, 4, 100} {
		got := describe(all(Query{Pipeline: "temps", Limit: limit}))
		want := "0:k0:v1 0:k1:v1 0:k2:v1 0:k3:v1 0:k4:v1 1000:k0:v1 1000:k1:v1 1000:k2:v1 1000:k3:v2 1000:k4:v1 2000:k0:v1 2000:k1:v1 2000:k2:v1 2000:k3:v1 2000:k4:v1 "
		if got != want {
			t.Fatalf("limit %d:\n got %s\nwant %s", limit, got, want)
		}
	}
	if got := describe(all(Query{Pipeline: "temps", Key: encKey("k3"), AllVersions: true, Limit: 1})); got != "0:k3:v1 1000:k3:v1 1000:k3:v2 2000:k3:v1 " {
		t.Fatalf("k3 all versions: %s", got)
	}
	if got := describe(all(Query{Pipeline: "temps", From: 1000, To: 2000, Limit: 3})); got != "1000:k0:v1 1000:k1:v1 1000:k2:v1 1000:k3:v2 1000:k4:v1 " {
		t.Fatalf("range: %s", got)
	}
	if _, _, err := th.Query(Query{Pipeline: "nope"}); !errors.Is(err, ErrBadQuery) {
		t.Fatalf("unknown pipeline: %v", err)
	}
	if _, _, err := th.Query(Query{Pipeline: "temps", After: []byte("junk")}); !errors.Is(err, ErrBadQuery) {
		t.Fatalf("bad cursor: %v", err)
	}
}

func TestSubscribe(t *testing.T) {
	th := newTestHub(t, nil)
	p := th.pipes[0]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	all := th.Subscribe(ctx, "temps", nil)
	one := th.Subscribe(ctx, "temps", encKey("k1"))
	ctx2, cancel2 := context.WithCancel(context.Background())
	gone := th.Subscribe(ctx2, "temps", nil)
	cancel2()
	if _, ok := <-gone; ok {
		t.Fatal("result on a cancelled subscription")
	}
	if _, ok := <-th.Subscribe(ctx, "nope", nil); ok {
		t.Fatal("result for an unknown pipeline")
	}

	if err := th.Apply(wm(batch("a", 1, 1, 2, partial(p, 1, "k1", 0, 1), partial(p, 2, "k2", 0, 1)), "temps", 1000)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-all:
		t.Fatalf("result before commit: %+v", r)
	default:
	}
	th.commit()
	if r1, r2 := <-all, <-all; string(r1.Key)+string(r2.Key) != string(encKey("k1"))+string(encKey("k2")) &&
		string(r1.Key)+string(r2.Key) != string(encKey("k2"))+string(encKey("k1")) {
		t.Fatalf("all got %q %q", r1.Key, r2.Key)
	}
	if r := <-one; string(r.Key) != string(encKey("k1")) || r.Version != 1 {
		t.Fatalf("one got %+v", r)
	}
	select {
	case r := <-one:
		t.Fatalf("one got another key: %+v", r)
	default:
	}

	// A subscriber that does not read is dropped once its buffer is full.
	var ps []*runnelv1.Partial
	for i := range subBuffer + 1 {
		ps = append(ps, partial(p, uint64(i+3), fmt.Sprintf("x%d", i), 1000, 1))
	}
	if err := th.Apply(wm(batch("a", 1, 3, uint64(len(ps)+2), ps...), "temps", 2000)); err != nil {
		t.Fatal(err)
	}
	th.commit()
	n := 0
	for range all {
		n++
	}
	if n != subBuffer {
		t.Fatalf("slow subscriber got %d before the close, want %d", n, subBuffer)
	}
	// The hub closes the rest.
	th.Hub.Close()
	for range one {
	}
}

func TestKeyGroupsFixed(t *testing.T) {
	th := newTestHub(t, nil)
	th.Hub.Close()
	th.Hub = nil
	cfg := Config{Dir: th.dir, Pipelines: th.pipes, KeyGroups: 32}
	if h, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "16 key groups") {
		if h != nil {
			h.Close()
		}
		t.Fatalf("open with other key groups: %v", err)
	}
	cfg.KeyGroups = 0
	h, err := Open(cfg)
	if err != nil {
		t.Fatalf("open with 0 key groups: %v", err)
	}
	if h.keyGroups != 16 {
		t.Fatalf("key groups %d", h.keyGroups)
	}
	h.Close()
}

func TestConfigValidate(t *testing.T) {
	p := compile(t, tempsYAML)
	err := (&Config{KeyGroups: -1, Retention: -1, Resident: -2, Pipelines: []*operators.Pipeline{p, p, nil}}).Validate()
	for _, want := range []string{"Dir is empty", "KeyGroups -1", "Retention -1ns", "Resident -2ns", `"temps" given twice`, "pipeline 2 is not compiled"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
}
