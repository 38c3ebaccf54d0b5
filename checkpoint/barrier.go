package checkpoint

// Barrier is a consistent cut of a dataflow: the checkpoint of barrier ID
// holds exactly the effects of the records before it. The runtime
// (operators.Runtime) hands one to its sink when barrier ID has come
// through every worker; the edge commits it with the source position the
// barrier was injected at.
type Barrier struct {
	ID uint64
	// Changes replays onto w, in order, what changed in the dataflow's
	// state since the previous barrier (since the restore, or since the
	// start): applied on top of the store that holds the previous
	// checkpoint, it leaves exactly the state at this barrier. Hashes are
	// the keys' hashes (0 for dataflow-wide entries): a store partitions
	// by them. Valid only during the call that hands the Barrier over.
	Changes func(w ChangeWriter) error
	// Watermark is the dataflow's watermark when the barrier was
	// injected: every window result it made due came before the barrier.
	Watermark int64
}

// Parts collects the parts of checkpoints, each from one participant (a
// worker, a pipeline, the source), until every part of one is in. Parts
// of several checkpoints may be in flight at once, in any order. The zero
// value is ready; it is not safe for concurrent use (one goroutine, the
// collector, owns it).
type Parts[T any] struct {
	pending map[uint64]*pending[T]
}

type pending[T any] struct {
	parts []T
	need  int // -1: not known yet
}

// Add records part of checkpoint id. need, when not negative, is how many
// parts checkpoint id has in all (one part saying it is enough; they must
// agree). When the last part is in, Add returns every part of id, in the
// order they came, and forgets id.
func (p *Parts[T]) Add(id uint64, part T, need int) ([]T, bool) {
	if p.pending == nil {
		p.pending = map[uint64]*pending[T]{}
	}
	c := p.pending[id]
	if c == nil {
		c = &pending[T]{need: -1}
		p.pending[id] = c
	}
	c.parts = append(c.parts, part)
	if need >= 0 {
		c.need = need
	}
	if c.need < 0 || len(c.parts) < c.need {
		return nil, false
	}
	delete(p.pending, id)
	return c.parts, true
}

// Pending returns how many checkpoints have some parts in, not all.
func (p *Parts[T]) Pending() int { return len(p.pending) }
