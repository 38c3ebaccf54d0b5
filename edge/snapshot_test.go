package edge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/internal/health"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/state"
)

const snapTestSpec = `name: snap
source: {mqtt: {topic: "s/#", qos: 1}}
event_time: {field: ts}
event_id: [seq]
key: [dev]
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: {n: count()}
`

// snapNode opens and runs a node with snapshots to store.
func snapNode(t *testing.T, data, broker string, sc *SnapshotConfig, edgeID string) (*node, func() error) {
	t.Helper()
	p, err := operators.CompileYAML("snap.yaml", []byte(snapTestSpec))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	cfg := &NodeConfig{EdgeID: edgeID, DataDir: data, NoSync: true, CheckpointInterval: 50 * time.Millisecond,
		Pipelines: []*operators.Pipeline{p}, Snapshots: sc, Started: func(string) { close(started) }}
	cfg.Broker.Brokers = []string{broker}
	n, err := open(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.run(ctx) }()
	select {
	case <-started:
	case err := <-done:
		cancel()
		t.Fatalf("node stopped at start: %v", err)
	}
	return n, func() error { cancel(); return <-done }
}

func publishN(t *testing.T, pub *testbroker.Publisher, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		pub.MustPublish(fmt.Sprintf("s/d%d", i%3), fmt.Appendf(nil, `{"dev":"d%d","seq":%d,"ts":%d}`, i%3, i, 1_700_000_000_000+int64(i)*10), 1)
	}
}

// flush publishes a reading far ahead of the others, which fires every
// window before it (its own stays open).
func flush(t *testing.T, pub *testbroker.Publisher) {
	t.Helper()
	pub.MustPublish("s/d0", fmt.Appendf(nil, `{"dev":"d0","seq":1000000,"ts":%d}`, int64(1_700_000_000_000+3_600_000)), 1)
}

// waitIn waits until the pipeline has read want payloads.
func waitIn(t *testing.T, n *node, want uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d payloads read", want), func() bool {
		return n.pipe("snap").rt.Stats().In >= want
	})
}

