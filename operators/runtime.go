package operators

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/runnel-io/runnel/window"
)

// Options tune a Runtime; the zero value means defaults.
type Options struct {
	Workers   int // window workers; default GOMAXPROCS
	KeyGroups int // fixed number of key groups keys hash into; default 128
	BatchSize int // records per batch between goroutines; default 512
	Depth     int // batches in flight per channel; default 4
	// DedupWindow is how many event ids are remembered for redelivery
	// dedup (pipelines with event_id); default DefaultDedupWindow.
	DedupWindow int

	// Restore, when set, loads a checkpoint (the entries a BarrierSink got
	// from a Barrier) before the first record: load calls fn for every entry.
	// With MaxResident and KeyStore set, the entries of one key group
	// (hash % KeyGroups) must come together, as the edge's store holds
	// them: the workers evict the keys of the groups already loaded, so
	// a state larger than memory restores within the bound.
	Restore func(fn func(hash uint64, key, value []byte) error) error

	// MaxResident, when positive and KeyStore is set, bounds the keys the
	// window operators keep in memory, shared out among the workers:
	// clean keys whose windows have all fired are evicted and read back
	// from KeyStore on their next record (window.Config.MaxResident). The
	// BarrierSink must then report each checkpoint it has stored with
	// Runtime.Committed. Session windows ignore it.
	MaxResident int
	// KeyStore reads evicted keys' entries: those of the last checkpoint
	// reported to Committed, or of a later one. The workers call it
	// concurrently.
	KeyStore window.KeyStore
}

func (o *Options) ensureDefaults() {
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.KeyGroups <= 0 {
		o.KeyGroups = 128
	}
	o.Workers = min(o.Workers, o.KeyGroups)
	if o.BatchSize <= 0 {
		o.BatchSize = 512
	}
	if o.Depth <= 0 {
		o.Depth = 4
	}
	if o.DedupWindow <= 0 {
		o.DedupWindow = DefaultDedupWindow
	}
}

// Stats counts what a Runtime did. Runtime.Stats reads them live.
type Stats struct {
	In       uint64 // payloads ingested
	Dead     uint64 // payloads sent to the dead-letter output
	Filtered uint64 // records the filter dropped
	Dupes    uint64 // redeliveries dropped by event id
	Late     uint64 // records too late for every window
	Results  uint64 // window results emitted, all versions
	Updates  uint64 // results with version > 1
	Evicted  uint64 // keys evicted from memory (Options.MaxResident)
	Reloaded uint64 // evicted keys read back for a record
	Lookups  uint64 // KeyStore reads of keys not in memory, found or not
	Resident uint64 // keys in memory now
}

// Runtime runs one Pipeline: the caller's goroutine ingests payloads
// (decode, watermark, route by key group), Workers goroutines run the window
// operators of their key groups, and one goroutine hands outputs to the Sink.
//
// Records move in batches over bounded channels. A full channel blocks the
// sender, so a slow Sink stops the workers, which stop the ingesting
// goroutine: back-pressure reaches the source. Every record carries the
// watermark that held when it arrived, and workers advance to it before
// adding the record, so results do not depend on how records were batched.
//
// Ingest, Flush, Tick and Close must be called from one goroutine.
type Runtime struct {
	p    *Pipeline
	opts Options
	sink Sink

	ctx     context.Context
	cancel  context.CancelFunc
	eg      *errgroup.Group
	workers []*worker
	out     chan *outBatch
	outFree chan *outBatch
	outDone chan error

	dec     *Decoder
	rec     *Record
	wms     *window.Watermarks
	cur     []*batch
	sentWM  []int64
	ob      *outBatch
	stats   Stats
	closed  bool
	lastErr error
	bars    barriers // output goroutine only
	epoch   uint64   // last barrier injected
	live    liveStats
	dedup   *dedup // nil without event_id

	committed atomic.Uint64 // last checkpoint the sink reported stored
	budget    budgetState   // Budget's, ingesting goroutine only
	commitMu  sync.Mutex
	commitCh  chan struct{} // closed by the next Committed
}

