package edge

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/internal/health"
	"github.com/runnel-io/runnel/state"
)

// Snapshots. The snapshotter goroutine copies the state file as of the
// last committed checkpoint (a bbolt read transaction: checkpoints go on
// meanwhile) into a zstd-compressed data object in a temporary file of the
// data directory, then, with the transaction closed, uploads it and its
// manifest to the snapshot store and prunes the old ones. Ingestion never
// waits for it: the pump, the writer and the MQTT handler share nothing
// with it but the disk and the CPU. On demand (POST /admin/snapshot) it
// first asks the pump for a checkpoint, so the snapshot covers every
// message durable at the request.

// SnapshotConfig turns on snapshots of the node's state to a store.
type SnapshotConfig struct {
	// Store is where snapshots go, under <edge-id>/snapshots/ (see
	// checkpoint.Snapshots).
	Store checkpoint.Store
	// Interval between snapshots; 0: only on demand.
	Interval time.Duration
	// Keep is how many complete snapshots stay in the store (default 3):
	// older ones are deleted once a new one is complete.
	Keep int
	// Version is the runnel version written in each manifest.
	Version string
}

// defaultSnapIdle: the snapshot copy pauses as long as it works.
const defaultSnapIdle = 1.0

// snapshotTmp is the data object being written, in the data directory.
const snapshotTmp = "snapshot.tmp"

// snapStats is what /metrics and /healthz say about snapshots.
type snapStats struct {
	taken, failed  atomic.Uint64
	uploadedBytes  atomic.Uint64
	lastAt         atomic.Int64 // Unix ms of the last complete snapshot; 0: none
	lastID         atomic.Uint64
	lastDataBytes  atomic.Int64
	lastStateBytes atomic.Int64
	lastNanos      atomic.Int64 // how long the last complete snapshot took
	mu             sync.Mutex
	lastErr        string // the last attempt's error; "" after a success
	lastErrAt      time.Time
}

// snapReq asks the snapshotter for a snapshot on demand.
type snapReq struct {
	done chan snapResult // buffered
}

type snapResult struct {
	m   checkpoint.Manifest
	err error
}

// ckptReq asks the pump for a checkpoint now: it answers with the
// barrier's id, and the writer with the commit's outcome.
type ckptReq struct {
	id   chan uint64 // buffered
	done chan error  // buffered
}

// errNoSnapshots: the node has no snapshot store.
var errNoSnapshots = errors.New("edge: snapshots are not configured (snapshot.store)")

// errNodeStopping: the node stopped before it could do what was asked.
var errNodeStopping = errors.New("edge: the node is stopping")

// Snapshot takes a snapshot now, on the snapshotter (after the one in
// progress, if any), and returns its manifest.
func (n *node) Snapshot(ctx context.Context) (checkpoint.Manifest, error) {
	if n.cfg.Snapshots == nil {
		return checkpoint.Manifest{}, errNoSnapshots
	}
	req := snapReq{done: make(chan snapResult, 1)}
	select {
	case n.snapReqs <- req:
	case <-ctx.Done():
		return checkpoint.Manifest{}, ctx.Err()
	case <-n.closing:
		return checkpoint.Manifest{}, errNodeStopping
	}
	select {
	case r := <-req.done:
		return r.m, r.err
	case <-ctx.Done():
		return checkpoint.Manifest{}, ctx.Err()
	}
}

// runSnapshots is the snapshotter: a snapshot every interval, and on
// demand, one at a time, until ctx is done.
func (n *node) runSnapshots(ctx context.Context) {
	cfg := n.cfg.Snapshots
	var tick <-chan time.Time
	if cfg.Interval > 0 {
		t := time.NewTicker(cfg.Interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if _, err := n.takeSnapshot(ctx, false); err != nil && ctx.Err() == nil {
				n.lg.Warn("edge: snapshot failed; the next is due in snapshot.interval", "err", err, "interval", cfg.Interval)
			}
		case req := <-n.snapReqs:
			m, err := n.takeSnapshot(ctx, true)
			if err != nil && ctx.Err() == nil {
				n.lg.Warn("edge: snapshot on demand failed", "err", err)
			}
			req.done <- snapResult{m, err}
		}
	}
}