// waitFor polls cond until it holds (the node's goroutines make it so),
// for up to 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSnapshotsOnIntervalAndDemand: snapshots every interval and on
// demand, each of a checkpoint covering what the node had taken in, the
// store pruned to the last Keep, and the metrics counting them.
func TestSnapshotsOnIntervalAndDemand(t *testing.T) {
	mosq := testbroker.Start(t)
	st, _ := checkpoint.NewDirStore(t.TempDir())
	n, stop := snapNode(t, filepath.Join(t.TempDir(), "data"), mosq.Addr(), &SnapshotConfig{Store: st, Interval: 100 * time.Millisecond, Keep: 2, Version: "test"}, "gw")
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	defer pub.Close()
	publishN(t, pub, 0, 200)
	waitFed(t, n, 200)
	fed := n.pumpPos.Load()
	m, err := n.Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// On demand: a checkpoint of its own, covering every message fed.
	if m.LogPos < fed || m.Runnel != "test" || m.EdgeID != "gw" {
		t.Fatalf("snapshot on demand: %+v, pump at %d before", m, fed)
	}
	// Snapshots on the interval are of new checkpoints: an idle edge
	// commits none (and so uploads nothing), so the stream goes on.
	for i := 1; n.snap.taken.Load() < 4; i++ {
		publishN(t, pub, 180+20*i, 200+20*i)
		waitFed(t, n, uint64(200+20*i))
		if i > 200 {
			t.Fatal("timed out waiting for 3 more snapshots on the interval")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Then the edge is idle: the last checkpoint is snapshotted and
	// pruned, and nothing more happens.
	for quiet, last := 0, n.snap.taken.Load(); quiet < 10; quiet++ {
		time.Sleep(50 * time.Millisecond)
		if now := n.snap.taken.Load(); now != last {
			quiet, last = 0, now
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l, err := (&checkpoint.Snapshots{Store: st, Edge: "gw"}).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Complete) != 2 || len(l.Incomplete) != 0 {
		t.Fatalf("store after pruning: %d complete, %d incomplete; want 2, 0", len(l.Complete), len(l.Incomplete))
	}
	if n.snap.failed.Load() != 0 || n.snap.lastID.Load() != l.Complete[1].Checkpoint {
		t.Fatalf("stats: %d failed (%s), last %d; store's last %d", n.snap.failed.Load(), n.snap.lastErr, n.snap.lastID.Load(), l.Complete[1].Checkpoint)
	}
	if _, err := os.Stat(filepath.Join(n.cfg.DataDir, snapshotTmp)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary data object stayed: %v", err)
	}
}

// stuckStore is a store whose Puts wait until released (or their context
// ends): an object store that hangs.
type stuckStore struct {
	checkpoint.Store
	release chan struct{}
	puts    atomic.Int64
}

func (s *stuckStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	s.puts.Add(1)
	select {
	case <-s.release:
		return s.Store.Put(ctx, key, r, size)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSnapshotNeverBlocksIngestion: while an upload hangs, the node goes
// on taking messages in, processing them and committing checkpoints; it
// stops promptly (the upload is cut short), and the next start deletes
// nothing it needs. A Snapshot on demand meanwhile waits its turn, and
// its caller can give up.
func TestSnapshotNeverBlocksIngestion(t *testing.T) {
	mosq := testbroker.Start(t)
	dir, _ := checkpoint.NewDirStore(t.TempDir())
	st := &stuckStore{Store: dir, release: make(chan struct{})}
	n, stop := snapNode(t, filepath.Join(t.TempDir(), "data"), mosq.Addr(), &SnapshotConfig{Store: st}, "gw")
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	defer pub.Close()
	publishN(t, pub, 0, 50)
	waitFed(t, n, 50)
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := n.Snapshot(context.Background()); err == nil {
			t.Error("a snapshot into a store that hangs until the node stops: no error")
		}
	})
	waitFor(t, "the upload to start", func() bool { return st.puts.Load() > 0 })
	// Checkpoints go on while readings come in (an idle edge commits
	// none: the stream goes on until five more are committed).
	ckpts := n.status.checkpoints.Load()
	total := 50
	for n.status.checkpoints.Load() < ckpts+5 {
		if total >= 5000 {
			t.Fatalf("%d checkpoints while the upload hangs and %d readings come in", n.status.checkpoints.Load()-ckpts, total-50)
		}
		publishN(t, pub, total, total+50)
		total += 50
		time.Sleep(20 * time.Millisecond)
	}
	flush(t, pub)
	waitFed(t, n, uint64(total+1))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, err := n.Snapshot(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a second snapshot on demand while one hangs: %v, want the caller's deadline", err)
	}
	cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the node does not stop while an upload hangs")
	}
	wg.Wait()
	if got := latestCountIn(t, n.cfg.DataDir); got != int64(total) {
		t.Fatalf("the outbox counts %d readings, want %d", got, total)
	}
}

// latestCountIn sums the latest version of every window in a stopped
// node's outbox.
func latestCountIn(t *testing.T, data string) int64 {
	t.Helper()
	p, _ := operators.CompileYAML("snap.yaml", []byte(snapTestSpec))
	latest := map[string]OutboxEntry{}
	err := ReadOutbox(context.Background(), data, func(e OutboxEntry) error {
		if !e.Marker {
			k := fmt.Sprintf("%s/%d", e.Result.Key, e.Result.Start)
			if o, ok := latest[k]; !ok || o.Result.Version < e.Result.Version {
				e.Result.Key, e.Result.State = slices.Clone(e.Result.Key), slices.Clone(e.Result.State)
				latest[k] = e
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	st := p.Aggregates.New()
	for _, e := range latest {
		if err := p.Aggregates.Decode(st, e.Result.State); err != nil {
			t.Fatal(err)
		}
		sum += p.Aggregates.Result(st, 0).Int
	}
	return sum
}

// failingStore fails every Put while fail is set.
type failingStore struct {
	checkpoint.Store
	fail atomic.Bool
}

func (s *failingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if s.fail.Load() {
		return errors.New("injected: the store is down")
	}
	return s.Store.Put(ctx, key, r, size)
}

// TestSnapshotFailureIsVisible: a failing store counts failures and makes
// the snapshot check degraded with the reason; the next success clears it.
func TestSnapshotFailureIsVisible(t *testing.T) {
	mosq := testbroker.Start(t)
	dir, _ := checkpoint.NewDirStore(t.TempDir())
	st := &failingStore{Store: dir}
	st.fail.Store(true)
	n, stop := snapNode(t, filepath.Join(t.TempDir(), "data"), mosq.Addr(), &SnapshotConfig{Store: st}, "gw")
	defer stop()
	check := func() health.Check {
		for _, c := range n.health(time.Now()).Checks {
			if c.Name == "snapshot" {
				return c
			}
		}
		t.Fatal("no snapshot check")
		return health.Check{}
	}
	if _, err := n.Snapshot(context.Background()); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("snapshot into a failing store: %v", err)
	}
	if c := check(); c.Status != health.Degraded || !strings.Contains(c.Reason, "injected") || n.snap.failed.Load() != 1 {
		t.Fatalf("after a failure: %+v, %d failed", c, n.snap.failed.Load())
	}
	st.fail.Store(false)
	if _, err := n.Snapshot(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := check(); c.Status != health.OK || n.snap.taken.Load() != 1 {
		t.Fatalf("after a success: %+v, %d taken", c, n.snap.taken.Load())
	}
	// The failed upload's data object is gone with the next prune; the
	// manifest was never written.
	l, _ := (&checkpoint.Snapshots{Store: dir, Edge: "gw"}).List(context.Background())
	if len(l.Complete) != 1 || len(l.Incomplete) != 0 {
		t.Fatalf("store: %d complete, %d incomplete", len(l.Complete), len(l.Incomplete))
	}
}

// TestRestore: an edge restored from its snapshot resumes from the
// snapshot's checkpoint under a new epoch, past every checkpoint id the
// store holds, and gets the rest of its input: its outbox counts every
// reading the snapshot covered and every later one, once. Restore refuses
// a data directory in use, or one not empty without Force, and a state
// file restored from another edge does not start as this one.
func TestRestore(t *testing.T) {
	ctx := context.Background()
	mosq := testbroker.Start(t)
	dir, _ := checkpoint.NewDirStore(t.TempDir())
	data := filepath.Join(t.TempDir(), "data")
	n, stop := snapNode(t, data, mosq.Addr(), &SnapshotConfig{Store: dir}, "gw")
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	defer pub.Close()
	publishN(t, pub, 0, 300)
	waitIn(t, n, 300)
	m, err := n.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A dead edge's upload that never finished, of a later checkpoint.
	if err := dir.Put(ctx, (&checkpoint.Snapshots{Edge: "gw"}).Key(m.Checkpoint+50, checkpoint.DataObject), strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	// Refused while the edge runs on it, even with Force.
	if _, err := Restore(ctx, RestoreConfig{Store: dir, EdgeID: "gw", DataDir: data, Force: true}); !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), "running") {
		t.Fatalf("restore onto a running edge: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// Refused: not empty, without Force.
	if _, err := Restore(ctx, RestoreConfig{Store: dir, EdgeID: "gw", DataDir: data}); !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("restore onto a full data directory: %v", err)
	}
	// A new gateway: the snapshot restored in a directory of its own.
	data2 := filepath.Join(t.TempDir(), "new", "data")
	res, err := Restore(ctx, RestoreConfig{Store: dir, EdgeID: "gw", DataDir: data2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Manifest.Checkpoint != m.Checkpoint || res.Epoch != 2 || res.Checkpoint != m.Checkpoint+50 {
		t.Fatalf("restored %+v; want checkpoint %d, epoch 2, continuing at %d", res, m.Checkpoint, m.Checkpoint+50)
	}
	// As another edge it does not start.
	if _, _, err := (func() (*node, func() error, error) {
		p, _ := operators.CompileYAML("snap.yaml", []byte(snapTestSpec))
		n, err := open(ctx, &NodeConfig{EdgeID: "gw2", DataDir: data2, Pipelines: []*operators.Pipeline{p}, NoSync: true})
		if err == nil {
			n.closeAll(ctx)
		}
		return n, nil, err
	})(); err == nil || !strings.Contains(err.Error(), `restored from a snapshot of edge "gw"`) {
		t.Fatalf("a restored state file opened as another edge: %v", err)
	}
	n2, stop2 := snapNode(t, data2, mosq.Addr(), &SnapshotConfig{Store: dir}, "gw")
	if n2.epoch.Load() != 2 {
		t.Fatalf("restored node runs epoch %d", n2.epoch.Load())
	}
	// The rest of the stream, and a redelivery of a reading the snapshot
	// covers.
	publishN(t, pub, 300, 500)
	publishN(t, pub, 100, 101)
	flush(t, pub)
	waitIn(t, n2, 202)
	m2, err := n2.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m2.Checkpoint <= m.Checkpoint+50 || m2.Epoch != 2 {
		t.Fatalf("the restored edge's snapshot: checkpoint %d epoch %d; want past %d, epoch 2", m2.Checkpoint, m2.Epoch, m.Checkpoint+50)
	}
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	if got := latestCountIn(t, data2); got != 500 {
		t.Fatalf("the restored edge's outbox counts %d readings, want 500", got)
	}
	// Force replaces a directory that is not empty, once the restore is
	// through.
	if _, err := Restore(ctx, RestoreConfig{Store: dir, EdgeID: "gw", Checkpoint: m.Checkpoint, DataDir: data, Force: true}); err != nil {
		t.Fatal(err)
	}
	if matches, _ := filepath.Glob(data + ".replaced-*"); len(matches) > 0 {
		t.Fatalf("the replaced directory stayed: %v", matches)
	}
	st, err := state.Open(filepath.Join(data, "state.db"), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.View(func(tx *state.Tx) error {
		meta, _, _ := checkpoint.LoadMeta(tx)
		epoch, _, _ := loadUplinkState(tx)
		// The store's newest snapshot is now the restored edge's m2.
		if epoch != 3 || meta.ID != m2.Checkpoint {
			t.Errorf("restored again: epoch %d, checkpoint %d; want 3, %d", epoch, meta.ID, m2.Checkpoint)
		}
		return nil
	})
}

// TestRestoreRefusesDamage: a damaged snapshot leaves the data directory
// as it was, even with Force, and leaves no temporary directory.
func TestRestoreRefusesDamage(t *testing.T) {
	ctx := context.Background()
	mosq := testbroker.Start(t)
	root := t.TempDir()
	dir, _ := checkpoint.NewDirStore(root)
	n, stop := snapNode(t, filepath.Join(t.TempDir(), "data"), mosq.Addr(), &SnapshotConfig{Store: dir}, "gw")
	m, err := n.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	obj := filepath.Join(root, filepath.FromSlash((&checkpoint.Snapshots{Edge: "gw"}).Key(m.Checkpoint, checkpoint.DataObject)))
	b, _ := os.ReadFile(obj)
	b[len(b)-10] ^= 0xff
	os.WriteFile(obj, b, 0o644)
	target := filepath.Join(t.TempDir(), "data")
	os.MkdirAll(target, 0o755)
	os.WriteFile(filepath.Join(target, "keep"), []byte("mine"), 0o644)
	_, err = Restore(ctx, RestoreConfig{Store: dir, EdgeID: "gw", DataDir: target, Force: true})
	if !errors.Is(err, checkpoint.ErrCorrupt) || !strings.Contains(err.Error(), "restore refused") {
		t.Fatalf("restore of a damaged snapshot: %v", err)
	}
	ents, _ := os.ReadDir(target)
	if got, _ := os.ReadFile(filepath.Join(target, "keep")); len(ents) != 1 || string(got) != "mine" {
		t.Fatalf("the data directory changed: %d entries, keep = %q", len(ents), got)
	}
	if tmp, _ := filepath.Glob(filepath.Join(filepath.Dir(target), ".data.restore-*")); len(tmp) > 0 {
		t.Fatalf("temporary directories left: %v", tmp)
	}
}