// Budget says what a source should do about the keys the window operators
// hold, against Options.MaxResident: keys wait in memory for the
// checkpoint that stores them, so a source that brings new keys faster
// than checkpoints come should inject a barrier now (Checkpoint: more than
// a quarter again the bound, every barrier so far committed), or, with half
// again the bound and a barrier not committed yet, wait for the commit before it
// ingests more (Wait, and wake on Committed's signal). When an early
// checkpoint let fewer than an eighth of the bound go, the keys are held
// for windows still to fire: Budget then says OK until they are within the
// bound again. Call it from the ingesting goroutine.
func (r *Runtime) Budget() Budget {
	if r.opts.MaxResident <= 0 || r.opts.KeyStore == nil {
		return BudgetOK
	}
	var n, ev uint64
	for i := range r.live.workers {
		n += r.live.workers[i].resident.Load()
		ev += r.live.workers[i].evicted.Load()
	}
	bound := uint64(r.opts.MaxResident)
	if n <= bound {
		r.budget = budgetState{}
		return BudgetOK
	}
	if r.budget.stuck {
		return BudgetOK
	}
	switch {
	case r.committed.Load() >= r.epoch && n > bound*5/4:
		// An early checkpoint asked for is judged once it was injected
		// (the source may put off a barrier asked for), committed, and
		// every worker has had a batch since to evict what it let go;
		// judged sooner, it would look like one that let nothing go.
		judge := r.budget.asked && r.epoch > r.budget.at
		if judge && !r.evictedAfter(r.budget.at) {
			return BudgetOK
		}
		if judge && ev < r.budget.evicted+bound/8 {
			// The last early checkpoint let few keys go: the keys are
			// held for windows still to fire, not for a checkpoint.
			// Stop forcing checkpoints until they fall to the bound.
			r.budget.stuck = true
			return BudgetOK
		}
		r.budget = budgetState{asked: true, evicted: ev, at: r.epoch}
		return BudgetCheckpoint
	case r.committed.Load() < r.epoch && n > bound*3/2:
		return BudgetWait
	}
	return BudgetOK
}

// budgetState is what Budget remembers between calls (ingesting
// goroutine only).
type budgetState struct {
	asked   bool   // an early checkpoint was asked for since the keys were within the bound
	evicted uint64 // evictions when it was
	stuck   bool   // it let few keys go: no more until the keys are within the bound
	at      uint64 // the last barrier injected when it was: the early one comes after
}

// evictedAfter reports whether every worker has evicted after a commit of
// a barrier later than id.
func (r *Runtime) evictedAfter(id uint64) bool {
	for i := range r.live.workers {
		if r.live.workers[i].seen.Load() <= id {
			return false
		}
	}
	return true
}

// Budget is Runtime.Budget's advice.
type Budget int

// Runtime.Budget's answers.
const (
	BudgetOK         Budget = iota
	BudgetCheckpoint        // inject a barrier
	BudgetWait              // wait for CommitSignal before ingesting more
)

// CommitSignal returns a channel closed at the next Committed.
func (r *Runtime) CommitSignal() <-chan struct{} {
	r.commitMu.Lock()
	defer r.commitMu.Unlock()
	if r.commitCh == nil {
		r.commitCh = make(chan struct{})
	}
	return r.commitCh
}

// Committed tells the Runtime that the checkpoint of barrier id, with
// every earlier one, is stored where Options.KeyStore reads: the keys its
// snapshot wrote may be evicted. Safe to call from any goroutine.
func (r *Runtime) Committed(id uint64) {
	for {
		c := r.committed.Load()
		if id <= c || r.committed.CompareAndSwap(c, id) {
			break
		}
	}
	r.commitMu.Lock()
	if r.commitCh != nil {
		close(r.commitCh)
		r.commitCh = nil
	}
	r.commitMu.Unlock()
}

