package uplink_test

import (
	"strings"
	"testing"

	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
)

// TestHigherEpochFollowed: a hub that holds a higher epoch E for this edge
// answers Hello with it; the edge stores E+1 and resends its outbox under
// it, up to MaxEpoch.
func TestHigherEpochFollowed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		held   uint64
		acked  uint64
		expect uint64
	}{
		{"held=5", 5, 3, 6},
		{"held=MaxEpoch-1", uplink.MaxEpoch - 1, 80, uplink.MaxEpoch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHub()
			h.epoch, h.acked = tc.held, tc.acked
			ob := uplinktest.New()
			es := entries(60)
			ob.Add(es...)
			u, stop := start(t, serve(t, h), ob)
			waitAcked(t, ob, uint64(len(es)))
			stop()
			if e := ob.Epoch(); e != tc.expect {
				t.Fatalf("outbox epoch %d, want %d", e, tc.expect)
			}
			st := u.Stats()
			if st.NewEpochs != 1 || st.Epoch != tc.expect || st.LastNewEpochAt.IsZero() || st.Refusal != "" {
				t.Errorf("Stats: %d new epochs, epoch %d, last new at %v, refusal %q", st.NewEpochs, st.Epoch, st.LastNewEpochAt, st.Refusal)
			}
			if h.epoch != tc.expect {
				t.Errorf("hub epoch %d, want %d", h.epoch, tc.expect)
			}
			checkDelivered(t, h, es, nil)
		})
	}
}

// TestEpochFightBacksOff: a hub that always holds an epoch above the
// edge's (another edge runs with this id and keeps moving it) makes new
// epochs no faster than the back-off allows.
func TestEpochFightBacksOff(t *testing.T) {
	h := newHub()
	h.epochAhead = true
	ob := uplinktest.New()
	ob.Add(entries(20)...)
	u, stop := startWith(t, serve(t, h), ob, countedBackoff)
	defer stop()
	waitFor(t, "a new epoch", func() bool { return u.Stats().NewEpochs > 0 })
	n0 := u.Stats().NewEpochs
	a := attempts(h, window)
	n := int(u.Stats().NewEpochs - n0)
	if n < 2 || n > maxAttempts || a > maxAttempts+1 {
		t.Errorf("%d new epochs (%d Hellos) in %v, want 2..%d (back-off %v..%v)", n, a, window, maxAttempts, backoffMin, backoffMax)
	}
	if e, s := ob.Epoch(), u.Stats().Epoch; e < 3 || s != e {
		t.Errorf("outbox epoch %d, Stats.Epoch %d", e, s)
	}
	t.Logf("%d new epochs in %v", n, window)
}

// TestAbsurdEpochNotFollowed: a hub that holds an epoch no edge reaches
// (forged or corrupt) is not followed: the edge keeps its epoch, says why
// in Stats.Refusal and retries after the back-off, until the hub is reset.
func TestAbsurdEpochNotFollowed(t *testing.T) {
	for _, held := range []uint64{uplink.MaxEpoch, 1 << 63} {
		h := newHub()
		h.epoch, h.acked = held, 7
		ob := uplinktest.New()
		es := entries(30)
		ob.Add(es...)
		u, stop := startWith(t, serve(t, h), ob, countedBackoff)
		waitFor(t, "a refusal", func() bool { return u.Stats().Refusal != "" })
		if a := attempts(h, window); a < 2 || a > maxAttempts {
			t.Errorf("held %d: %d attempts in %v, want 2..%d", held, a, window, maxAttempts)
		}
		st := u.Stats()
		if !strings.Contains(st.Refusal, "beyond any an edge reaches") || ob.Epoch() != 1 || st.NewEpochs != 0 || ob.Acked() != 0 {
			t.Errorf("held %d: Refusal %q, outbox epoch %d, %d new epochs, acked %d", held, st.Refusal, ob.Epoch(), st.NewEpochs, ob.Acked())
		}

		h.set(func(h *fakeHub) { h.epoch, h.acked = 0, 0 }) // the operator resets the edge at the hub
		waitAcked(t, ob, uint64(len(es)))
		stop()
		if st := u.Stats(); st.Refusal != "" || ob.Epoch() != 1 {
			t.Errorf("held %d, then reset: Refusal %q, outbox epoch %d", held, st.Refusal, ob.Epoch())
		}
		checkDelivered(t, h, es, nil)
	}
}

// TestHelloRefused: a hub that refuses the edge's Hello (InvalidArgument)
// is retried after the back-off, and Stats.Refusal says so until acks.
func TestHelloRefused(t *testing.T) {
	h := newHub()
	h.refuseHello = true
	ob := uplinktest.New()
	es := entries(30)
	ob.Add(es...)
	u, stop := startWith(t, serve(t, h), ob, countedBackoff)
	defer stop()
	waitFor(t, "a refusal", func() bool { return u.Stats().Refusal != "" })
	if a := attempts(h, window); a < 2 || a > maxAttempts {
		t.Errorf("%d attempts in %v, want 2..%d", a, window, maxAttempts)
	}
	if r := u.Stats().Refusal; r != "the hub refuses this edge's epoch 1: epoch refused" {
		t.Errorf("Stats.Refusal %q", r)
	}
	if ob.Epoch() != 1 || u.Stats().NewEpochs != 0 {
		t.Errorf("outbox epoch %d, %d new epochs", ob.Epoch(), u.Stats().NewEpochs)
	}
	h.set(func(h *fakeHub) { h.refuseHello = false })
	waitAcked(t, ob, uint64(len(es)))
	if r := u.Stats().Refusal; r != "" {
		t.Errorf("Stats.Refusal %q after acks", r)
	}
}
