package hub

import (
	"errors"
	"math"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// hubWM returns the hub watermark of the temps pipeline.
func (th *testHub) hubWM() (int64, bool) {
	pi := th.Pipelines()[0]
	return pi.Watermark, pi.HasWatermark
}

// TestQuietFleetEmits: edges A and B report watermarks wA > wB, then every
// edge goes silent. Once EdgeTimeout has passed, a commit with no batch
// arriving emits the windows A reported complete, up to wA.
func TestQuietFleetEmits(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.EdgeTimeout = time.Minute })
	p := th.pipes[0]
	must(t, th.Apply(wm(batch("a", 1, 1, 3, partial(p, 1, "k", 0, 1), partial(p, 2, "k", 1000, 1), partial(p, 3, "k", 2000, 1)), "temps", 3000)))
	must(t, th.Apply(wm(batch("b", 1, 1, 1, partial(p, 1, "k", 0, 2)), "temps", 1000)))
	th.commit()
	if w, _ := th.hubWM(); w != 1000 {
		t.Fatalf("hub watermark %d, want 1000 (b's)", w)
	}
	if rs, _, _ := th.Query(Query{Pipeline: "temps", From: 1000}); len(rs) != 0 {
		t.Fatalf("windows past b's watermark emitted while b is live: %+v", rs)
	}

	// Within the timeout nothing moves.
	th.clock.Advance(time.Minute)
	th.commit()
	if w, _ := th.hubWM(); w != 1000 {
		t.Fatalf("hub watermark %d within the edge timeout, want 1000", w)
	}
	// Past it, no edge is live: the watermark goes to the highest reported.
	th.clock.Advance(time.Second)
	th.commit()
	if w, _ := th.hubWM(); w != 3000 {
		t.Fatalf("hub watermark %d with every edge silent, want a's 3000", w)
	}
	for _, start := range []int64{1000, 2000} {
		if r := th.latest("k", start); r.Version != 1 || th.count(r) != 1 {
			t.Fatalf("window %d: v%d count %d", start, r.Version, th.count(r))
		}
	}
	// b returns with a late partial: a new version, the watermark stays.
	must(t, th.Apply(wm(batch("b", 1, 2, 2, partial(p, 2, "k", 1000, 5, 5)), "temps", 2000)))
	th.commit()
	if r := th.latest("k", 1000); r.Version != 2 || th.count(r) != 3 || r.Edges != 2 {
		t.Fatalf("window 1000 after b's late partial: v%d count %d edges %d", r.Version, th.count(r), r.Edges)
	}
	if w, _ := th.hubWM(); w != 3000 {
		t.Fatalf("hub watermark moved back to %d", w)
	}
}

// TestRestartIsNotSilence: a hub that was down longer than EdgeTimeout
// does not take its edges for silent when it opens: they get EdgeTimeout
// from the open to come back before the watermark stops waiting for them.
func TestRestartIsNotSilence(t *testing.T) {
	th := newTestHub(t, func(c *Config) { c.EdgeTimeout = time.Minute })
	p := th.pipes[0]
	must(t, th.Apply(wm(batch("a", 1, 1, 1, partial(p, 1, "k", 2000, 1)), "temps", 3000)))
	must(t, th.Apply(wm(batch("b", 1, 1, 1, partial(p, 1, "k", 0, 2)), "temps", 1000)))
	th.commit()
	th.Hub.Close()
	th.clock.Advance(time.Hour) // the hub is down
	th.open()
	if e := th.Edges(); !e[0].Live || !e[1].Live {
		t.Fatalf("edges after the restart: %+v", e)
	}
	th.commit()
	if w, _ := th.hubWM(); w != 1000 {
		t.Fatalf("hub watermark %d right after the restart, want 1000", w)
	}
	// a comes back, b does not: after the timeout only a holds it.
	th.clock.Advance(50 * time.Second)
	must(t, th.Apply(wm(batch("a", 1, 2, 1), "temps", 4000)))
	th.clock.Advance(20 * time.Second)
	th.commit()
	if w, _ := th.hubWM(); w != 4000 {
		t.Fatalf("hub watermark %d, want a's 4000 once b is silent", w)
	}
}

// year2100 is 2100-01-01 in Unix ms.
const year2100 = 4_102_444_800_000

// nowMs is the test clock in Unix ms, rounded down to a second (a temps
// window).
func (th *testHub) nowMs() int64 { return th.clock.Now().UnixMilli() / 1000 * 1000 }

