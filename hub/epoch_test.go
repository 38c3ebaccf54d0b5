package hub

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	bolt "go.etcd.io/bbolt"
)

// TestHelloEpochBounds: a Hello with an older epoch is answered with the
// hub's; one more than MaxEpochStep past the held epoch, or beyond
// MaxEpoch for any edge, is refused (ErrBadEpoch), counted, logged and
// changes nothing, so a valid token cannot fence the real edge for good.
func TestHelloEpochBounds(t *testing.T) {
	logs := &logBuffer{}
	th := newTestHub(t, func(c *Config) { c.Logger = logs.logger() })
	if r, err := th.Hello("e", 3, 1); err != nil || r != (Resume{3, 0}) {
		t.Fatalf("Hello new = %+v, %v", r, err)
	}
	for _, epoch := range []uint64{3 + MaxEpochStep + 1, MaxEpoch + 1, math.MaxUint64} {
		if r, err := th.Hello("e", epoch, 1); !errors.Is(err, ErrBadEpoch) {
			t.Fatalf("Hello epoch %d = %+v, %v; want ErrBadEpoch", epoch, r, err)
		}
	}
	if r, err := th.Hello("e", 1, 1); err != nil || r != (Resume{3, 0}) {
		t.Fatalf("Hello older = %+v, %v; want the hub's epoch 3", r, err)
	}
	// A new edge may start anywhere up to MaxEpoch.
	if _, err := th.Hello("new", MaxEpoch+1, 1); !errors.Is(err, ErrBadEpoch) {
		t.Fatalf("Hello of a new edge beyond MaxEpoch: %v", err)
	}
	if r, err := th.Hello("far", MaxEpoch, 1); err != nil || r.Epoch != MaxEpoch {
		t.Fatalf("Hello of a new edge at MaxEpoch = %+v, %v", r, err)
	}
	if r, err := th.Hello("e", 3+MaxEpochStep, 1); err != nil || r != (Resume{3 + MaxEpochStep, 0}) {
		t.Fatalf("Hello MaxEpochStep past = %+v, %v", r, err)
	}
	st := th.Status()
	if st.EpochsRefused != 4 || st.EdgesKnown != 2 || len(st.EpochRefusals) != 2 {
		t.Fatalf("status %+v", st)
	}
	if r := st.EpochRefusals[0]; r.Edge != "e" || r.Count != 3 || !strings.Contains(r.Reason, "epoch 18446744073709551615; the hub holds 3") {
		t.Fatalf("e's epoch refusals %+v", r)
	}
	if got := logs.lines("refused an epoch"); len(got) != 2 || !strings.Contains(got[0], "edge=e") || !strings.Contains(got[1], "edge=new") {
		t.Fatalf("log lines %q: want e's first and new's", got)
	}
	th.clock.Advance(IncidentWindow + time.Second)
	if st := th.Status(); len(st.EpochRefusals) != 0 {
		t.Fatalf("epoch refusals %+v after the incident window", st.EpochRefusals)
	}
}

// TestApplyEpochBounds: a batch of an older epoch is fenced; one whose
// epoch is beyond the bounds is refused and adopts nothing.
func TestApplyEpochBounds(t *testing.T) {
	th := newTestHub(t, nil)
	p := th.pipes[0]
	must(t, th.Apply(wm(batch("e", 2, 1, 1, partial(p, 1, "k", 0, 1)), "temps", 1000)))
	th.commit()
	if err := th.Apply(batch("e", 1, 1, 1, partial(p, 1, "k", 0, 1, 1))); !errors.Is(err, ErrFenced) {
		t.Fatalf("older epoch: %v", err)
	}
	if err := th.Apply(batch("e", 2+MaxEpochStep+1, 1, 1, partial(p, 1, "k", 0, 1, 1))); !errors.Is(err, ErrBadEpoch) {
		t.Fatalf("epoch too far: %v", err)
	}
	if err := th.Apply(batch("x", MaxEpoch+1, 1, 1, partial(p, 1, "k", 0, 1, 1))); !errors.Is(err, ErrBadEpoch) {
		t.Fatalf("new edge beyond MaxEpoch: %v", err)
	}
	th.commit()
	if e := th.Edges(); len(e) != 1 || e[0].Epoch != 2 || e[0].AckedSeq != 1 {
		t.Fatalf("edges %+v", e)
	}
	if st := th.Status(); st.Partials != 1 || st.EpochsRefused != 2 {
		t.Fatalf("status %+v", st)
	}
	must(t, th.Apply(batch("e", 2+MaxEpochStep, 1, 1, partial(p, 1, "k", 0, 1, 1))))
	th.commit()
	if r := th.latest("k", 0); th.count(r) != 2 || r.Version != 2 {
		t.Fatalf("after the new epoch: count %d v%d", th.count(r), r.Version)
	}
}