// Start starts the workers and the output goroutine, after restoring
// opts.Restore if set. ctx cancels the Runtime; Close must be called in any
// case once Start succeeded.
func Start(ctx context.Context, p *Pipeline, sink Sink, opts Options) (*Runtime, error) {
	opts.ensureDefaults()
	ctx, cancel := context.WithCancel(ctx)
	eg, ctx := errgroup.WithContext(ctx)
	r := &Runtime{
		p: p, opts: opts, sink: sink, ctx: ctx, cancel: cancel, eg: eg,
		out:     make(chan *outBatch, opts.Depth*opts.Workers),
		outFree: make(chan *outBatch, opts.Depth*opts.Workers+opts.Workers+2),
		outDone: make(chan error, 1),
		dec:     p.NewDecoder(),
		rec:     p.NewRecord(),
		wms:     window.NewWatermarks(1, p.MaxOOO, p.Idle),
		cur:     make([]*batch, opts.Workers),
		sentWM:  make([]int64, opts.Workers),
	}
	for range cap(r.outFree) {
		r.outFree <- &outBatch{}
	}
	if len(p.idFields) > 0 {
		r.dedup = newDedup(opts.DedupWindow)
	}
	for i := range opts.Workers {
		w := newWorker(r, i)
		r.workers = append(r.workers, w)
		r.sentWM[i] = window.MinTime
	}
	r.bars.need = opts.Workers + 1
	r.live.workers = make([]workerStats, opts.Workers)
	if opts.Restore != nil {
		if err := r.restore(opts.Restore); err != nil {
			cancel()
			return nil, err
		}
	}
	r.publishStats()
	for _, w := range r.workers {
		w.publishStats() // what the restore left resident
	}
	for _, w := range r.workers {
		eg.Go(func() error { return w.run(ctx) })
	}
	go func() { r.outDone <- r.output() }()
	return r, nil
}

// Ingest decodes one payload and routes it to its worker. It blocks while
// that worker's channel is full. offset is the payload's source position,
// reported with late records and dead letters. A bad payload goes to the
// dead-letter output and is not an error; the error is the Runtime's
// failure (cancelled, Sink failed).
func (r *Runtime) Ingest(payload []byte, topic string, offset int64) error {
	if err := r.ctx.Err(); err != nil {
		return r.failure(err)
	}
	r.stats.In++
	rec := r.rec
	if err := r.dec.Decode(payload, topic, rec); err != nil {
		if errors.Is(err, ErrFiltered) {
			r.stats.Filtered++
			return nil
		}
		r.stats.Dead++
		return r.dead(offset, topic, payload, err)
	}
	if r.dedup != nil && r.dedup.check(rec.ID) {
		r.stats.Dupes++
		return nil
	}
	// Bounded event times: a record far from the edge's clock must not
	// move the watermark for every key.
	if c := r.wms.Clock(); c != 0 && (r.p.MaxFuture > 0 || r.p.MaxPast > 0) {
		if reason := r.outOfBounds(rec.Time, c); reason != "" {
			r.stats.Dead++
			return r.dead(offset, topic, payload, errors.New(reason))
		}
	}
	wm := r.wms.Observe(0, rec.Time)
	w := r.workerOf(rec.Hash)
	b := r.cur[w]
	if b == nil {
		var err error
		if b, err = r.getBatch(w); err != nil {
			return err
		}
	}
	b.add(rec, wm, offset)
	if b.n == r.opts.BatchSize {
		return r.send(w, wm)
	}
	return nil
}

// Reject sends a payload the source itself could not accept (too long, say)
// to the dead-letter output with the reason.
func (r *Runtime) Reject(payload []byte, topic string, offset int64, reason string) error {
	if err := r.ctx.Err(); err != nil {
		return r.failure(err)
	}
	r.stats.In++
	r.stats.Dead++
	return r.dead(offset, topic, payload, errors.New(reason))
}

// Flush sends every partly filled batch, and the current watermark to every
// worker, so results up to the watermark come out.
func (r *Runtime) Flush() error {
	wm := r.wms.Current()
	for w := range r.workers {
		if r.cur[w] == nil && r.sentWM[w] == wm {
			continue
		}
		if r.cur[w] == nil {
			if _, err := r.getBatch(w); err != nil {
				return err
			}
		}
		if err := r.send(w, wm); err != nil {
			return err
		}
	}
	return r.flushOut()
}

