package fleet

import (
	"sync"

	"fmt"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// changes collects what one call changed in memory, to be written in one
// transaction by commit. Memory is changed first (the call has validated
// everything before), then written; when the transaction fails, memory is
// reloaded from the store, which the failed transaction left as it was.
type changes struct {
	edges     map[*edge]struct{} // edge records
	status    map[*edge]struct{} // status records
	notify    map[*edge]struct{} // desired set changed: send after commit
	pipelines map[*pipeline]struct{}
	revs      []*revision      // new revisions
	dropPipes []pipelineRecord // tombstones of deleted pipelines
	deps      map[*deployment]struct{}
	versions  []*version // new versions
	rollouts  map[*version]struct{}
	audit     []*auditRecord
	tokens    []*tokenRecord
	dropToks  []string
}

func newChanges() *changes {
	return &changes{
		edges:     map[*edge]struct{}{},
		status:    map[*edge]struct{}{},
		notify:    map[*edge]struct{}{},
		pipelines: map[*pipeline]struct{}{},
		deps:      map[*deployment]struct{}{},
		rollouts:  map[*version]struct{}{},
	}
}

func (c *changes) empty() bool {
	return len(c.edges) == 0 && len(c.status) == 0 && len(c.pipelines) == 0 && len(c.revs) == 0 &&
		len(c.dropPipes) == 0 && len(c.deps) == 0 && len(c.versions) == 0 && len(c.rollouts) == 0 &&
		len(c.audit) == 0 && len(c.tokens) == 0 && len(c.dropToks) == 0
}

// addAudit appends an audit entry with the next id.
func (f *Fleet) addAudit(c *changes, who, action, object, before, after string) {
	f.auditSeq++
	c.audit = append(c.audit, &auditRecord{
		ID: f.auditSeq, AtMs: f.nowMs(), Who: who, Action: action, Object: object, Before: before, After: after,
	})
}

// commit writes c in one transaction, then delivers the desired sets that
// changed. The caller holds f.mu. On failure memory is reloaded from the
// store and the error returned.
func (f *Fleet) commit(c *changes) error {
	if c.empty() {
		return nil
	}
	statusPayloads := make(map[*edge][]byte, len(c.status))
	for e := range c.status {
		p, err := f.statusPayload(e)
		if err != nil {
			return f.reload(err)
		}
		statusPayloads[e] = p
	}
	err := f.db.Update(func(tx *bolt.Tx) error {
		pb := tx.Bucket(bucketPipelines)
		for i := range c.dropPipes {
			t := &c.dropPipes[i]
			if err := pb.DeleteBucket([]byte(t.Name)); err != nil {
				return fmt.Errorf("delete pipeline %q: %w", t.Name, err)
			}
			b, err := pb.CreateBucket([]byte(t.Name))
			if err != nil {
				return err
			}
			if err := putJSON(b, where{bucketPipelines, []byte(t.Name), keyHeader}, t); err != nil {
				return err
			}
		}
		for p := range c.pipelines {
			b, err := pb.CreateBucketIfNotExists([]byte(p.rec.Name))
			if err != nil {
				return err
			}
			if err := putJSON(b, where{bucketPipelines, []byte(p.rec.Name), keyHeader}, &p.rec); err != nil {
				return err
			}
		}
		for _, r := range c.revs {
			b := pb.Bucket([]byte(r.Name))
			if b == nil {
				return fmt.Errorf("revision %d of %q without its pipeline", r.Num, r.Name)
			}
			if err := putJSON(b, where{bucketPipelines, []byte(r.Name), numKey(tagRevision, r.Num)}, r); err != nil {
				return err
			}
		}
		db := tx.Bucket(bucketDeployments)
		for d := range c.deps {
			b, err := db.CreateBucketIfNotExists([]byte(d.rec.Name))
			if err != nil {
				return err
			}
			if err := putJSON(b, where{bucketDeployments, []byte(d.rec.Name), keyHeader}, &d.rec); err != nil {
				return err
			}
		}
		for _, v := range c.versions {
			b := db.Bucket([]byte(v.dep))
			if b == nil {
				return fmt.Errorf("version %d of %q without its deployment", v.rec.Num, v.dep)
			}
			if err := putJSON(b, where{bucketDeployments, []byte(v.dep), numKey(tagVersion, v.rec.Num)}, &v.rec); err != nil {
				return err
			}
			c.rollouts[v] = struct{}{}
		}
		for v := range c.rollouts {
			b := db.Bucket([]byte(v.dep))
			if b == nil {
				return fmt.Errorf("rollout of version %d of %q without its deployment", v.rec.Num, v.dep)
			}
			if err := putJSON(b, where{bucketDeployments, []byte(v.dep), numKey(tagRollout, v.rec.Num)}, &v.ro); err != nil {
				return err
			}
		}
		eb := tx.Bucket(bucketEdges)
		for e := range c.edges {
			if err := putJSON(eb, where{bucketEdges, []byte(e.rec.ID)}, &e.rec); err != nil {
				return err
			}
		}
		for e, p := range statusPayloads {
			if err := putStatus(tx, e.rec.ID, e.statusSeq, p); err != nil {
				return err
			}
		}
		ab := tx.Bucket(bucketAudit)
		for _, a := range c.audit {
			if err := putJSON(ab, where{bucketAudit, auditKey(a.ID)}, a); err != nil {
				return err
			}
		}
		tb := tx.Bucket(bucketTokens)
		for _, t := range c.tokens {
			if err := putJSON(tb, where{bucketTokens, []byte(t.Name)}, t); err != nil {
				return err
			}
		}
		for _, name := range c.dropToks {
			if err := tb.Delete([]byte(name)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return f.reload(fmt.Errorf("fleet: store: %w", err))
	}
	now := f.nowMs()
	for e := range statusPayloads {
		e.writtenMs = now
		delete(f.statusDirty, e)
	}
	for e := range c.notify {
		if e.conn != nil {
			e.conn.offer(f.desiredSet(e))
		}
	}
	return nil
}

// reload reloads memory from the store after a failed commit, keeping
// what only memory holds (control streams, the latest statuses), and
// returns err. When even the reload fails the Fleet refuses every call
// from then on.
func (f *Fleet) reload(err error) error {
	st, lerr := f.load()
	if lerr != nil {
		f.broken = fmt.Errorf("fleet: store unusable after a failed commit (%v): reload: %w", err, lerr)
		f.log.Error("fleet: store unusable", "err", f.broken)
		return err
	}
	for id, old := range f.edges {
		e := st.edges[id]
		if e == nil {
			if old.conn != nil {
				old.conn.stop()
				old.conn.end()
			}
			continue
		}
		e.conn = old.conn
		if old.statusSeq > e.statusSeq {
			e.status, e.statusSeq, e.lastSeenMs = old.status, old.statusSeq, old.lastSeenMs
		}
	}
	f.state = st
	f.statusDirty = map[*edge]struct{}{}
	for _, e := range f.edges {
		if e.status != nil && e.writtenMs < e.lastSeenMs {
			f.statusDirty[e] = struct{}{}
		}
	}
	f.log.Error("fleet: commit failed; state reloaded from the store", "err", err)
	return err
}

// statusPayload encodes e's status record.
func (f *Fleet) statusPayload(e *edge) ([]byte, error) {
	var raw []byte
	if e.status != nil {
		var err error
		raw, err = proto.MarshalOptions{Deterministic: true}.Marshal(e.status)
		if err != nil {
			return nil, fmt.Errorf("fleet: encode status of %q: %w", e.rec.ID, err)
		}
	}
	return encodeStatus(e.statusSeq, e.lastSeenMs, raw), nil
}

// FlushStatus writes the statuses whose metrics changed and that were
// last written StatusWriteEvery ago or more. The background goroutine
// calls it every Tick.
func (f *Fleet) FlushStatus() error { return f.flushStatus(false) }

func (f *Fleet) flushStatus(all bool) error {
	type item struct {
		e       *edge
		id      string
		seq     uint64
		payload []byte
	}
	f.mu.Lock()
	if f.broken != nil {
		f.mu.Unlock()
		return f.broken
	}
	now := f.nowMs()
	every := f.opts.StatusWriteEvery.Milliseconds()
	var items []item
	for e := range f.statusDirty {
		if !all && now-e.writtenMs < every {
			continue
		}
		p, err := f.statusPayload(e)
		if err != nil {
			f.mu.Unlock()
			return err
		}
		items = append(items, item{e, e.rec.ID, e.statusSeq, p})
		delete(f.statusDirty, e)
		e.writtenMs = now
	}
	f.mu.Unlock()
	if len(items) == 0 {
		return nil
	}
	err := f.db.Update(func(tx *bolt.Tx) error {
		for _, it := range items {
			if err := putStatus(tx, it.id, it.seq, it.payload); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.mu.Lock()
		for _, it := range items {
			f.statusDirty[it.e] = struct{}{}
		}
		f.mu.Unlock()
		return fmt.Errorf("fleet: write statuses: %w", err)
	}
	return nil
}

// desiredSet builds e's current DesiredSet. Its DesiredPipelines are
// shared with other sets: receivers must not modify them.
func (f *Fleet) desiredSet(e *edge) *runnelv1.DesiredSet {
	ds := &runnelv1.DesiredSet{Generation: e.rec.Generation, Pipelines: make([]*runnelv1.DesiredPipeline, 0, len(e.rec.Desired))}
	for _, r := range e.rec.Desired {
		if dp := f.desiredPipeline(r); dp != nil {
			ds.Pipelines = append(ds.Pipelines, dp)
		}
	}
	for _, dn := range f.depNames {
		if a, ok := e.rec.Assign[dn]; ok {
			ds.Deployments = append(ds.Deployments, fmt.Sprintf("%s@%d", dn, a.Version))
		}
	}
	return ds
}

func (f *Fleet) desiredPipeline(r ref) *runnelv1.DesiredPipeline {
	p := f.pipelines[r.Name]
	if p == nil {
		return nil
	}
	if dp := p.desired[r.Revision]; dp != nil {
		return dp
	}
	rev := p.rev(r.Revision)
	if rev == nil {
		return nil
	}
	dp := &runnelv1.DesiredPipeline{Name: rev.Name, Revision: rev.Num, Spec: rev.Spec, Hash: rev.Hash, CompatClass: rev.Class}
	p.desired[r.Revision] = dp
	return dp
}

// statusWriter group-commits the status records that Status writes at
// once: the first caller writes, in one transaction, every record queued
// while the transaction before ran, then the next group, until none is
// left; the others wait for the transaction that wrote theirs. An idle
// writer adds no delay, a busy one one fsync for many edges.
type statusWriter struct {
	mu      sync.Mutex
	closed  bool
	pending map[string]queuedStatus
	waiters []chan error
	running bool
	idle    sync.WaitGroup // a writer is running
}

type queuedStatus struct {
	seq     uint64
	payload []byte
}

// write queues a status record and returns once it is durable (or the
// transaction that carried it failed).
func (w *statusWriter) write(db *bolt.DB, id string, seq uint64, payload []byte) error {
	done := make(chan error, 1)
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	if w.pending == nil {
		w.pending = map[string]queuedStatus{}
	}
	if q, ok := w.pending[id]; !ok || q.seq < seq {
		w.pending[id] = queuedStatus{seq, payload}
	}
	w.waiters = append(w.waiters, done)
	lead := !w.running
	if lead {
		w.running = true
		w.idle.Add(1)
	}
	w.mu.Unlock()
	if lead {
		w.lead(db)
	}
	return <-done
}

func (w *statusWriter) lead(db *bolt.DB) {
	defer w.idle.Done()
	for {
		w.mu.Lock()
		if len(w.waiters) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		group, waiters := w.pending, w.waiters
		w.pending, w.waiters = nil, nil
		w.mu.Unlock()
		err := db.Update(func(tx *bolt.Tx) error {
			for id, q := range group {
				if err := putStatus(tx, id, q.seq, q.payload); err != nil {
					return err
				}
			}
			return nil
		})
		for _, c := range waiters {
			c <- err
		}
	}
}

// close refuses further writes and returns once the running writer, if
// any, is done.
func (w *statusWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.idle.Wait()
}
