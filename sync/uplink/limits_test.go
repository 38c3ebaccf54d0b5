package uplink_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
)

// TestLimitsQuarantineBeforeSending: the hub announces its limits. An
// entry whose key or state is beyond them, or that alone is larger than a
// batch may be, is quarantined with the uplink's reason and never sent as
// a partial; no batch the hub receives has more partials or bytes than
// the limits allow; everything else is applied once, in order.
func TestLimitsQuarantineBeforeSending(t *testing.T) {
	t.Run("edge=e1", func(t *testing.T) { testLimits(t, "e1") })
	// The edge id is in every batch: an entry that fits a batch of a short
	// id's may not fit one of a long id's.
	t.Run("edge=long", func(t *testing.T) { testLimits(t, strings.Repeat("e", 300)) })
}

func testLimits(t *testing.T, edge string) {
	lim := &runnelv1.Limits{MaxKeyBytes: 32, MaxStateBytes: 1100, MaxBatchBytes: 1200, MaxBatchPartials: 5}
	h := newHub()
	h.limits = lim
	rng := rand.New(rand.NewPCG(1, 2))
	es := entries(600)
	want := map[uint64]string{}
	for i := range es {
		e, seq := &es[i], uint64(i+1)
		if e.Marker {
			continue
		}
		switch i % 50 {
		case 10:
			e.Key = []byte(strings.Repeat("k", 33))
			want[seq] = "key of 33 bytes"
		case 20:
			e.State = make([]byte, 1101)
			want[seq] = "aggregate state of 1101 bytes"
		case 30: // within the state limit, but with its key and fields over a batch
			e.State = make([]byte, 1100)
			want[seq] = "more than a batch the hub accepts"
		case 40: // a batch of its own, if the edge id is short
			e.State = make([]byte, 1000)
			if len(edge) > 100 {
				want[seq] = "more than a batch the hub accepts"
			}
		default:
			e.State = make([]byte, rng.IntN(400))
		}
	}
	ob := uplinktest.New()
	ob.Add(es...)
	u, stop := startWith(t, serve(t, h), ob, func(c *uplink.Config) {
		c.EdgeID = edge
		c.BatchEntries = 100 // the hub's limits bind, not this
		noBackoff(c)
	})
	waitAcked(t, ob, uint64(len(es)))
	stop()

	skip := map[uint64]bool{}
	for seq := range want {
		skip[seq] = true
	}
	checkDelivered(t, h, es, skip)
	q := ob.Quarantined()
	if len(q) != len(want) {
		t.Errorf("%d entries quarantined, want %d", len(q), len(want))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for seq, w := range want {
		if !strings.Contains(q[seq], w) || strings.HasPrefix(q[seq], "hub:") {
			t.Errorf("entry %d quarantined with reason %q, want the uplink's %q", seq, q[seq], w)
		}
		if h.partials[seq] != 0 {
			t.Errorf("entry %d beyond the limits was sent as a partial %d times", seq, h.partials[seq])
		}
	}
	full := 0
	for _, b := range h.batches {
		if b.size > int(lim.MaxBatchBytes) || b.partials > int(lim.MaxBatchPartials) {
			t.Errorf("batch %d-%d: %d partials, %d bytes; the hub accepts %d, %d", b.first, b.last, b.partials, b.size, lim.MaxBatchPartials, lim.MaxBatchBytes)
		}
		if b.partials == int(lim.MaxBatchPartials) {
			full++
		}
	}
	maxSize := 0
	for _, b := range h.batches {
		maxSize = max(maxSize, b.size)
	}
	t.Logf("%d batches, %d full, largest %d bytes", len(h.batches), full, maxSize)
	if full == 0 && len(edge) < 100 {
		t.Error("no batch reached max_batch_partials: the test does not test it")
	}
	st := u.Stats()
	if st.Quarantined != uint64(len(want)) || h.refusals != 0 {
		t.Errorf("Stats.Quarantined %d (want %d), hub refusals %d", st.Quarantined, len(want), h.refusals)
	}
	if w := (uplink.Limits{MaxKeyBytes: 32, MaxStateBytes: 1100, MaxBatchBytes: 1200, MaxBatchItems: 5}); st.Limits != w {
		t.Errorf("Stats.Limits %+v, want %+v", st.Limits, w)
	}
}

// TestLimitsDefault: a hub that announces no limits, or some, gets
// DefaultLimits for the rest.
func TestLimitsDefault(t *testing.T) {
	partly := uplink.DefaultLimits
	partly.MaxKeyBytes = 100
	for _, tc := range []struct {
		name string
		lim  *runnelv1.Limits
		want uplink.Limits
	}{
		{"none", nil, uplink.DefaultLimits},
		{"zero", &runnelv1.Limits{}, uplink.DefaultLimits},
		{"key only", &runnelv1.Limits{MaxKeyBytes: 100}, partly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub()
			h.limits = tc.lim
			ob := uplinktest.New()
			ob.Add(entries(20)...)
			u, stop := start(t, serve(t, h), ob)
			if l := u.Stats().Limits; l != uplink.DefaultLimits {
				t.Errorf("Stats.Limits before connecting %+v", l)
			}
			waitAcked(t, ob, 20)
			stop()
			if l := u.Stats().Limits; l != tc.want {
				t.Errorf("Stats.Limits %+v, want %+v", l, tc.want)
			}
		})
	}
}