// results returns every stored result version of temps.
func (th *testHub) results() []Result {
	th.t.Helper()
	rs, _, err := th.Query(Query{Pipeline: "temps", AllVersions: true, Limit: maxLimit})
	if err != nil {
		th.t.Fatal(err)
	}
	return rs
}

// TestWatermarkAheadOfClock: an edge reports a watermark far in the future
// (MaxInt64, 2100) and a partial of a window in 2100. The partial is
// refused (the edge sets it aside); the hub holds the watermark at its clock + MaxFuture, counts and
// logs it (once per edge per minute); results already emitted are not
// deleted, nothing poisoned survives a restart, and partials of recent
// windows arriving afterwards are merged, not dropped as expired.
func TestWatermarkAheadOfClock(t *testing.T) {
	logs := &logBuffer{}
	th := newTestHub(t, func(c *Config) { c.Logger = logs.logger() }) // Retention 1h, MaxFuture 1h
	p, g := th.pipes[0], th.pipes[1]
	now := th.nowMs()
	bound := now + time.Hour.Milliseconds()
	must(t, th.Apply(wm(batch("a", 1, 1, 2, partial(p, 1, "k", now-10_000, 1), partial(p, 2, "k", now-5000, 1)), "temps", now-4000)))
	th.commit()
	if rs := th.results(); len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}

	// With a partial of a window in 2100: refused, nothing applied.
	b := wm(batch("a", 1, 3, 3, partial(p, 3, "k", year2100, 1)), "temps", math.MaxInt64)
	var re *RefusedError
	if err := th.Apply(wm(b, "global", year2100)); !errors.As(err, &re) || len(re.Entries) != 1 || re.Entries[0].Seq != 3 {
		t.Fatalf("the partial of 2100: %v", err)
	}
	th.commit()
	if e := th.Edges()[0]; e.Watermarks["temps"] != now-4000 {
		t.Fatalf("a refused batch moved the watermark: %v", e.Watermarks)
	}
	// The edge sets it aside and resends.
	b = wm(batch("a", 1, 3, 3), "temps", math.MaxInt64)
	must(t, th.Apply(wm(b, "global", year2100)))
	th.commit()
	if w, _ := th.hubWM(); w != bound {
		t.Fatalf("hub watermark %d, want the bound %d", w, bound)
	}
	if e := th.Edges()[0]; e.Watermarks["temps"] != bound || e.Watermarks["global"] != bound {
		t.Fatalf("edge watermarks %v, want both %d", e.Watermarks, bound)
	}
	if rs := th.results(); len(rs) != 2 {
		t.Fatalf("%d results after the clamped watermark, want the 2 emitted before", len(rs))
	}
	st := th.Status()
	if st.WatermarksClamped != 2 || len(st.Clamps) != 1 || st.Clamps[0].Edge != "a" || st.Clamps[0].Count != 2 {
		t.Fatalf("clamped %d, clamps %+v", st.WatermarksClamped, st.Clamps)
	}
	if got := logs.lines("ahead of the hub's clock", "edge=a", "bound_ms="); len(got) != 1 {
		t.Fatalf("log lines %q, want 1 (two clamps within a minute)", got)
	}
	th.clock.Advance(time.Minute)
	must(t, th.Apply(wm(batch("a", 1, 4, 3), "temps", math.MaxInt64)))
	if got := logs.lines("ahead of the hub's clock", "edge=a", "unlogged_since_last=1"); len(got) != 1 {
		t.Fatalf("log lines %q, want the second, counting the unlogged one", logs.lines("ahead"))
	}
	if st := th.Status(); len(st.Clamps) != 1 {
		t.Fatalf("clamps %+v, want a's", st.Clamps)
	}
	th.clock.Advance(IncidentWindow + time.Second)
	if st := th.Status(); len(st.Clamps) != 0 {
		t.Fatalf("clamps %+v after the incident window", st.Clamps)
	}

	// A restart keeps nothing past the bound, and deletes nothing.
	th.restart()
	now2 := th.clock.Now().UnixMilli()
	for _, pi := range th.Pipelines() {
		if pi.HasWatermark && pi.Watermark > now2+time.Hour.Milliseconds() {
			t.Fatalf("after restart %s's watermark %d", pi.Pipeline.Name, pi.Watermark)
		}
	}
	th.commit()
	if rs := th.results(); len(rs) != 2 {
		t.Fatalf("%d results after the restart, want 2", len(rs))
	}
	// Partials of recent windows are merged (late: new versions).
	must(t, th.Apply(batch("a", 1, 4, 5, partial(p, 4, "k", now-10_000, 1, 2), partial(g, 5, "", now-20_000, 1))))
	th.commit()
	if st := th.Status(); st.PartialsExpired != 0 || st.Partials != 2 {
		t.Fatalf("recent partials: %d merged, %d expired", st.Partials, st.PartialsExpired)
	}
	if r := th.latest("k", now-10_000); r.Version != 2 || th.count(r) != 2 {
		t.Fatalf("late recent partial: v%d count %d", r.Version, th.count(r))
	}
}

