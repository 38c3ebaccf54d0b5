package hub

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/window/aggregate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tempsYAML is the test pipeline: the aggregates the oracle checks exactly,
// plus a quantile sketch (DDSketch merges bin counts, so it is exact too).
const tempsYAML = `name: temps
source: {mqtt: {topic: "t/+"}}
event_time: {field: ts}
key: [device]
window: {tumbling: 1s}
aggregates:
  n: count()
  s: sum(v)
  lo: min(v)
  hi: max(v)
  a: avg(v)
  q: quantile(v, 0.5)
`

// globalYAML has no key fields: its partials carry an empty key.
const globalYAML = `name: global
source: {mqtt: {topic: "g"}}
event_time: {field: ts}
window: {tumbling: 1s}
aggregates:
  n: count()
`

func compile(t testing.TB, yaml string) *operators.Pipeline {
	t.Helper()
	p, err := operators.CompileYAML("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	return p
}

// clock is an injectable wall clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// testHub opens hubs on one directory; commits happen only when the test
// calls Commit (CommitInterval is an hour).
type testHub struct {
	t     testing.TB
	dir   string
	clock *clock
	pipes []*operators.Pipeline
	cfg   func(*Config)
	*Hub
}

func newTestHub(t testing.TB, cfg func(*Config)) *testHub {
	t.Helper()
	th := &testHub{
		t:     t,
		dir:   t.TempDir(),
		clock: newClock(),
		pipes: []*operators.Pipeline{compile(t, tempsYAML), compile(t, globalYAML)},
		cfg:   cfg,
	}
	th.open()
	t.Cleanup(func() {
		if th.Hub != nil {
			th.Hub.Close()
		}
	})
	return th
}

func (th *testHub) open() {
	th.t.Helper()
	cfg := Config{
		Dir:            th.dir,
		Pipelines:      th.pipes,
		KeyGroups:      16,
		CommitInterval: time.Hour,
		Retention:      time.Hour,
		NoSync:         true,
		Now:            th.clock.Now,
		Logger:         slog.New(slog.DiscardHandler),
	}
	if th.cfg != nil {
		th.cfg(&cfg)
	}
	h, err := Open(cfg)
	if err != nil {
		th.t.Fatalf("Open: %v", err)
	}
	th.Hub = h
}

// restart closes the hub cleanly (committing) and opens it again.
func (th *testHub) restart() {
	th.t.Helper()
	if err := th.Hub.Close(); err != nil {
		th.t.Fatalf("Close: %v", err)
	}
	th.open()
}

// crash stops the hub without its final commit, losing what was applied
// since the last one, and opens it again.
func (th *testHub) crash() {
	th.t.Helper()
	h := th.Hub
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.closeOnce.Do(func() {
		close(h.stop)
		<-h.loopDone
		h.commitMu.Lock()
		h.closeErr = h.db.Close()
		h.dbClosed = true
		h.commitMu.Unlock()
		h.mu.Lock()
		close(h.next)
		h.mu.Unlock()
		h.closeSubs()
	})
	th.open()
}

func (th *testHub) commit() {
	th.t.Helper()
	if err := th.Hub.Commit(); err != nil {
		th.t.Fatalf("Commit: %v", err)
	}
}

// encKey encodes a one-field string key the way the pipelines do.
func encKey(s string) []byte {
	b := []byte{'s'}
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// stateOf returns the encoding of a State that absorbed values vs.
func stateOf(set *aggregate.Set, vs ...float64) []byte {
	st := set.New()
	addValues(set, st, vs...)
	return set.AppendEncode(nil, st)
}

func addValues(set *aggregate.Set, st *aggregate.State, vs ...float64) {
	in := aggregate.Input{Nums: make([]float64, max(set.NumInputs(), 1)), Hashes: make([]uint64, max(set.HashInputs(), 1))}
	for _, v := range vs {
		for i := range in.Nums {
			in.Nums[i] = v
		}
		set.Add(st, &in)
	}
}

// results decodes a Result's aggregates.
func resultValues(set *aggregate.Set, state []byte) ([]aggregate.Value, error) {
	st := set.New()
	if err := set.Decode(st, state); err != nil {
		return nil, err
	}
	out := make([]aggregate.Value, set.Len())
	for i := range out {
		out[i] = set.Result(st, i)
	}
	return out, nil
}

// partial builds a temps partial.
func partial(p *operators.Pipeline, seq uint64, key string, start int64, vs ...float64) *runnelv1.Partial {
	var k []byte
	if key != "" {
		k = encKey(key)
	}
	return &runnelv1.Partial{
		Seq: seq, Pipeline: p.Name, Key: k, WindowStart: start, WindowEnd: start + 1000,
		Version: 1, State: stateOf(p.Aggregates, vs...),
	}
}

func batch(edge string, epoch, first, last uint64, ps ...*runnelv1.Partial) *runnelv1.Batch {
	return &runnelv1.Batch{EdgeId: edge, Epoch: epoch, FirstSeq: first, LastSeq: last, Partials: ps}
}

func wm(b *runnelv1.Batch, pipeline string, ms int64) *runnelv1.Batch {
	b.Watermarks = append(b.Watermarks, &runnelv1.Watermark{Pipeline: pipeline, WatermarkMs: ms})
	return b
}

// logBuffer collects a hub's log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// lines returns the lines that contain every one of subs.
func (l *logBuffer) lines(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
lines:
	for _, line := range strings.Split(l.buf.String(), "\n") {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue lines
			}
		}
		out = append(out, line)
	}
	return out
}

// poison edits the closed hub's store in one transaction, as an older hub
// (or a bug) might have left it.
func (th *testHub) poison(f func(tx *bolt.Tx)) {
	th.t.Helper()
	db, err := bolt.Open(filepath.Join(th.dir, "hub.db"), 0o600, nil)
	if err != nil {
		th.t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bolt.Tx) error { f(tx); return nil }); err != nil {
		th.t.Fatal(err)
	}
}

func (th *testHub) putRecord(tx *bolt.Tx, bucket, k, payload []byte) {
	th.t.Helper()
	if err := tx.Bucket(bucket).Put(k, appendRecord(nil, k, payload)); err != nil {
		th.t.Fatal(err)
	}
}

func (th *testHub) getRecord(tx *bolt.Tx, bucket, k []byte) []byte {
	th.t.Helper()
	p, err := openRecord(k, tx.Bucket(bucket).Get(k))
	if err != nil {
		th.t.Fatal(err)
	}
	return p
}