// TestAbsurdStoredEpoch: a store written by an older hub holds an edge at
// an epoch beyond MaxEpoch, with a partial of it. Open logs it and holds
// the edge at epoch 0: its next Hello is adopted, and its partial of the
// window replaces the one stored under the absurd epoch.
func TestAbsurdStoredEpoch(t *testing.T) {
	logs := &logBuffer{}
	th := newTestHub(t, func(c *Config) { c.Logger = logs.logger(); c.Resident = time.Nanosecond })
	p := th.pipes[0]
	must(t, th.Apply(wm(batch("e", 1, 1, 1, partial(p, 1, "k", 0, 1, 1, 1)), "temps", 1000)))
	must(t, th.Apply(wm(batch("f", 1, 1, 1, partial(p, 1, "k", 1000, 1)), "temps", 5000)))
	th.commit()
	th.Hub.Close()
	kh := partialKeyOf(t, p.Name, encKey("k"), 0, 1000, "e")
	th.poison(func(tx *bolt.Tx) {
		rec := edgeRecord{epoch: math.MaxUint64, acked: 7, lastSeen: th.clock.Now().UnixNano(),
			watermarks: []pipelineWatermark{{"temps", 1000}}}
		th.putRecord(tx, bucketEdges, []byte("e"), appendEdgeValue(nil, &rec))
		b := tx.Bucket(bucketPartials).Bucket(kgBucket(kh.kg))
		if err := b.Put(kh.key, appendRecord(nil, kh.key, appendPartialValue(nil, math.MaxUint64, 7, 1, false, 0, stateOf(p.Aggregates, 1, 1, 1)))); err != nil {
			t.Fatal(err)
		}
	})
	th.open()
	if got := logs.lines("open:", "stored epoch", "edge=e"); len(got) != 1 {
		t.Fatalf("log lines %q", logs.lines("open:"))
	}
	// The next commit writes the edge back without the absurd epoch.
	th.commit()
	th.restart()
	if got := logs.lines("open:", "stored epoch"); len(got) != 1 {
		t.Fatalf("the absurd epoch is still stored: %q", got)
	}
	if e := th.Edges(); e[0].ID != "e" || e[0].Epoch != 0 {
		t.Fatalf("edges %+v", e)
	}
	if r, err := th.Hello("e", 3, 2); err != nil || r != (Resume{3, 0}) {
		t.Fatalf("Hello after the reset = %+v, %v", r, err)
	}
	// The resend of the window under epoch 3 replaces the absurd one.
	must(t, th.Apply(batch("e", 3, 1, 1, partial(p, 1, "k", 0, 1, 1))))
	th.commit()
	if r := th.latest("k", 0); th.count(r) != 2 || r.Version != 2 {
		t.Fatalf("after the resend: count %d v%d, want 2 v2", th.count(r), r.Version)
	}
	th.restart()
	if e := th.Edges(); e[0].ID != "e" || e[0].Epoch != 3 || e[0].AckedSeq != 1 {
		t.Fatalf("edges after restart %+v", e)
	}
}

// storedPartial names a partial's record in the store.
type storedPartial struct {
	kg  uint32
	key []byte
}

func partialKeyOf(t *testing.T, pipeline string, key []byte, start, end int64, edge string) storedPartial {
	t.Helper()
	kg := uint32(xxhash.Sum64(key) % 16) // testHub's key groups
	k := appendWindowPrefix(nil, pipeline, start, end, key)
	k = append(k, tagPartial)
	return storedPartial{kg, append(k, edge...)}
}
