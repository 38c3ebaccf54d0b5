package fleet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/hub/fleet/selector"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Fleet is the hub's control-plane state: pipelines and their revisions,
// edges, deployments and their rollouts, tokens and the audit log, kept
// in one bbolt file. Its methods are safe for concurrent use. Open starts
// one goroutine (unless Options.Tick is negative); Close stops it.
type Fleet struct {
	opts Options
	log  *slog.Logger
	db   *bolt.DB
	path string

	cbMu sync.Mutex // orders OnRevision calls

	mu     sync.RWMutex
	closed bool
	broken error // set when memory could not be reloaded after a failed commit
	state
	// statusDirty: edges whose latest status is not yet durable (only
	// metrics changed), written by FlushStatus.
	statusDirty map[*edge]struct{}

	writer statusWriter

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// state is everything loaded from the store, replaced as a whole when a
// failed commit forces a reload.
type state struct {
	pipelines map[string]*pipeline
	tombs     map[string]uint32 // deleted pipeline -> its last revision
	edges     map[string]*edge
	edgeIDs   []string // sorted
	deps      map[string]*deployment
	depNames  []string // sorted
	tokens    map[string]*tokenRecord
	auditSeq  uint64 // the last audit id
}

type pipeline struct {
	rec  pipelineRecord
	revs []*revision // consecutive; 1 first unless the name was deleted before
	// compiled is the latest revision compiled (nil until needed).
	compiled *operators.Pipeline
	// desired caches the DesiredPipeline of each revision; they are
	// shared by every DesiredSet that names the revision.
	desired map[uint32]*runnelv1.DesiredPipeline
}

func (p *pipeline) latest() *revision { return p.revs[len(p.revs)-1] }

func (p *pipeline) rev(n uint32) *revision {
	first := p.revs[0].Num
	if n < first || n > p.latest().Num {
		return nil
	}
	return p.revs[n-first]
}

type edge struct {
	rec    edgeRecord
	labels map[string]string // effective: rec.Labels overlaid by rec.HubLabels
	status *runnelv1.EdgeStatus
	// lastSeenMs: the last Register or Status.
	lastSeenMs int64
	// statusSeq numbers the edge's statuses; writtenMs is when one was
	// last made durable.
	statusSeq uint64
	writtenMs int64
	conn      *conn
}

// conn is an edge's open control stream.
type conn struct {
	ch     chan *runnelv1.DesiredSet
	notify func()      // Connect's; nil: none
	stop   func() bool // stops the context.AfterFunc that ends it
}

// offer hands ds to the stream, replacing a set it has not taken yet:
// the edge gets the newest set, never a backlog. The caller holds f.mu,
// so there is one sender and the send cannot block.
func (c *conn) offer(ds *runnelv1.DesiredSet) {
	select {
	case <-c.ch:
	default:
	}
	c.ch <- ds
	if c.notify != nil {
		c.notify()
	}
}

// end closes the stream's channel. The caller holds f.mu.
func (c *conn) end() {
	close(c.ch)
	if c.notify != nil {
		c.notify()
	}
}

type deployment struct {
	rec      deploymentRecord
	versions []*version // versions[i].rec.Num == i+1
	// assigned counts the edges given each version.
	assigned map[uint32]int
}

func (d *deployment) current() *version { return d.versions[len(d.versions)-1] }

type version struct {
	dep    string
	rec    versionRecord
	ro     rolloutRecord
	sel    selector.Selector
	stepOf map[string]int // target edge -> its step
	// progress says what a progressing rollout's step waits for, as of
	// the last evaluation (not stored: the next evaluation says it again).
	progress string
}

// Open opens (or creates) dir/fleet.db and loads it. A store written by
// another layout, or with a record that fails its checksum, is refused
// with an error that wraps ErrCorrupt and names the record.
func Open(dir string, opts Options) (*Fleet, error) {
	opts.ensureDefaults()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("fleet: open: %w", err)
	}
	path := filepath.Join(dir, "fleet.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, NoSync: opts.NoSync})
	if err != nil {
		return nil, fmt.Errorf("fleet: open %s: %w", path, err)
	}
	f := &Fleet{
		opts:        opts,
		log:         opts.Logger,
		db:          db,
		path:        path,
		statusDirty: map[*edge]struct{}{},
		kick:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	if err := db.Update(initStore); err != nil {
		db.Close()
		return nil, fmt.Errorf("fleet: open %s: %w", path, err)
	}
	st, err := f.load()
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("fleet: open %s: %w", path, err)
	}
	f.state = st
	if opts.Tick > 0 {
		go f.run()
	} else {
		close(f.done)
	}
	return f, nil
}

// initStore creates the buckets of a new store and checks the format of
// an existing one.
func initStore(tx *bolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	if meta == nil {
		for _, name := range topBuckets {
			if tx.Bucket(name) != nil {
				return fmt.Errorf("fleet: store: bucket %q without meta: %w", name, ErrCorrupt)
			}
		}
		for _, name := range topBuckets {
			if _, err := tx.CreateBucket(name); err != nil {
				return err
			}
		}
		w := where{bucketMeta, metaFormat}
		return tx.Bucket(bucketMeta).Put(metaFormat, seal(w, binary.BigEndian.AppendUint32(nil, storeFormat)))
	}
	w := where{bucketMeta, metaFormat}
	v := meta.Get(metaFormat)
	if v == nil {
		return fmt.Errorf("fleet: store: no meta/format: %w", ErrCorrupt)
	}
	p, err := unseal(w, v)
	if err != nil {
		return err
	}
	if len(p) != 4 {
		return fmt.Errorf("fleet: store: meta/format of %d bytes: %w", len(p), ErrCorrupt)
	}
	if got := binary.BigEndian.Uint32(p); got != storeFormat {
		return fmt.Errorf("fleet: store: format %d, this hub reads format %d: %w", got, storeFormat, ErrCorrupt)
	}
	for _, name := range topBuckets {
		if tx.Bucket(name) == nil {
			return fmt.Errorf("fleet: store: bucket %q missing: %w", name, ErrCorrupt)
		}
	}
	return nil
}

// load reads the whole store into a new state.
func (f *Fleet) load() (state, error) {
	st := state{
		pipelines: map[string]*pipeline{},
		tombs:     map[string]uint32{},
		edges:     map[string]*edge{},
		deps:      map[string]*deployment{},
		tokens:    map[string]*tokenRecord{},
	}
	err := f.db.View(func(tx *bolt.Tx) error {
		if err := loadPipelines(tx, &st); err != nil {
			return err
		}
		if err := loadDeployments(tx, &st); err != nil {
			return err
		}
		if err := loadEdges(tx, &st); err != nil {
			return err
		}
		if err := tx.Bucket(bucketTokens).ForEach(func(k, v []byte) error {
			var t tokenRecord
			if err := readJSON(where{bucketTokens, k}, v, &t); err != nil {
				return err
			}
			st.tokens[t.Name] = &t
			return nil
		}); err != nil {
			return err
		}
		if k, _ := tx.Bucket(bucketAudit).Cursor().Last(); k != nil {
			if len(k) != 8 {
				return fmt.Errorf("fleet: store: audit key %x: %w", k, ErrCorrupt)
			}
			st.auditSeq = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return st, err
}

func loadPipelines(tx *bolt.Tx, st *state) error {
	return tx.Bucket(bucketPipelines).ForEachBucket(func(name []byte) error {
		b := tx.Bucket(bucketPipelines).Bucket(name)
		p := &pipeline{desired: map[uint32]*runnelv1.DesiredPipeline{}}
		if err := readJSON(where{bucketPipelines, name, keyHeader}, b.Get(keyHeader), &p.rec); err != nil {
			return err
		}
		if p.rec.Deleted {
			st.tombs[string(name)] = p.rec.Last
			return nil
		}
		if err := b.ForEach(func(k, v []byte) error {
			if k[0] != tagRevision {
				return nil
			}
			w := where{bucketPipelines, name, k}
			var r revision
			if err := readJSON(w, v, &r); err != nil {
				return err
			}
			if len(k) != 5 || r.Num != binary.BigEndian.Uint32(k[1:]) || r.Num == 0 || len(p.revs) > 0 && r.Num != p.latest().Num+1 || r.Name != string(name) {
				return fmt.Errorf("fleet: store: record %s holds revision %d of %q: %w", w, r.Num, r.Name, ErrCorrupt)
			}
			p.revs = append(p.revs, &r)
			return nil
		}); err != nil {
			return err
		}
		if len(p.revs) == 0 || p.rec.Name != string(name) {
			return fmt.Errorf("fleet: store: pipeline bucket %q has no revision or another name: %w", name, ErrCorrupt)
		}
		st.pipelines[p.rec.Name] = p
		return nil
	})
}

func loadDeployments(tx *bolt.Tx, st *state) error {
	err := tx.Bucket(bucketDeployments).ForEachBucket(func(name []byte) error {
		b := tx.Bucket(bucketDeployments).Bucket(name)
		d := &deployment{assigned: map[uint32]int{}}
		if err := readJSON(where{bucketDeployments, name, keyHeader}, b.Get(keyHeader), &d.rec); err != nil {
			return err
		}
		if err := b.ForEach(func(k, v []byte) error {
			if k[0] != tagVersion {
				return nil
			}
			w := where{bucketDeployments, name, k}
			v2 := &version{dep: string(name)}
			if err := readJSON(w, v, &v2.rec); err != nil {
				return err
			}
			if len(k) != 5 || v2.rec.Num != binary.BigEndian.Uint32(k[1:]) || int(v2.rec.Num) != len(d.versions)+1 {
				return fmt.Errorf("fleet: store: record %s holds version %d: %w", w, v2.rec.Num, ErrCorrupt)
			}
			ok := numKey(tagRollout, v2.rec.Num)
			if err := readJSON(where{bucketDeployments, name, ok}, b.Get(ok), &v2.ro); err != nil {
				return err
			}
			sel, err := selector.Parse(v2.rec.Selector)
			if err != nil {
				return fmt.Errorf("fleet: store: record %s: %v: %w", w, err, ErrCorrupt)
			}
			if err := v2.check(); err != nil {
				return fmt.Errorf("fleet: store: record %s: %v: %w", w, err, ErrCorrupt)
			}
			v2.sel = sel
			v2.indexSteps()
			d.versions = append(d.versions, v2)
			return nil
		}); err != nil {
			return err
		}
		if len(d.versions) == 0 || d.rec.Name != string(name) {
			return fmt.Errorf("fleet: store: deployment bucket %q has no version or another name: %w", name, ErrCorrupt)
		}
		st.deps[d.rec.Name] = d
		st.depNames = append(st.depNames, d.rec.Name)
		return nil
	})
	slices.Sort(st.depNames)
	return err
}

func loadEdges(tx *bolt.Tx, st *state) error {
	status := tx.Bucket(bucketStatus)
	err := tx.Bucket(bucketEdges).ForEach(func(k, v []byte) error {
		e := &edge{}
		if err := readJSON(where{bucketEdges, k}, v, &e.rec); err != nil {
			return err
		}
		if e.rec.ID != string(k) {
			return fmt.Errorf("fleet: store: record %s holds edge %q: %w", where{bucketEdges, k}, e.rec.ID, ErrCorrupt)
		}
		e.labels = effectiveLabels(e.rec.Labels, e.rec.HubLabels)
		for dn, a := range e.rec.Assign {
			d := st.deps[dn]
			if d == nil || a.Version == 0 || int(a.Version) > len(d.versions) || int(a.Prior) > len(d.versions) || int(a.By) > len(d.versions) {
				return fmt.Errorf("fleet: store: edge %q is given version %d (by %d, prior %d) of deployment %q, which does not exist: %w", e.rec.ID, a.Version, a.By, a.Prior, dn, ErrCorrupt)
			}
			d.assigned[a.Version]++
		}
		if sv := status.Get(k); sv != nil {
			w := where{bucketStatus, k}
			p, err := unseal(w, sv)
			if err != nil {
				return err
			}
			seq, seen, raw, err := decodeStatus(w, p)
			if err != nil {
				return err
			}
			var es runnelv1.EdgeStatus
			if err := proto.Unmarshal(raw, &es); err != nil {
				return fmt.Errorf("fleet: store: record %s: %v: %w", w, err, ErrCorrupt)
			}
			e.status, e.statusSeq, e.lastSeenMs, e.writtenMs = &es, seq, seen, seen
		}
		st.edges[e.rec.ID] = e
		st.edgeIDs = append(st.edgeIDs, e.rec.ID)
		return nil
	})
	// ForEach visits keys in order: edgeIDs is sorted.
	return err
}

// check checks what the rollout code relies on: targets sorted and
// unique, step ends increasing up to the targets, a known phase and a
// step within the plan.
func (v *version) check() error {
	for i := 1; i < len(v.rec.Targets); i++ {
		if v.rec.Targets[i-1] >= v.rec.Targets[i] {
			return fmt.Errorf("targets not sorted at %d", i)
		}
	}
	prev := 0
	for i, end := range v.rec.Ends {
		if end <= prev || end > len(v.rec.Targets) {
			return fmt.Errorf("step %d ends at %d, after %d of %d targets", i, end, prev, len(v.rec.Targets))
		}
		prev = end
	}
	if prev != len(v.rec.Targets) {
		return fmt.Errorf("the steps cover %d of %d targets", prev, len(v.rec.Targets))
	}
	switch v.ro.Phase {
	case PhaseProgressing, PhasePaused, PhaseSucceeded, PhaseFailed, PhaseAborted, PhaseSuperseded:
	default:
		return fmt.Errorf("rollout phase %q", v.ro.Phase)
	}
	if v.ro.Step < 0 || v.ro.Step > len(v.rec.Ends) {
		return fmt.Errorf("rollout at step %d of %d", v.ro.Step, len(v.rec.Ends))
	}
	return nil
}

// indexSteps fills stepOf from the record.
func (v *version) indexSteps() {
	v.stepOf = make(map[string]int, len(v.rec.Targets))
	step := 0
	for i, id := range v.rec.Targets {
		for step < len(v.rec.Ends) && i >= v.rec.Ends[step] {
			step++
		}
		v.stepOf[id] = step
	}
}

// Close stops the background goroutine, ends every control stream
// (their channels close), writes the statuses not yet durable and closes
// the store. It returns the first error of those writes and of closing.
func (f *Fleet) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	for _, e := range f.edges {
		if e.conn != nil {
			e.conn.stop()
			e.conn.end()
			e.conn = nil
		}
	}
	f.mu.Unlock()
	close(f.stop)
	<-f.done
	f.writer.close()
	err := f.flushStatus(true)
	if cerr := f.db.Close(); err == nil {
		err = cerr
	}
	return err
}

// run is the background goroutine: rollouts evaluated every Tick and
// when kicked, due statuses written every Tick.
func (f *Fleet) run() {
	defer close(f.done)
	t := time.NewTicker(f.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
			if err := f.Evaluate(); err != nil && !errors.Is(err, ErrClosed) {
				f.log.Error("fleet: evaluate rollouts", "err", err)
			}
			if err := f.FlushStatus(); err != nil && !errors.Is(err, ErrClosed) {
				f.log.Error("fleet: write statuses", "err", err)
			}
		case <-f.kick:
			if err := f.Evaluate(); err != nil && !errors.Is(err, ErrClosed) {
				f.log.Error("fleet: evaluate rollouts", "err", err)
			}
		}
	}
}

// kickEval asks the background goroutine to evaluate rollouts soon.
func (f *Fleet) kickEval() {
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

func (f *Fleet) nowMs() int64 { return f.opts.Now().UnixMilli() }

// usable is checked under f.mu by every method.
func (f *Fleet) usable() error {
	if f.closed {
		return ErrClosed
	}
	return f.broken
}
