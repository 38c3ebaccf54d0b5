package uplink_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
)

// noBackoff is a back-off no test waits out: a test that passes with it
// never waited for one.
func noBackoff(c *uplink.Config) { c.BackoffMin, c.BackoffMax = time.Hour, time.Hour }

// TestRefusedPartialsQuarantined: the hub refuses batches because of some
// of their partials (a Refusal detail). Those entries are quarantined with
// the hub's reasons and reach the hub again only as sequence numbers;
// every other entry is applied once, in order; and the stream goes on at
// once (the back-off here is an hour).
func TestRefusedPartialsQuarantined(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		every uint64
	}{
		{"every37th", 2000, 37},
		{"several per batch", 200, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub()
			h.poison = func(p *runnelv1.Partial) string {
				if p.Seq%tc.every == 0 {
					return fmt.Sprint("poison ", p.Seq)
				}
				return ""
			}
			es := entries(tc.n)
			want := map[uint64]bool{}
			var last uint64
			for i, e := range es {
				if seq := uint64(i + 1); !e.Marker && seq%tc.every == 0 {
					want[seq], last = true, seq
				}
			}
			ob := uplinktest.New()
			ob.Add(es...)
			u, stop := startWith(t, serve(t, h), ob, noBackoff)
			waitAcked(t, ob, uint64(len(es)))
			stop()

			checkDelivered(t, h, es, want)
			q := ob.Quarantined()
			if len(q) != len(want) {
				t.Errorf("%d entries quarantined, want %d", len(q), len(want))
			}
			for seq := range want {
				if r := q[seq]; r != fmt.Sprint("hub: poison ", seq) {
					t.Errorf("entry %d quarantined with reason %q", seq, r)
				}
				if n := h.partials[seq]; n != 1 {
					t.Errorf("poison entry %d received as a partial %d times, want once (the refused batch)", seq, n)
				}
			}
			if h.refusals == 0 {
				t.Fatal("the hub refused nothing")
			}
			st := u.Stats()
			if st.Quarantined != uint64(len(want)) {
				t.Errorf("Stats.Quarantined %d, want %d", st.Quarantined, len(want))
			}
			if w := fmt.Sprintf("entry %d: hub: poison %d", last, last); st.LastQuarantine != w || st.LastQuarantineAt.IsZero() {
				t.Errorf("Stats.LastQuarantine %q at %v, want %q", st.LastQuarantine, st.LastQuarantineAt, w)
			}
			if st.Refusal != "" {
				t.Errorf("Stats.Refusal %q after a refusal of partials", st.Refusal)
			}
		})
	}
}

// attempts returns the Hellos the hub gets within window.
func attempts(h *fakeHub, window time.Duration) int {
	n0 := h.count(func(h *fakeHub) int { return h.hellos })
	time.Sleep(window)
	return h.count(func(h *fakeHub) int { return h.hellos }) - n0
}

// Back-off of the tests that count retries. Delays double from 1ms to
// the cap of 100ms, and each retry waits a random part of the delay (full
// jitter): the first 7 retries take ~64ms, then one comes every ~50ms, so
// a window of 1s holds ~25 attempts. For 50, 43 waits would have to sum
// to less than 1s where they average 2.15s (6 standard deviations); an
// uplink that retries without waiting makes 100 and more (each attempt
// is a few ms on loopback under -race).
const (
	backoffMin  = time.Millisecond
	backoffMax  = 100 * time.Millisecond
	window      = time.Second
	maxAttempts = 50
)

func countedBackoff(c *uplink.Config) { c.BackoffMin, c.BackoffMax = backoffMin, backoffMax }

// TestWholeBatchRefusalBacksOff: a refusal without detail is about the
// batch as a whole: retried after the back-off, not in a loop, and
// reported in Stats.Refusal until the hub accepts batches again.
func TestWholeBatchRefusalBacksOff(t *testing.T) {
	h := newHub()
	h.refuseAll = true
	ob := uplinktest.New()
	es := entries(100)
	ob.Add(es...)
	u, stop := startWith(t, serve(t, h), ob, countedBackoff)
	defer stop()
	waitFor(t, "a refusal", func() bool { return h.count(func(h *fakeHub) int { return h.refusals }) > 0 })
	n := attempts(h, window)
	if n < 2 || n > maxAttempts {
		t.Errorf("%d attempts in %v, want 2..%d (back-off %v..%v)", n, window, maxAttempts, backoffMin, backoffMax)
	}
	if r := u.Stats().Refusal; !strings.Contains(r, "the hub refuses batches: batches refused") {
		t.Errorf("Stats.Refusal %q", r)
	}
	if ob.Acked() != 0 || len(ob.Quarantined()) != 0 {
		t.Fatalf("acked %d, quarantined %d while the hub refuses", ob.Acked(), len(ob.Quarantined()))
	}

	h.set(func(h *fakeHub) { h.refuseAll = false })
	waitAcked(t, ob, uint64(len(es)))
	if r := u.Stats().Refusal; r != "" {
		t.Errorf("Stats.Refusal %q after acks", r)
	}
	checkDelivered(t, h, es, nil)
	t.Logf("%d attempts in %v", n, window)
}