// takeSnapshot takes one snapshot: of a new checkpoint (force), or of the
// last committed one, skipped when it is the last snapshot's.
func (n *node) takeSnapshot(ctx context.Context, force bool) (checkpoint.Manifest, error) {
	began := time.Now()
	if force {
		if err := n.checkpointNow(ctx); err != nil {
			return checkpoint.Manifest{}, n.snapFailed(began, err)
		}
	}
	m, err := n.uploadSnapshot(ctx, n.cfg.Snapshots, force)
	switch {
	case errors.Is(err, errSnapshotCurrent):
		// An idle edge commits no checkpoint, so it has none to snapshot:
		// the store holds its state as it is, which is as fresh as a new
		// snapshot would be.
		n.snap.lastAt.Store(time.Now().UnixMilli())
		return m, nil
	case err != nil:
		return m, n.snapFailed(began, err)
	}
	st := &n.snap
	took := time.Since(began)
	st.taken.Add(1)
	st.uploadedBytes.Add(uint64(m.DataSize))
	st.lastAt.Store(m.Created.UnixMilli())
	st.lastID.Store(m.Checkpoint)
	st.lastDataBytes.Store(m.DataSize)
	st.lastStateBytes.Store(m.StateSize)
	st.lastNanos.Store(int64(took))
	st.mu.Lock()
	st.lastErr = ""
	st.mu.Unlock()
	n.lg.Info("edge: snapshot uploaded", "checkpoint", m.Checkpoint, "epoch", m.Epoch, "state_bytes", m.StateSize,
		"data_bytes", m.DataSize, "took", took.Round(time.Millisecond))
	ss := checkpoint.Snapshots{Store: n.cfg.Snapshots.Store, Edge: n.cfg.EdgeID}
	if deleted, err := ss.Prune(ctx, cmp.Or(n.cfg.Snapshots.Keep, defaultSnapshotKeep)); err != nil {
		n.lg.Warn("edge: delete old snapshots", "err", err)
	} else if len(deleted) > 0 {
		n.lg.Debug("edge: deleted old snapshots", "checkpoints", deleted)
	}
	return m, nil
}

// defaultSnapshotKeep is SnapshotConfig.Keep's default.
const defaultSnapshotKeep = 3

func (n *node) snapFailed(began time.Time, err error) error {
	st := &n.snap
	st.failed.Add(1)
	st.mu.Lock()
	st.lastErr, st.lastErrAt = err.Error(), began
	st.mu.Unlock()
	return err
}

// errSnapshotCurrent: the last snapshot is of the last checkpoint already
// (or there is no checkpoint to snapshot yet).
var errSnapshotCurrent = errors.New("edge: no checkpoint since the last snapshot")

// uploadSnapshot writes the data object of the last committed checkpoint
// to snapshotTmp inside one read transaction, then uploads it and its
// manifest.
func (n *node) uploadSnapshot(ctx context.Context, cfg *SnapshotConfig, force bool) (checkpoint.Manifest, error) {
	tmp := filepath.Join(n.cfg.DataDir, snapshotTmp)
	defer os.Remove(tmp)
	m := checkpoint.Manifest{EdgeID: n.cfg.EdgeID, Runnel: cfg.Version}
	err := n.store.View(func(tx *state.Tx) error {
		meta, ok, err := checkpoint.LoadMeta(tx)
		switch {
		case err != nil:
			return err
		case !ok && force:
			return errors.New("edge: no checkpoint committed yet")
		case !ok:
			return errSnapshotCurrent // a new edge that has taken nothing in yet
		case !force && meta.ID == n.snap.lastID.Load():
			return errSnapshotCurrent
		}
		epoch, _, err := loadUplinkState(tx)
		if err != nil {
			return err
		}
		m.Checkpoint, m.Epoch, m.LogPos, m.NextSeq = meta.ID, epoch, meta.LogPos, meta.NextSeq
		m.Created = time.Now().Truncate(time.Millisecond).UTC()
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		w := bufio.NewWriterSize(f, 1<<20)
		src := pacedState{tx: tx, idle: n.snapIdle}
		sums, err := checkpoint.WriteData(w, &checkpoint.Header{EdgeID: m.EdgeID, Checkpoint: m.Checkpoint, Epoch: m.Epoch, StateSize: tx.Size()}, src)
		if err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		m.StateSize, m.StateSum, m.DataSize, m.DataSum = sums.StateSize, sums.StateSum, sums.DataSize, sums.DataSum
		return f.Close() // the deferred Close then fails, unseen
	})
	if err != nil {
		if errors.Is(err, errSnapshotCurrent) {
			return m, err
		}
		return m, fmt.Errorf("edge: snapshot: %w", err)
	}
	ss := checkpoint.Snapshots{Store: cfg.Store, Edge: n.cfg.EdgeID}
	if err := ss.Put(ctx, &m, tmp); err != nil {
		return m, fmt.Errorf("edge: snapshot: %w", err)
	}
	return m, nil
}

