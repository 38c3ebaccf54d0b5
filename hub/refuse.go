package hub

import (
	"fmt"
	"strings"
	"time"

	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Limits of what Apply accepts. hub/server announces them to edges in
// Resume.limits, so that an edge sets aside (quarantines) an entry beyond
// them instead of sending it.
const (
	// MaxKeyBytes bounds a partial's encoded key: the edge's own limit.
	MaxKeyBytes = operators.MaxKeyBytes
	// MaxStateBytes bounds a partial's aggregate state.
	MaxStateBytes = 1 << 20
	// MaxBatchPartials bounds the partials of one batch; a batch with
	// more is refused as a whole.
	MaxBatchPartials = 100_000
)

// RefusedError is Apply's error for a batch some of whose partials the hub
// will never accept: nothing of the batch was applied. It names every such
// partial, by sequence number, with its reason; the edge sets them aside
// and sends the batch again without them, which then applies. It unwraps
// to ErrBadBatch.
type RefusedError struct {
	Edge    string
	Epoch   uint64
	Entries []Refused // in sequence order
}

// Refused is one partial of a batch the hub refuses, and why.
type Refused struct {
	Seq    uint64
	Reason string
}

// errorEntries is how many entries RefusedError.Error names.
const errorEntries = 3

func (e *RefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hub: batch from %q epoch %d: %d partials refused", e.Edge, e.Epoch, len(e.Entries))
	for _, r := range e.Entries[:min(len(e.Entries), errorEntries)] {
		fmt.Fprintf(&b, "; seq %d: %s", r.Seq, r.Reason)
	}
	if n := len(e.Entries) - errorEntries; n > 0 {
		fmt.Fprintf(&b, "; and %d more", n)
	}
	return b.String()
}

func (e *RefusedError) Unwrap() error { return ErrBadBatch }

// refuse counts and logs a refused batch and returns err: entries for a
// RefusedError, or nil for a batch refused as a whole (err then says why).
// Logging is rate-limited per edge: the first refusal, then one line per
// logEvery with the count of those in between. Caller holds h.mu.
func (h *Hub) refuse(now time.Time, b *runnelv1.Batch, entries []Refused, err error) error {
	edge, epoch, first, last := "", uint64(0), uint64(0), uint64(0)
	if b != nil {
		edge, epoch, first, last = b.EdgeId, b.Epoch, b.FirstSeq, b.LastSeq
	}
	reason := ""
	if entries != nil {
		err = &RefusedError{Edge: edge, Epoch: epoch, Entries: entries}
		reason = fmt.Sprintf("seq %d: %s", entries[0].Seq, entries[0].Reason)
	} else {
		reason = err.Error()
	}
	h.stats.BatchesRefused++
	h.stats.PartialsRefused += uint64(len(entries))
	if logIt, suppressed := h.refusals.note(now, edge, uint64(len(entries)), reason); logIt {
		h.cfg.Logger.Warn("hub: refused a batch; nothing of it applied",
			"edge", edge, "epoch", epoch, "first_seq", first, "last_seq", last,
			"partials_refused", len(entries), "reason", reason, "unlogged_since_last", suppressed)
	}
	return err
}
