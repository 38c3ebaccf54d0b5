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

// TestResourceExhaustedHalvesBatches: the hub announces a batch limit
// larger than its gRPC message limit. The uplink halves its batches until
// they fit, quarantines each entry that alone is too large (and no other:
// the batches before it are in flight when the hub's answer comes), and
// delivers everything else. A slow hub answers a batch when the edge has
// sent more: the edge must not take the first it sent for the one too
// large.
func TestResourceExhaustedHalvesBatches(t *testing.T) {
	t.Run("hub=prompt", func(t *testing.T) { testResourceExhausted(t, 0) })
	t.Run("hub=slow", func(t *testing.T) { testResourceExhausted(t, 2*time.Millisecond) })
}

func testResourceExhausted(t *testing.T, recvDelay time.Duration) {
	h := newHub()
	h.recvDelay = recvDelay
	h.maxMsg = 1000
	h.limits = &runnelv1.Limits{MaxBatchBytes: 1 << 20, MaxStateBytes: 1 << 20}
	ob := uplinktest.New()
	es := entries(200)
	for i := range es {
		if !es[i].Marker {
			es[i].State = make([]byte, 150) // 7 to a batch are too many, 3 fit
		}
	}
	bigs := map[uint64]bool{55: true, 131: true, 132: true, 177: true}
	for seq := range bigs {
		es[seq-1].State = make([]byte, 1500)
	}
	ob.Add(es...)
	u, stop := start(t, serve(t, h), ob)
	waitAcked(t, ob, uint64(len(es)))
	stop()

	checkDelivered(t, h, es, bigs)
	q := ob.Quarantined()
	if len(q) != len(bigs) {
		t.Errorf("quarantined %v, want %v", q, bigs)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for seq := range bigs {
		if !strings.Contains(q[seq], "a batch of this entry alone is larger than the hub accepts") {
			t.Errorf("entry %d quarantined with reason %q", seq, q[seq])
		}
		if h.partials[seq] != 0 {
			t.Errorf("the hub received entry %d, too large, %d times", seq, h.partials[seq])
		}
	}
	for _, b := range h.batches {
		if b.size > h.maxMsg {
			t.Errorf("batch %d-%d of %d bytes got through", b.first, b.last, b.size)
		}
	}
	// Each entry too large ends at most four streams: two halving the
	// batches (7 to 3 to 1; once it is quarantined they go back to 7),
	// one where it follows other batches in flight, and one where it is
	// the stream's first batch, sent alone; then the last stream, stopped.
	if n, most := h.hellos, 4*len(bigs)+1; n > most {
		t.Errorf("%d streams; want at most %d", n, most)
	}
	t.Logf("%d streams", h.hellos)
	if st := u.Stats(); st.Quarantined != uint64(len(bigs)) || st.Reconnects == 0 {
		t.Errorf("Stats: %d quarantined, %d reconnects", st.Quarantined, st.Reconnects)
	}
}

// TestRefusalOfNothingToQuarantine: a hub that names in its Refusal an
// entry it was sent as a sequence number only (a marker, or an entry
// quarantined before) is refusing the batch as a whole: the uplink
// reports it and retries after the back-off, not at once in a loop, and
// counts each entry it quarantines once.
func TestRefusalOfNothingToQuarantine(t *testing.T) {
	for _, tc := range []struct {
		name string
		seq  uint64
		want map[uint64]bool // quarantined
	}{
		{"partial", 5, map[uint64]bool{5: true}}, // quarantined, then named again
		{"marker", 10, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub()
			h.refuseSeq = tc.seq
			ob := uplinktest.New()
			es := entries(40)
			ob.Add(es...)
			u, stop := startWith(t, serve(t, h), ob, countedBackoff)
			defer stop()
			waitFor(t, "a refusal", func() bool { return u.Stats().Refusal != "" })
			if a := attempts(h, window); a < 2 || a > maxAttempts {
				t.Errorf("%d attempts in %v, want 2..%d", a, window, maxAttempts)
			}
			st := u.Stats()
			if w := fmt.Sprintf("the hub refuses batches for entries it was not sent as partials (1; entry %d: stuck): partials refused", tc.seq); st.Refusal != w {
				t.Errorf("Stats.Refusal %q", st.Refusal)
			}
			if q := ob.Quarantined(); len(q) != len(tc.want) || st.Quarantined != uint64(len(tc.want)) {
				t.Errorf("quarantined %v, Stats.Quarantined %d; want %v", q, st.Quarantined, tc.want)
			}

			h.set(func(h *fakeHub) { h.refuseSeq = 0 })
			waitAcked(t, ob, uint64(len(es)))
			if r := u.Stats().Refusal; r != "" {
				t.Errorf("Stats.Refusal %q after acks", r)
			}
			checkDelivered(t, h, es, tc.want)
		})
	}
}