// TestPoisonedStore: a store written by an older hub holds a pipeline's
// and an edge's watermark far in the future. Open holds both at the
// clock + MaxFuture and logs it, the next commit writes the bounded ones
// back, results are not deleted and recent partials are merged.
func TestPoisonedStore(t *testing.T) {
	logs := &logBuffer{}
	th := newTestHub(t, func(c *Config) { c.Logger = logs.logger() })
	p := th.pipes[0]
	now := th.nowMs()
	must(t, th.Apply(wm(batch("a", 1, 1, 2, partial(p, 1, "k", now-10_000, 1), partial(p, 2, "k", now-5000, 1)), "temps", now-4000)))
	th.commit()
	th.Hub.Close()
	th.poison(func(tx *bolt.Tx) {
		rec := edgeRecord{epoch: 1, acked: 2, lastSeen: th.clock.Now().UnixNano(),
			watermarks: []pipelineWatermark{{"temps", math.MaxInt64}, {"global", year2100}}}
		th.putRecord(tx, bucketEdges, []byte("a"), appendEdgeValue(nil, &rec))
		th.putRecord(tx, bucketPipelines, []byte("temps"), appendPipelineValue(nil, true, math.MaxInt64, 2))
	})
	th.open()
	bound := th.clock.Now().UnixMilli() + time.Hour.Milliseconds()
	if w, _ := th.hubWM(); w != bound {
		t.Fatalf("hub watermark %d after Open, want the bound %d", w, bound)
	}
	if e := th.Edges()[0]; e.Watermarks["temps"] != bound || e.Watermarks["global"] != bound {
		t.Fatalf("edge watermarks %v, want %d", e.Watermarks, bound)
	}
	if got := logs.lines("open:", "ahead of the clock"); len(got) != 3 {
		t.Fatalf("log lines %q, want 3 (the pipeline's, the edge's two)", got)
	}
	th.commit()
	if rs := th.results(); len(rs) != 2 {
		t.Fatalf("%d results, want 2", len(rs))
	}
	th.Hub.Close()
	th.poison(func(tx *bolt.Tx) {
		_, w, _, err := parsePipelineValue(th.getRecord(tx, bucketPipelines, []byte("temps")))
		if err != nil || w != bound {
			t.Fatalf("stored hub watermark %d (%v), want %d", w, err, bound)
		}
		r, err := parseEdgeValue(th.getRecord(tx, bucketEdges, []byte("a")))
		if err != nil || len(r.watermarks) != 2 || r.watermarks[0].wm != bound || r.watermarks[1].wm != bound {
			t.Fatalf("stored edge %+v (%v)", r, err)
		}
	})
	th.open()
	must(t, th.Apply(batch("a", 1, 3, 3, partial(p, 3, "k", now-10_000, 1, 2))))
	th.commit()
	if st := th.Status(); st.PartialsExpired != 0 || st.Partials != 1 {
		t.Fatalf("recent partial: %d merged, %d expired", st.Partials, st.PartialsExpired)
	}
	if r := th.latest("k", now-10_000); r.Version != 2 || th.count(r) != 2 {
		t.Fatalf("late recent partial: v%d count %d", r.Version, th.count(r))
	}
}

// TestWatermarkBoundedAtCommit: the hub watermark never passes the clock
// + MaxFuture of the commit that sets it, even when the clock stepped back
// after the edge's watermark was bounded.
func TestWatermarkBoundedAtCommit(t *testing.T) {
	th := newTestHub(t, nil)
	must(t, th.Apply(wm(batch("a", 1, 1, 0), "temps", math.MaxInt64)))
	th.clock.Advance(-2 * time.Hour)
	th.commit()
	if w, _ := th.hubWM(); w != th.clock.Now().UnixMilli()+time.Hour.Milliseconds() {
		t.Fatalf("hub watermark %d, want the clock + 1h", w)
	}
}
