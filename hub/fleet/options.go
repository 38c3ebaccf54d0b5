package fleet

import (
	"log/slog"
	"time"

	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Options configure a Fleet. The zero value of each field is its default.
type Options struct {
	// Now is the clock of every timestamp, soak and deadline (default
	// time.Now).
	Now func() time.Time
	// Logger receives what the Fleet does on its own: rollout steps,
	// failures and rollbacks, store errors (default: discard).
	Logger *slog.Logger
	// Tick is how often rollouts are evaluated and due statuses written
	// (default 1 s). Rollouts are also evaluated right after a status
	// that could change a gate. Negative: no background goroutine at
	// all; the caller calls Evaluate and FlushStatus (tests and
	// simulations that drive the clock).
	Tick time.Duration
	// StatusWriteEvery is how often an edge's status is written when only
	// its metrics changed (default 1 min). A status that changes what a
	// rollout gate looks at (applied generation, apply error, a
	// pipeline's revision, state or error) is written before Status
	// returns.
	StatusWriteEvery time.Duration
	// OnRevision, when set, is called with each new pipeline revision
	// and its compiled pipeline once the revision is durable, in the
	// order revisions are created. It must not call ApplyPipeline.
	OnRevision func(rev *runnelv1.PipelineRevision, p *operators.Pipeline)
	// LocalPipelines are the names of the pipelines the hub merges from
	// its own files (revision 0): ApplyPipeline refuses to manage a
	// pipeline of such a name (ErrConflict), whose results could not be
	// told apart from the local one's.
	LocalPipelines []string
	// NoSync skips fsync on commit: for tests and benchmarks only; a
	// machine crash may then lose or corrupt the store.
	NoSync bool
}

const (
	defaultTick             = time.Second
	defaultStatusWriteEvery = time.Minute
)

func (o *Options) ensureDefaults() {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Tick == 0 {
		o.Tick = defaultTick
	}
	if o.StatusWriteEvery <= 0 {
		o.StatusWriteEvery = defaultStatusWriteEvery
	}
}