// Clock tells the Runtime the processing time, Unix ms: the edge's clock as
// its source logged it, so that a replay gives the Runtime the same clock
// at the same records. It bounds event times (the pipeline's max_future
// and max_past; before the first Clock nothing is bounded) and drives the
// idle advance of the watermark (window.Watermarks); the workers see a
// watermark it moved with the next Flush or Barrier. A clock behind the
// last one is ignored. Clock is deterministic: it reads no clock itself.
func (r *Runtime) Clock(ms int64) {
	r.wms.Tick(ms)
}

// outOfBounds returns why event time t lies outside the pipeline's bounds
// around the clock c, or "".
func (r *Runtime) outOfBounds(t, c int64) string {
	p := r.p
	switch {
	case p.MaxFuture > 0 && t > c+p.MaxFuture:
		return fmt.Sprintf("event time %s is more than max_future (%s) ahead of the edge's clock, %s",
			showTime(t), time.Duration(p.MaxFuture)*time.Millisecond, showTime(c))
	case p.MaxPast > 0 && t < c-p.MaxPast:
		return fmt.Sprintf("event time %s is more than max_past (%s) behind the edge's clock, %s",
			showTime(t), time.Duration(p.MaxPast)*time.Millisecond, showTime(c))
	}
	return ""
}

// showTime renders a Unix ms time for a reason: RFC 3339 where it has one,
// the number too.
func showTime(ms int64) string {
	const lo, hi = -62135596800000, 253402300799999 // years 1 to 9999
	if ms < lo || ms > hi {
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%s (%d ms)", time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z"), ms)
}

// Watermark returns the watermark as of the last batch sent to the
// workers; safe to call from any goroutine.
func (r *Runtime) Watermark() int64 { return r.live.wm.Load() }

