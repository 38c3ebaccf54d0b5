package hub

import (
	"testing"
	"time"
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