// checkpointNow has the pump inject a barrier and waits until its
// checkpoint is committed.
func (n *node) checkpointNow(ctx context.Context) error {
	req := ckptReq{id: make(chan uint64, 1), done: make(chan error, 1)}
	select {
	case n.ckptReqs <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.closing:
		return errNodeStopping
	}
	select {
	case err := <-req.done:
		if err != nil {
			return fmt.Errorf("edge: checkpoint for the snapshot: %w", err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.writerDone:
		// The writer stopped; it may have answered just before.
		select {
		case err := <-req.done:
			return err
		default:
			return errNodeStopping
		}
	}
}

// snapshotCheck is the health check of snapshots: degraded while the last
// attempt failed, or the last complete snapshot is three intervals old.
func (n *node) snapshotCheck(now time.Time, add func(string, health.Status, string, ...any)) {
	cfg := n.cfg.Snapshots
	st := &n.snap
	st.mu.Lock()
	lastErr, errAt := st.lastErr, st.lastErrAt
	st.mu.Unlock()
	last := time.UnixMilli(st.lastAt.Load())
	since := last
	if st.lastAt.Load() == 0 {
		since = n.started
	}
	switch {
	case lastErr != "":
		add("snapshot", health.Degraded, "the last snapshot failed at %s: %s", errAt.UTC().Format(time.RFC3339), lastErr)
	case cfg.Interval > 0 && now.Sub(since) > 3*cfg.Interval+time.Minute:
		add("snapshot", health.Degraded, "no complete snapshot since %s (snapshot.interval %v)", since.UTC().Format(time.RFC3339), cfg.Interval)
	default:
		add("snapshot", health.OK, "")
	}
}

// snapshotAge is the age of the last complete snapshot, or the node's
// uptime before its first.
func (n *node) snapshotAge(now time.Time) time.Duration {
	if at := n.snap.lastAt.Load(); at > 0 {
		return now.Sub(time.UnixMilli(at))
	}
	return now.Sub(n.started)
}

// serveSnapshot is POST /admin/snapshot: a snapshot now; the answer is its
// manifest as JSON.
func (n *node) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST to take a snapshot", http.StatusMethodNotAllowed)
		return
	}
	m, err := n.Snapshot(r.Context())
	switch {
	case errors.Is(err, errNoSnapshots):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case errors.Is(err, errNodeStopping):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	ss := checkpoint.Snapshots{Edge: m.EdgeID}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(snapshotJSON{Edge: m.EdgeID, Checkpoint: m.Checkpoint, Epoch: m.Epoch, Created: m.Created,
		StateBytes: m.StateSize, DataBytes: m.DataSize, Key: ss.Key(m.Checkpoint, checkpoint.ManifestObject)})
}

// snapshotJSON is a snapshot as /admin/snapshot shows it.
type snapshotJSON struct {
	Edge       string    `json:"edge"`
	Checkpoint uint64    `json:"checkpoint"`
	Epoch      uint64    `json:"epoch"`
	Created    time.Time `json:"created"`
	StateBytes int64     `json:"state_bytes"`
	DataBytes  int64     `json:"data_bytes"`
	Key        string    `json:"manifest_key"`
}

// pacedState writes the state file as tx sees it, yielding its goroutine's
// processor to the others that wait after every yieldStep bytes (the
// ingest path's goroutines run between two 64 KiB steps of the copy, not
// after a whole 10 ms time slice), and pausing after every paceStep bytes
// for as long as copying and compressing them took: the snapshot works at
// most half the time on its core, so that the broker and the rest of the
// node keep the other half on a gateway's few cores.
type pacedState struct {
	tx   *state.Tx
	idle float64 // pause / work; 0: flat out
}

const (
	yieldStep = 64 << 10
	paceStep  = 1 << 20
)

func (p pacedState) WriteTo(w io.Writer) (int64, error) {
	if p.idle <= 0 {
		return p.tx.WriteTo(w)
	}
	return p.tx.WriteTo(&pacer{w: w, idle: p.idle, since: time.Now()})
}

type pacer struct {
	w         io.Writer
	idle      float64
	n, yields int
	since     time.Time
}

func (p *pacer) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if p.yields += n; p.yields >= yieldStep {
		p.yields = 0
		runtime.Gosched()
	}
	if p.n += n; p.n >= paceStep {
		p.n = 0
		busy := time.Since(p.since)
		time.Sleep(time.Duration(float64(busy) * p.idle))
		p.since = time.Now()
	}
	return n, err
}
