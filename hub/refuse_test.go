package hub

import (
	"errors"
	"strings"
	"testing"
	"time"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// entries returns e's entries; nil for a nil e.
func (e *RefusedError) entries() []Refused {
	if e == nil {
		return nil
	}
	return e.Entries
}

// TestRefusedResend: a batch with several bad partials is refused with
// every one of them named and nothing applied; the same batch without them
// (their sequence numbers skipped, as the edge resends it) applies. A
// batch refused as a whole, and refusals of other edges, are counted,
// reported per edge in Status for IncidentWindow and logged once per edge
// per minute.
func TestRefusedResend(t *testing.T) {
	logs := &logBuffer{}
	th := newTestHub(t, func(c *Config) { c.Logger = logs.logger() })
	p, g := th.pipes[0], th.pipes[1]
	long := partial(p, 2, "k", 0, 1)
	long.Key = make([]byte, MaxKeyBytes+1)
	keyless := partial(g, 4, "k", 0, 1)
	ps := []*runnelv1.Partial{partial(p, 1, "k", 0, 1), long, partial(p, 3, "k2", 0, 2), keyless, partial(g, 5, "", 0, 3)}
	err := th.Apply(wm(batch("e", 1, 1, 6, ps...), "temps", 1000))
	var re *RefusedError
	if !errors.As(err, &re) || len(re.Entries) != 2 || re.Entries[0].Seq != 2 || re.Entries[1].Seq != 4 {
		t.Fatalf("err %v, want seqs 2 and 4 refused", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "2 partials refused; seq 2: key of 4097 bytes") || !strings.Contains(msg, "seq 4: key given") {
		t.Fatalf("message %q", msg)
	}
	if st := th.Status(); st.Batches != 0 || st.Partials != 0 || st.BatchesRefused != 1 || st.PartialsRefused != 2 || len(st.Refusals) != 1 {
		t.Fatalf("status after the refusal %+v", st)
	}

	// The edge sets 2 and 4 aside and resends 1..6 without them.
	must(t, th.Apply(wm(batch("e", 1, 1, 6, ps[0], ps[2], ps[4]), "temps", 1000)))
	th.commit()
	if _, seq, _ := th.Acked("e"); seq != 6 {
		t.Fatalf("acked %d, want 6", seq)
	}
	if got := th.count(th.latest("k", 0)); got != 1 {
		t.Fatalf("k count %d", got)
	}

	// More refusals of e within a minute are counted, not logged; another
	// edge's are logged at once.
	bad := func(edge string) *runnelv1.Batch { return batch(edge, 1, 7, 7, long) }
	long.Seq = 7
	for range 3 {
		th.clock.Advance(time.Second)
		if err := th.Apply(bad("e")); !errors.As(err, &re) {
			t.Fatalf("err %v", err)
		}
	}
	if err := th.Apply(batch("f", 1, 0, 0)); !errors.Is(err, ErrBadBatch) || errors.As(err, &re) {
		t.Fatalf("batch-level: %v", err)
	}
	if got := logs.lines("refused a batch"); len(got) != 2 || !strings.Contains(got[0], "edge=e") || !strings.Contains(got[1], "edge=f") ||
		!strings.Contains(got[1], "first_seq 0") {
		t.Fatalf("log lines %q", got)
	}
	th.clock.Advance(time.Minute)
	_ = th.Apply(bad("e"))
	if got := logs.lines("refused a batch", "edge=e", "unlogged_since_last=3"); len(got) != 1 {
		t.Fatalf("log lines %q, want one counting the 3 unlogged", logs.lines("refused"))
	}
	st := th.Status()
	if st.BatchesRefused != 6 || st.PartialsRefused != 6 || len(st.Refusals) != 2 {
		t.Fatalf("status %+v", st)
	}
	if r := st.Refusals[0]; r.Edge != "e" || r.Count != 5 || r.Partials != 6 || !strings.Contains(r.Reason, "seq 7: key of 4097") {
		t.Fatalf("e's refusals %+v", r)
	}
	if r := st.Refusals[1]; r.Edge != "f" || r.Count != 1 || r.Partials != 0 {
		t.Fatalf("f's refusals %+v", r)
	}
	th.clock.Advance(IncidentWindow + time.Second)
	if st := th.Status(); len(st.Refusals) != 0 || st.BatchesRefused != 6 {
		t.Fatalf("after the incident window %+v", st)
	}
}
