package server_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/window/aggregate"
)

const testSpec = `name: temps
source: {mqtt: {topic: "plant/+/temp"}}
event_time: {field: ts, unit: ms}
key: [device]
window: {tumbling: 1m}
aggregates:
  n: count()
  avg_temp: avg(temp)
`

func testPipeline(t testing.TB) *operators.Pipeline {
	t.Helper()
	p, err := operators.CompileYAML("temps.yaml", []byte(testSpec))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// state encodes the aggregate state of temps over readings.
func state(p *operators.Pipeline, temps ...float64) []byte {
	st := p.Aggregates.New()
	for i, x := range temps {
		p.Aggregates.Add(st, &aggregate.Input{Time: int64(i), Nums: []float64{x}})
	}
	return p.Aggregates.AppendEncode(nil, st)
}

func mustKey(t testing.TB, p *operators.Pipeline, device string) []byte {
	t.Helper()
	k, err := p.KeyFromStrings(map[string]string{"device": device})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// fakeCore is an in-memory Core: every Apply commits at once. It checks
// fencing, gaps and pipelines as the contract says.
type fakeCore struct {
	p *operators.Pipeline

	mu        sync.Mutex
	edges     map[string]*hub.EdgeInfo
	next      chan struct{}
	applied   []*runnelv1.Batch
	results   []hub.Result
	subs      []*fakeSub
	commitErr string
	watermark int64
	applyErr  error             // returned by every Apply when set
	status    func(*hub.Status) // edits what Status returns
}

type fakeSub struct {
	key  []byte
	ch   chan hub.Result
	done bool
}

func newFakeCore(p *operators.Pipeline) *fakeCore {
	return &fakeCore{p: p, edges: map[string]*hub.EdgeInfo{}, next: make(chan struct{})}
}

func (f *fakeCore) commitLocked() {
	close(f.next)
	f.next = make(chan struct{})
}

func (f *fakeCore) Hello(edge string, epoch, nextSeq uint64) (hub.Resume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.edges[edge]
	if e == nil {
		e = &hub.EdgeInfo{ID: edge, Epoch: epoch, Watermarks: map[string]int64{}}
		f.edges[edge] = e
	}
	if epoch > e.Epoch { // an older epoch is answered with the held one
		e.Epoch, e.AckedSeq = epoch, 0
	}
	e.LastSeen, e.Live = time.UnixMilli(1700000000000), true
	return hub.Resume{Epoch: e.Epoch, AckedSeq: e.AckedSeq}, nil
}

func (f *fakeCore) Apply(b *runnelv1.Batch) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.applyErr != nil {
		return f.applyErr
	}
	e := f.edges[b.EdgeId]
	switch {
	case e == nil || b.Epoch < e.Epoch:
		return hub.ErrFenced
	case b.FirstSeq > e.AckedSeq+1:
		return fmt.Errorf("%w: batch starts at %d, expected %d", hub.ErrGap, b.FirstSeq, e.AckedSeq+1)
	case b.LastSeq < b.FirstSeq:
		return fmt.Errorf("%w: last_seq %d < first_seq %d", hub.ErrBadBatch, b.LastSeq, b.FirstSeq)
	}
	for _, pt := range b.Partials {
		if pt.Pipeline != f.p.Name {
			return fmt.Errorf("%w: unknown pipeline %q", hub.ErrBadBatch, pt.Pipeline)
		}
	}
	if b.LastSeq <= e.AckedSeq {
		return nil // duplicate
	}
	e.AckedSeq = b.LastSeq
	for _, w := range b.Watermarks {
		e.Watermarks[w.Pipeline] = w.WatermarkMs
	}
	f.applied = append(f.applied, b)
	f.commitLocked()
	return nil
}

func (f *fakeCore) Acked(edge string) (uint64, uint64, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.edges[edge]; e != nil {
		return e.Epoch, e.AckedSeq, f.next
	}
	return 0, 0, f.next
}

func (f *fakeCore) Pipelines() []hub.PipelineInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return []hub.PipelineInfo{{Pipeline: f.p, Watermark: f.watermark, HasWatermark: f.watermark != 0, Results: uint64(len(f.results))}}
}

func (f *fakeCore) Pipeline(name string) *operators.Pipeline {
	if name == f.p.Name {
		return f.p
	}
	return nil
}

func (f *fakeCore) Edges() []hub.EdgeInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []hub.EdgeInfo
	for _, e := range f.edges {
		out = append(out, *e)
	}
	slices.SortFunc(out, func(a, b hub.EdgeInfo) int { return cmpString(a.ID, b.ID) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Query: results in insertion order; the cursor is the index to go on at.
func (f *fakeCore) Query(q hub.Query) ([]hub.Result, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if q.Pipeline != f.p.Name {
		return nil, nil, fmt.Errorf("%w: unknown pipeline %q", hub.ErrBadQuery, q.Pipeline)
	}
	latest := map[string]int{} // key+window -> index of its latest version
	for i, r := range f.results {
		latest[fmt.Sprint(r.Key, r.Start)] = i
	}
	start := 0
	if len(q.After) == 8 {
		start = int(binary.BigEndian.Uint64(q.After))
	}
	var out []hub.Result
	for i := start; i < len(f.results); i++ {
		r := f.results[i]
		switch {
		case q.Key != nil && string(r.Key) != string(q.Key),
			r.Start < q.From, q.To != 0 && r.End > q.To,
			!q.AllVersions && latest[fmt.Sprint(r.Key, r.Start)] != i:
			continue
		}
		if len(out) == q.Limit {
			return out, binary.BigEndian.AppendUint64(nil, uint64(i)), nil
		}
		out = append(out, r)
	}
	return out, nil, nil
}

func (f *fakeCore) Subscribe(ctx context.Context, pipeline string, key []byte) <-chan hub.Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &fakeSub{key: key, ch: make(chan hub.Result, 16)}
	f.subs = append(f.subs, s)
	context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.dropLocked(s)
	})
	return s.ch
}

func (f *fakeCore) dropLocked(s *fakeSub) {
	if !s.done {
		s.done = true
		close(s.ch)
	}
	f.subs = slices.DeleteFunc(f.subs, func(x *fakeSub) bool { return x == s })
}

func (f *fakeCore) subscribers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// emit stores r and hands it to the matching subscribers.
func (f *fakeCore) emit(r hub.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results = append(f.results, r)
	for _, s := range slices.Clone(f.subs) {
		if s.key != nil && string(s.key) != string(r.Key) {
			continue
		}
		select {
		case s.ch <- r:
		default:
			f.dropLocked(s)
		}
	}
}

func (f *fakeCore) Status() hub.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := hub.Status{CommitErr: f.commitErr, EdgesKnown: len(f.edges), EdgesLive: len(f.edges), Batches: uint64(len(f.applied)), Results: uint64(len(f.results)), Commits: uint64(len(f.applied))}
	if f.status != nil {
		f.status(&st)
	}
	return st
}

func (f *fakeCore) appliedBatches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.applied)
}