// EndOfInput sends the end of time to every worker as the watermark, so
// that every open window fires (as Close(true) makes them) while the
// Runtime stays open for the Barrier that commits what fired. It is how a
// pipeline revision ends when the one replacing it cannot take over its
// state. Nothing may be ingested after it; Barrier and Close may follow.
func (r *Runtime) EndOfInput() error {
	if err := r.ctx.Err(); err != nil {
		return r.failure(err)
	}
	if err := r.flushOut(); err != nil {
		return err
	}
	for w := range r.workers {
		if r.cur[w] == nil {
			if _, err := r.getBatch(w); err != nil {
				return err
			}
		}
		if err := r.send(w, window.MaxTime); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the Runtime and waits for its goroutines. Every record
// ingested so far, and every barrier, goes through the workers and reaches
// the Sink first. With endOfInput the watermark then advances to
// window.MaxTime, so every open window fires; without, open windows stay
// unfired: a checkpoint taken before Close keeps them. To abandon records in
// flight instead, cancel the Runtime's context. Close returns the counters
// and the first failure.
func (r *Runtime) Close(endOfInput bool) (Stats, error) {
	if r.closed {
		return r.stats, r.lastErr
	}
	r.closed = true
	var err error
	if r.ctx.Err() == nil {
		wm := r.wms.Current()
		if endOfInput {
			wm = window.MaxTime
		}
		err = r.flushOut()
		for w := range r.workers {
			if err != nil {
				break
			}
			b := r.cur[w]
			if b == nil {
				if b, err = r.getBatch(w); err != nil {
					break
				}
			}
			b.eof = true
			err = r.send(w, wm)
		}
	}
	if werr := r.eg.Wait(); werr != nil && !errors.Is(werr, context.Canceled) {
		err = werr
	}
	close(r.out)
	if oerr := <-r.outDone; oerr != nil {
		err = oerr
	}
	r.cancel()
	if err != nil && !errors.Is(err, context.Canceled) {
		r.lastErr = err
	}
	for _, w := range r.workers {
		s := w.op.Stats()
		r.stats.Late += s.Late
		r.stats.Results += s.Emitted
		r.stats.Updates += s.Updates
	}
	return r.stats, r.lastErr
}

// liveStats mirrors the counters for readers on other goroutines
// (metrics): the ingesting goroutine and each worker publish theirs after
// every batch.
type liveStats struct {
	wm                        atomic.Int64
	in, dead, filtered, dupes atomic.Uint64
	workers                   []workerStats
}

type workerStats struct {
	late, results, updates               atomic.Uint64
	evicted, reloaded, lookups, resident atomic.Uint64
	seen                                 atomic.Uint64 // the last commit the worker evicted after
}

// Stats returns the counters so far; safe to call from any goroutine.
func (r *Runtime) Stats() Stats {
	s := Stats{In: r.live.in.Load(), Dead: r.live.dead.Load(), Filtered: r.live.filtered.Load(), Dupes: r.live.dupes.Load()}
	for i := range r.live.workers {
		w := &r.live.workers[i]
		s.Late += w.late.Load()
		s.Results += w.results.Load()
		s.Updates += w.updates.Load()
		s.Evicted += w.evicted.Load()
		s.Reloaded += w.reloaded.Load()
		s.Lookups += w.lookups.Load()
		s.Resident += w.resident.Load()
	}
	return s
}

func (r *Runtime) publishStats() {
	r.live.wm.Store(r.wms.Current())
	r.live.in.Store(r.stats.In)
	r.live.dead.Store(r.stats.Dead)
	r.live.filtered.Store(r.stats.Filtered)
	r.live.dupes.Store(r.stats.Dupes)
}

func (r *Runtime) failure(err error) error {
	if cause := context.Cause(r.ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

func (r *Runtime) getBatch(w int) (*batch, error) {
	select {
	case b := <-r.workers[w].free:
		b.reset()
		r.cur[w] = b
		return b, nil
	case <-r.ctx.Done():
		return nil, r.failure(r.ctx.Err())
	}
}

func (r *Runtime) send(w int, wm int64) error {
	r.publishStats()
	b := r.cur[w]
	b.wm = wm
	r.cur[w] = nil
	r.sentWM[w] = wm
	select {
	case r.workers[w].in <- b:
		return nil
	case <-r.ctx.Done():
		return r.failure(r.ctx.Err())
	}
}

func (r *Runtime) dead(offset int64, topic string, payload []byte, reason error) error {
	if r.ob == nil {
		select {
		case r.ob = <-r.outFree:
		case <-r.ctx.Done():
			return r.failure(r.ctx.Err())
		}
	}
	r.ob.addDead(offset, topic, payload, reason.Error(), r.epoch)
	if r.ob.full() {
		return r.flushOut()
	}
	return nil
}

func (r *Runtime) flushOut() error {
	if r.ob == nil {
		return nil
	}
	ob := r.ob
	r.ob = nil
	select {
	case r.out <- ob:
		return nil
	case <-r.ctx.Done():
		return r.failure(r.ctx.Err())
	}
}

// output hands every output batch to the Sink, in the order batches arrive.
func (r *Runtime) output() error {
	bs, _ := r.sink.(BarrierSink)
	for ob := range r.out {
		err := ob.deliver(r.sink)
		if err == nil && ob.barrier != 0 {
			if b := r.bars.arrive(ob.barrier, ob.snap); b != nil && bs != nil {
				err = bs.Barrier(b)
			}
		}
		if err != nil {
			r.cancel()
			r.drain()
			return fmt.Errorf("operators: sink: %w", err)
		}
		ob.reset()
		r.outFree <- ob
	}
	return nil
}

func (r *Runtime) drain() {
	for ob := range r.out {
		ob.reset()
		r.outFree <- ob
	}
}

// worker owns the window operator of a range of key groups.
type worker struct {
	r     *Runtime
	idx   int
	epoch uint64 // last barrier passed
	in    chan *batch
	free  chan *batch
	op    *window.Operator
	ob    *outBatch
	ctx   context.Context
	err   error
	cur   *batch         // the batch being added
	recs  window.Records // cur's columns, as the operator takes them
	lateR func(i int, wm int64)
}

func newWorker(r *Runtime, idx int) *worker {
	w := &worker{
		r:    r,
		idx:  idx,
		in:   make(chan *batch, r.opts.Depth),
		free: make(chan *batch, r.opts.Depth+2),
	}
	for range cap(w.free) {
		// Compile numbers the inputs densely, so these are the Set's
		// NumInputs and HashInputs, the strides AddRecords takes.
		w.free <- newBatch(r.opts.BatchSize, len(r.p.numInputs), len(r.p.hashInput))
	}
	cfg := window.Config{
		Assigner:   r.p.Assigner,
		Lateness:   r.p.Lateness,
		Aggregates: r.p.Aggregates,
		Emit:       w.emit,
	}
	if r.opts.MaxResident > 0 && r.opts.KeyStore != nil {
		cfg.MaxResident = max(1, (r.opts.MaxResident+r.opts.Workers-1)/r.opts.Workers)
		cfg.Store = r.opts.KeyStore
	}
	op, err := window.NewOperator(cfg)
	if err != nil {
		panic(err) // Compile validated the assigner
	}
	w.op = op
	w.lateR = w.lateRecord
	return w
}

func (w *worker) run(ctx context.Context) error {
	w.ctx = ctx
	for {
		var b *batch
		select {
		case b = <-w.in:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.cur = b
		w.recs = window.Records{Keys: b.keys, KeyEnds: b.keyEnd, Hashes: b.hashes, Times: b.times, Marks: b.wms,
			Nums: b.nums, InputHashes: b.hsh}
		committed := w.r.committed.Load()
		w.op.Committed(committed)
		w.op.AddRecords(&w.recs, w.lateR) // evicts what that commit let go
		w.r.live.workers[w.idx].seen.Store(committed)
		w.cur = nil
		if err := w.op.Err(); err != nil && w.err == nil {
			w.err = fmt.Errorf("operators: worker %d: %w", w.idx, err)
		}
		w.op.Advance(b.wm)
		if w.err == nil && w.ob != nil {
			w.sendOut()
		}
		w.publishStats()
		if b.barrier != 0 && w.err == nil {
			w.barrier(b.barrier, w.idx == 0)
		}
		eof := b.eof
		w.free <- b
		if w.err != nil {
			return w.err
		}
		if eof {
			return nil
		}
	}
}

// publishStats mirrors the window operator's counters for Runtime.Stats.
func (w *worker) publishStats() {
	st, live := w.op.Stats(), &w.r.live.workers[w.idx]
	live.late.Store(st.Late)
	live.results.Store(st.Emitted)
	live.updates.Store(st.Updates)
	live.evicted.Store(st.Evicted)
	live.reloaded.Store(st.Reloaded)
	live.lookups.Store(st.Lookups)
	live.resident.Store(uint64(w.op.Resident()))
}

func (w *worker) outBatch() *outBatch {
	if w.ob == nil {
		select {
		case w.ob = <-w.r.outFree:
		case <-w.ctx.Done():
			w.err = w.ctx.Err()
			return nil
		}
	}
	return w.ob
}

func (w *worker) sendOut() {
	select {
	case w.r.out <- w.ob:
		w.ob = nil
	case <-w.ctx.Done():
		w.err = w.ctx.Err()
	}
}

func (w *worker) emit(res *window.Result) {
	ob := w.outBatch()
	if ob == nil {
		return
	}
	ob.addResult(w.r.p.Aggregates, res, w.epoch)
	if ob.full() {
		w.sendOut()
	}
}

// lateRecord sends record i of the batch being added, too late at
// watermark wm, to the late output.
func (w *worker) lateRecord(i int, wm int64) {
	b := w.cur
	ob := w.outBatch()
	if ob == nil {
		return
	}
	ob.addLate(b.key(i), b.times[i], wm, b.offsets[i], w.epoch)
	if ob.full() {
		w.sendOut()
	}
}
