package edge

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/edge/broker"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	"github.com/runnel-io/runnel/state"
	"github.com/runnel-io/runnel/sync/uplink"
)

// NodeConfig is what Run needs. Zero fields take defaults.
type NodeConfig struct {
	EdgeID    string
	DataDir   string
	Pipelines []*operators.Pipeline

	// Broker is the MQTT source's configuration. No Brokers: the node
	// starts the embedded broker on EmbeddedAddr. Topics are the
	// pipelines' (set by the node). ClientID defaults to "runnel-" + EdgeID.
	Broker       mqtt.Config
	EmbeddedAddr string // default 127.0.0.1:1883

	CheckpointInterval time.Duration // default 1s
	HTTPAddr           string        // /metrics and /healthz; "" = off
	// DiskCap bounds the bytes of the ingest log plus the outbox; 0 = no
	// cap. At the cap the node stops taking (and acknowledging) MQTT
	// messages, so the broker keeps them, until checkpoints and the uplink
	// free space. Aggregates are never dropped to make room.
	DiskCap int64
	// DropAtCap makes the node, at the cap, acknowledge and drop incoming
	// messages (counted) instead of leaving them at the broker.
	DropAtCap bool
	// MaxLag bounds the records appended to the ingest log and not yet fed
	// to the pipelines; 0 = no bound. Past it the node holds MQTT messages
	// at the broker as at the disk cap (never drops them).
	MaxLag int64
	// SideOutputs bounds what the node keeps of its side outputs.
	SideOutputs SideOutputs
	IngestLog   ingestlog.Options
	Runtime     operators.Options
	NoSync      bool // tests only: skip fsyncs of the state store
	// pumpGate, in tests, is received from before the pump feeds each
	// record: a pipeline that has stalled (export_test.go).
	pumpGate <-chan struct{}
	// Uplink, when set, drains the committed outbox to a hub (EdgeID is
	// the node's). Nil: the outbox only grows (up to the disk cap).
	Uplink *uplink.Config
	// Snapshots, when set, uploads snapshots of the state file to a
	// store (snapshot.go); `runnel-edge restore` rebuilds a data
	// directory from one (restore.go).
	Snapshots *SnapshotConfig
	// Fleet, with Uplink set, turns on the edge agent: the node also runs
	// the pipeline revisions the hub deploys to it, and may start with no
	// pipelines of its own (agent.go, managed.go).
	Fleet *FleetConfig
	// RawArchive, when set, uploads sealed ingest-log segments to object
	// storage before they are deleted (raw.go).
	RawArchive *RawArchive

	Logger *slog.Logger
	// Started, when set, is called once the node runs and its MQTT source
	// is connected and subscribed, with the broker URL it uses (from
	// another goroutine; the node logs "edge: ready" at the same moment).
	Started func(brokerURL string)
}

// SideOutputs bounds the dead letters, late records and quarantined outbox
// entries a node keeps in its state file (and writes to the outputs the
// pipelines name). They count toward the disk cap. Past either bound the
// oldest go first, counted in runnel_edge_side_output_dropped_total.
// MaxAge < 0: no age limit.
type SideOutputs struct {
	MaxBytes int64         // default 64 MiB
	MaxAge   time.Duration // default 7 days
}

// Run runs an edge node until ctx is done, then drains, takes a last
// checkpoint and returns. See the package documentation for the model.
func Run(ctx context.Context, cfg NodeConfig) error {
	n, err := open(ctx, &cfg)
	if err != nil {
		return err
	}
	return n.run(ctx)
}

type node struct {
	cfg   *NodeConfig
	lg    *slog.Logger
	log   *ingestlog.Log
	store *state.Store
	pipes []*pipe
	acks  ackQueue
	// appendMu orders appends with their acks (handle, intake); rec is the
	// record being appended.
	appendMu sync.Mutex
	rec      []byte
	// The MQTT reader's: the position after the last record it appended,
	// and the broker's window of unacknowledged messages (MQTT v5's
	// receive maximum; 0 with 3.1.1, whose broker's the edge does not
	// know). See idle.
	readEnd ingestlog.Position
	window  int
	// intakeSubs are the topic filters the embedded broker's intake takes.
	intakeSubs atomic.Pointer[[]mqtt.Subscription]
	last       checkpoint.Meta // the last committed checkpoint

	status  status
	side    sideStats     // side.go
	lastSeq atomic.Uint64 // n.last.NextSeq, for metrics
	// sideQueue carries side output lines to mqtt outputs (side.go);
	// nil when no pipeline has one.
	sideQueue chan sideMessage

	// The clock records of the ingest log (record.go): when the last was
	// appended and when the last message was (Unix ms), and how long
	// after the last message they go on (the pipelines' idle horizon).
	lastClock, lastMessage atomic.Int64
	lastTopic              string // the pump's last record's topic (decodeRecord)
	idleHorizon            atomic.Int64
	maxRecord              int                  // the ingest log's record limit
	fed                    uint64               // pump only: messages fed to the pipelines (for the checkpoint's log line)
	onFeed                 func(payload []byte) // benchmarks only: called by the pump with each message it fed
	closing                chan struct{}        // closed when the node starts to stop

	// pumpPos is one past the last log record the pump fed; pumpSeen is
	// where health last saw it move (health.go); uplinkAckAt is when the
	// hub's ack last advanced (Unix ms).
	pumpPos     atomic.Uint64
	pumpSeen    pumpSeen
	uplinkAckAt atomic.Int64
	started     time.Time
	// unsent says when the outbox entries were committed: the age of the
	// oldest the hub has not acked, for the fleet status.
	unsent unsentAges

	// logCovered is the log position the last committed checkpoint
	// covers; logFreed the bound its segments were deleted before (the
	// checkpoint before it, or the raw lane's). At the disk cap a
	// checkpoint more frees the segments between them.
	logCovered, logFreed atomic.Uint64

	parts chan ckptPart
	// ckptReqs asks the pump for a checkpoint now; snapReqs the
	// snapshotter for a snapshot (snapshot.go).
	ckptReqs chan ckptReq
	snapReqs chan snapReq
	snap     snapStats
	snapIdle float64 // the snapshot copy's pauses per unit of work (snapshot.go)

	// The pipelines as other goroutines see them (publishPipes), the
	// pump's reconfiguration requests (managed.go), and the agent's view
	// of the managed set.
	pipeView  atomic.Pointer[[]*pipe]
	applyReqs chan applyReq
	fleet     fleetState
	agent     agent
	raw       *rawLane // nil: no raw archive lane (raw.go)

	// Uplink: the outbox's committed end and a channel closed when it
	// grows; the epoch; the hub's ack, applied by the next checkpoint.
	grewMu     sync.Mutex
	grew       chan struct{}
	epoch      atomic.Uint64
	writeReqs  chan writeReq
	writerDone chan struct{} // closed when the writer returns
	uplinkAck  atomic.Uint64
	published  atomic.Uint64 // the MQTT outputs' cursor (publish.go)
	publishes  bool          // some pipeline has an mqtt output
	deletedTo  uint64        // writer only: outbox entries below are deleted
	// What the last committed checkpoint covered of the outbox readers'
	// progress (deletableUpTo, published): a checkpoint with no new
	// records and neither moved changes nothing, and the pump skips it.
	ackCommitted, pubCommitted atomic.Uint64
	pendingDeletedTo           uint64
	logWear                    wearCounts // what the ingest log wrote (wear.go)
}

type pipe struct {
	def   pipeDef // what it runs: a local file's pipeline or a managed revision
	p     *operators.Pipeline
	match *topicMatch // p's topic filter
	rt    *operators.Runtime
	sink  *stagingSink
	outs  *fileOutputs
	side  *sideWriters // its dead_letter and late_output (side.go)
	state *pipeState   // its operator state in the store (opstate.go)
	toHub bool         // the spec lists a hub output
	mqtt  []spec.Output
}

const (
	bucketOutbox = "outbox"
	bucketLate   = "late"
	bucketDead   = "deadletter"
)

// mappedBudget is how far the process's mapped pages of the state file
// may grow before a long read at start (the outbox's count, a restore)
// lets them go (state.Tx.ReleaseOver); checkEvery is how many bytes of
// values such a read takes between two looks at them.
const (
	mappedBudget = 8 << 20
	checkEvery   = 256 << 10
)

// partsBuffered is how many checkpoint parts wait for the writer: those
// of two checkpoints (a pipeline's part and the pump's). Each part holds a
// checkpoint's outputs and op records (megabytes at 10^5 keys), so a
// writer slower than the checkpoint interval holds up the pipelines (and,
// through the ingest log, nothing else) rather than let them queue.
func partsBuffered(pipelines int) int { return 2 * (max(pipelines, 4) + 1) }

// mmapBytes is the address space the state file is mapped with at first:
// growing the mapping during a large checkpoint made bbolt copy the whole
// transaction (a sixth of recovery's time). 1 GiB, or 256 MiB where
// address space is scarce (32-bit ARM).
const mmapBytes = 1<<28 + (strconv.IntSize/64)*(3<<28)

func open(ctx context.Context, cfg *NodeConfig) (*node, error) {
	if cfg.EdgeID == "" {
		h, _ := os.Hostname()
		cfg.EdgeID = h
	}
	if cfg.DataDir == "" {
		cfg.DataDir = "runnel-data"
	}
	if cfg.EmbeddedAddr == "" {
		cfg.EmbeddedAddr = broker.DefaultAddr
	}
	if cfg.Broker.ClientID == "" {
		cfg.Broker.ClientID = "runnel-" + cfg.EdgeID
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = time.Second
	}
	if cfg.Fleet != nil && cfg.Uplink == nil {
		return nil, errors.New("edge: fleet management needs an uplink (the hub)")
	}
	if len(cfg.Pipelines) == 0 && cfg.Fleet == nil {
		return nil, errors.New("edge: no pipelines")
	}
	lg := cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	n := &node{cfg: cfg, lg: lg, parts: make(chan ckptPart, partsBuffered(len(cfg.Pipelines))), closing: make(chan struct{}), applyReqs: make(chan applyReq),
		grew: make(chan struct{}), writeReqs: make(chan writeReq), writerDone: make(chan struct{}),
		ckptReqs: make(chan ckptReq), snapReqs: make(chan snapReq), snapIdle: defaultSnapIdle}
	n.acks.src = &n.status.src
	n.started = time.Now()
	n.pumpSeen.at = n.started
	// A start counts as a message for the clock records: readings the log
	// holds from before a crash still get their idle advance.
	n.lastMessage.Store(n.started.UnixMilli())
	n.uplinkAckAt.Store(n.started.UnixMilli())
	n.agent.since = n.started // the control stream counts as down since the start
	// Operator state is kept in system buckets (opstate.go).
	// A file at least half free pages (an outbox an outage filled and the
	// uplink emptied) is compacted first: bbolt never shrinks it, and the
	// disk cap counts its pages in use, not its length.
	st, err := state.Open(filepath.Join(cfg.DataDir, "state.db"), state.Options{NoSync: cfg.NoSync, MmapBytes: mmapBytes, CompactFree: stateCompactFree})
	if err != nil {
		return nil, fmt.Errorf("edge: %w", err)
	}
	n.store = st
	switch c := st.Compaction(); {
	case c.Err != nil:
		lg.Warn("edge: state file not compacted; going on with it as it is", "err", c.Err)
	case c.Before > 0:
		lg.Info("edge: state file compacted", "before_bytes", c.Before, "after_bytes", c.After, "took", c.Took.Round(time.Millisecond))
	}
	defer func() { n.lastSeq.Store(n.last.NextSeq) }()
	// A snapshot's data object that a crash left half written.
	if err := os.Remove(filepath.Join(cfg.DataDir, snapshotTmp)); err != nil && !errors.Is(err, os.ErrNotExist) {
		lg.Warn("edge: remove a snapshot's temporary file", "err", err)
	}
	err = st.View(func(tx *state.Tx) error {
		epoch, published, err := loadUplinkState(tx)
		if err != nil {
			return err
		}
		n.epoch.Store(epoch)
		n.published.Store(published)
		if err := checkRestored(tx, cfg.EdgeID, lg); err != nil {
			return err
		}
		var ok bool
		if n.last, ok, err = checkpoint.LoadMeta(tx); err != nil || !ok {
			n.last.NextSeq = 1 // sequence numbers start at 1: an ack of 0 is none
			return err
		}
		ob, err := tx.Bucket(bucketOutbox)
		if err != nil {
			return err
		}
		// A long outbox (a gateway offline for days) is most of the
		// file: its pages are let go as the count goes, not kept mapped.
		read := 0
		err = ob.ForEach(nil, func(_, v []byte) error {
			n.status.outboxBytes.Add(int64(len(v)))
			if read += len(v); read >= checkEvery {
				read = 0
				return tx.ReleaseOver(mappedBudget)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return n.loadSide(tx)
	})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("edge: read checkpoint: %w", err)
	}
	n.pumpPos.Store(n.last.LogPos) // the ingest lag counts from here until the pump runs
	logOpts := cfg.IngestLog
	logOpts.OnDurable = n.acks.durable
	logOpts.FS = wearFS{FS: cmp.Or(logOpts.FS, ingestlog.OSFS()), c: &n.logWear}
	l, rec, err := ingestlog.Open(ctx, filepath.Join(cfg.DataDir, "log"), &logOpts)
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("edge: %w", err)
	}
	n.log = l
	n.maxRecord = l.MaxRecordSize()
	if cfg.RawArchive != nil {
		if n.raw, err = newRawLane(cfg.RawArchive, cfg.DataDir, cfg.EdgeID, l.First()); err != nil {
			l.Close(ctx)
			st.Close()
			return nil, err
		}
	}
	if rec.TruncatedBytes > 0 {
		lg.Warn("ingest log: cut a torn tail", "segment", rec.TruncatedSegment, "offset", rec.TruncatedOffset,
			"bytes", rec.TruncatedBytes, "records", rec.TruncatedRecords, "reason", rec.TruncatedReason)
	}
	// The checkpoint in state.db and the log must agree: replay starts at
	// the checkpoint's position. A log that starts after it lost records
	// the checkpoint does not cover; one that ends before it lost records
	// the checkpoint does cover, and new messages would take their
	// positions and be skipped on the next start. Either way the two files
	// do not belong together (a restored or damaged one): refuse.
	if last := ingestlog.Position(n.last.LogPos); last < l.First() || last > rec.End {
		l.Close(ctx)
		st.Close()
		return nil, fmt.Errorf("edge: %s (checkpoint %d) needs ingest log position %d, but %s holds positions %d to %d: the files do not belong together",
			filepath.Join(cfg.DataDir, "state.db"), n.last.ID, n.last.LogPos, filepath.Join(cfg.DataDir, "log"), l.First(), rec.End)
	}
	defs, err := n.pipeDefs()
	if err != nil {
		n.closeAll(ctx)
		return nil, err
	}
	for _, d := range defs {
		ps, err := n.newPipe(ctx, d, n.last.ID > 0)
		if err != nil {
			n.closeAll(ctx)
			return nil, err
		}
		n.pipes = append(n.pipes, ps)
	}
	n.publishPipes()
	// With a hub managing pipelines the set can change while the node
	// runs: the outputs' publishers run whatever the set holds now.
	for _, ps := range n.pipes {
		for _, o := range []*spec.Output{ps.p.Spec.LateOutput, ps.p.Spec.DeadLetter} {
			if o != nil && o.Kind == spec.OutputMQTT && n.sideQueue == nil {
				n.sideQueue = make(chan sideMessage, sideQueueLen)
			}
		}
		n.publishes = n.publishes || len(ps.mqtt) > 0
	}
	if cfg.Fleet != nil {
		n.publishes = true
		if n.sideQueue == nil {
			n.sideQueue = make(chan sideMessage, sideQueueLen)
		}
	}
	if cfg.Uplink == nil {
		for _, ps := range n.pipes {
			if ps.toHub {
				lg.Warn("edge: the pipeline sends its results to the hub but no hub is configured (uplink.hub): they stay in the outbox, which grows up to the disk cap",
					"pipeline", ps.p.Name)
			}
		}
	}
	lg.Info("edge: opened", "edge", cfg.EdgeID, "checkpoint", n.last.ID, "replay_from", n.last.LogPos,
		"log_end", rec.End, "pipelines", len(n.pipes))
	return n, nil
}

func (n *node) closeAll(ctx context.Context) {
	for _, ps := range n.pipes {
		if ps.rt != nil {
			ps.rt.Close(false)
		}
		ps.outs.close()
		ps.side.close()
	}
	n.log.Close(ctx)
	n.store.Close()
}

func (n *node) run(ctx context.Context) error {
	cfg := n.cfg
	var url string
	if len(cfg.Broker.Brokers) > 0 {
		url = cfg.Broker.Brokers[0]
	}
	var brk *broker.Broker
	if url == "" {
		// The embedded broker hands the pipelines' messages to the ingest
		// log in-process (intake); the MQTT source connects to it only
		// to publish the MQTT outputs.
		var err error
		n.setIntakeTopics()
		if brk, err = broker.Start(ctx, broker.Options{Addr: cfg.EmbeddedAddr, Logger: n.lg, Intake: n.intake}); err != nil {
			n.closeAll(ctx)
			return fmt.Errorf("edge: embedded broker: %w", err)
		}
		url = "mqtt://" + brk.Addr()
	}
	subs := n.subscriptions()
	// The pump and the checkpoint writer stop when the source has stopped
	// and the log is drained: they get their own context.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	g, gctx := errgroup.WithContext(work)
	g.Go(func() error { return n.writer(gctx) })
	upCtx, stopUplink := context.WithCancel(gctx)
	defer stopUplink()
	upDone := make(chan error, 4)
	readers := 0
	if cfg.Uplink != nil {
		readers++
		go func() { upDone <- n.runUplink(upCtx) }()
	}
	if n.publishes {
		readers++
		go func() { upDone <- n.runPublisher(upCtx) }()
	}
	if n.sideQueue != nil {
		readers++
		go func() { upDone <- n.runSidePublisher(upCtx) }()
	}
	if n.raw != nil {
		readers++
		go func() { upDone <- n.runRawLane(upCtx) }()
	}
	stopReaders := func() error {
		stopUplink()
		var err error
		for ; readers > 0; readers-- {
			err = errors.Join(err, <-upDone)
		}
		return err
	}
	pumpDone := make(chan error, 1)
	drain := make(chan struct{})
	n.status.pumpAlive.Store(true)
	go func() {
		err := n.pump(gctx, drain)
		n.status.pumpAlive.Store(false)
		pumpDone <- err
	}()
	// The snapshotter stops as the node starts to stop: an upload in
	// progress is cut short (a later Prune deletes its data object) rather
	// than hold up the drain.
	snapCtx, stopSnap := context.WithCancel(context.WithoutCancel(ctx))
	snapDone := make(chan struct{})
	if cfg.Snapshots != nil {
		go func() {
			defer close(snapDone)
			n.runSnapshots(snapCtx)
		}()
	} else {
		close(snapDone)
	}
	stopSnapshots := func() {
		stopSnap()
		<-snapDone
	}
	defer stopSnapshots()
	// abort undoes the start when a later step fails.
	// It stops the parts in the order of a stop (below): the checkpoint
	// writer returns only once the parts channel is closed, and that only
	// after the pump and the runtimes, which send on it.
	abort := func(err error) error {
		stopSnapshots()
		close(drain)
		<-pumpDone
		for _, ps := range n.pipes {
			ps.rt.Close(false)
		}
		stopReaders()
		close(n.parts)
		g.Wait()
		stopWork()
		n.closeAll(ctx)
		if brk != nil {
			brk.Close(context.Background())
		}
		return err
	}
	if cfg.HTTPAddr != "" {
		stopHTTP, err := n.serveHTTP(ctx, cfg.HTTPAddr)
		if err != nil {
			return abort(err)
		}
		defer stopHTTP()
	}

	mc := cfg.Broker
	if len(mc.Brokers) == 0 {
		mc.Brokers = []string{url}
	}
	if brk != nil {
		// The embedded broker (mochi) loses and stalls QoS 1 messages
		// parked beyond a subscriber's Receive Maximum: never let it park.
		mc.ReceiveMaximum = broker.DefaultMaxInflight
	}
	if brk == nil {
		mc.Topics = subs
		if !cfg.DropAtCap {
			// At the disk cap a new connection would leave its SUBACK
			// unread behind the first batch the handler holds.
			mc.Hold = func() bool { return n.hold() == holdDisk }
		}
	}
	mc.MaxMessage = n.maxRecord // a longer payload is kept as an oversized record's start
	mc.Idle = n.idle
	if mc.Protocol != mqtt.ProtocolV311 {
		n.window = int(cmp.Or(mc.ReceiveMaximum, mqtt.DefaultReceiveMaximum))
	}
	if mc.Logger == nil {
		mc.Logger = n.lg
	}
	src, err := mqtt.Start(ctx, mc, n.handle)
	if err != nil {
		return abort(fmt.Errorf("edge: mqtt source: %w", err))
	}
	n.status.src.Store(src)
	// Ready means connected and subscribed: a publisher that starts now
	// loses nothing to a missing subscription.
	ready := make(chan struct{})
	go func() {
		defer close(ready)
		if src.WaitConnected(ctx) == nil {
			n.lg.Info("edge: ready", "broker", url)
			if cfg.Started != nil {
				cfg.Started(url)
			}
		}
	}()
	defer func() { <-ready }()
	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-pumpDone:
		pumpDone <- runErr
	}
	// Stop taking messages, then let the pump read what is durable, take a
	// last checkpoint, and stop.
	shut := context.Background()
	close(n.closing)
	stopSnapshots()
	if err := src.Close(shut); err != nil {
		n.lg.Warn("edge: mqtt source close", "err", err)
	}
	close(drain)
	if err := <-pumpDone; err != nil && runErr == nil {
		runErr = err
	}
	for _, ps := range n.pipes {
		if _, err := ps.rt.Close(false); err != nil && runErr == nil {
			runErr = err
		}
	}
	// The outbox readers (uplink, MQTT outputs) stop before the last
	// checkpoint: what it commits goes out with the next start.
	if err := stopReaders(); err != nil && runErr == nil {
		runErr = fmt.Errorf("edge: outbox reader: %w", err)
	}
	close(n.parts)
	if err := g.Wait(); err != nil && runErr == nil {
		runErr = err
	}
	if err := n.log.Close(shut); err != nil && runErr == nil {
		runErr = err
	}
	if err := n.store.Close(); err != nil && runErr == nil {
		runErr = err
	}
	for _, ps := range n.pipes {
		ps.outs.close()
		ps.side.close()
	}
	if brk != nil {
		brk.Close(shut)
	}
	return runErr
}

// handle is the MQTT handler: it appends each message of a batch to the
// ingest log and acknowledges the batch once the last of them is durable.
// At the disk cap or the ingest lag bound, checked before each message, it
// acknowledges what it appended so far and holds the rest (at the disk cap
// with drop_raw, drops it).
func (n *node) handle(b *mqtt.Batch) {
	n.appendMu.Lock()
	defer n.appendMu.Unlock()
	now := time.Now().UnixMilli()
	n.lastMessage.Store(now)
	n.appendClock(now)
	bounded := true
	for {
		// The batch is committed by the group commit, once the oldest
		// record has waited ingest_log.sync_delay, or on the reader when
		// the connection falls silent (idle): one fsync for the reads of
		// up to sync_delay, where each read's batch took its own.
		i, last, appended, err := n.appendMessages(b.Messages, bounded)
		head, tail := b.Split(i)
		if err == nil && appended {
			n.acks.push(pendingAck{last: last, mqtt: head})
			n.readEnd = last + 1
		}
		if err != nil {
			// The log has failed: the node stops, and the broker
			// redelivers the batch to the next run.
			n.lg.Error("edge: ingest log append; the broker will redeliver", "err", err)
			return
		}
		if appended {
			// Another commit may have made the batch durable before
			// its ack was queued.
			n.acks.durable(n.log.Durable())
		} else {
			head.Ack()
		}
		if i == len(b.Messages) {
			return
		}
		if n.cfg.DropAtCap && n.hold() == holdDisk {
			n.dropAtCap(len(b.Messages) - i)
			tail.Ack()
			return
		}
		b.Messages, b.Acks = b.Messages[i:], tail
		n.waitForRoom()
		select {
		case <-n.closing:
			bounded = false // the rest is taken after all (see waitForRoom)
		default:
		}
	}
}

// idle is the MQTT source's word that its connection fell silent after
// the batches it handed over. When the broker may be waiting for their
// acknowledgements to send more (its window of unacknowledged messages
// is half full or more; with MQTT 3.1.1 the edge does not know it, and
// Mosquitto's max_inflight_messages is 20 by default), what they
// appended is committed now rather than after the rest of the group's
// delay. A silence without that (a burst ended; a loaded machine's
// broker slow to send) leaves it to the group commit, within
// ingest_log.sync_delay.
func (n *node) idle() {
	if n.window > 0 && int64(n.readEnd)-int64(n.log.Durable()) < int64(n.window)/2 {
		return
	}
	n.log.BeginCommit()
	if err := n.log.Commit(); err != nil {
		n.lg.Error("edge: ingest log commit; the broker will redeliver", "err", err)
		return
	}
	n.acks.durable(n.log.Durable())
}

// appendMessages appends msgs to the ingest log until, when bounded, the
// disk cap or the lag bound is reached. It returns how many it took and
// the position of the last one appended, if any was.
func (n *node) appendMessages(msgs []mqtt.Message, bounded bool) (taken int, last ingestlog.Position, appended bool, err error) {
	for i := range msgs {
		if bounded && n.hold() != holdNone {
			return i, last, appended, nil
		}
		m := &msgs[i]
		switch {
		case m.Topic == "":
			// MQTT topic names are never empty (a v5 topic alias is
			// resolved before the handler): no pipeline can take it.
			n.status.emptyTopic.Add(1)
			continue
		case m.Size > len(m.Payload) || recordLen(m.Topic, m.Payload) > n.maxRecord:
			// Too long for the log: acknowledge it and keep its start as
			// a dead letter, rather than leave it unacknowledged in front
			// of every later message.
			n.status.oversized.Add(1)
			n.rec = encodeOversized(n.rec[:0], m.Topic, m.Payload, m.Size)
		default:
			n.rec = encodeRecord(n.rec[:0], m.Topic, m.Payload)
		}
		pos, err := n.log.Append(context.Background(), n.rec)
		if err != nil {
			return i, last, appended, err
		}
		last, appended = pos, true
	}
	if cap(n.rec) > 64<<10 {
		n.rec = nil
	}
	return len(msgs), last, appended, nil
}

// intake is the embedded broker's IntakeFunc: a message of the pipelines'
// topics is appended to the ingest log and acknowledged to its publisher
// once durable; others are left to the broker. It runs on the publisher's
// connection goroutine and blocks it at the disk cap, which holds that
// device.
func (n *node) intake(m broker.Message, ack broker.Ack) bool {
	if !matchesAny(*n.intakeSubs.Load(), m.Topic) {
		return false
	}
	select {
	case <-n.closing:
		return true // stopping: not acknowledged, the publisher sends it again
	default:
	}
	n.appendMu.Lock()
	defer n.appendMu.Unlock()
	if h := n.hold(); h != holdNone {
		if h == holdDisk && n.cfg.DropAtCap {
			n.dropAtCap(1)
			ack.Ack()
			return true
		}
		n.waitForRoom()
	}
	now := time.Now().UnixMilli()
	n.lastMessage.Store(now)
	n.appendClock(now)
	if recordLen(m.Topic, m.Payload) > n.maxRecord {
		n.status.oversized.Add(1)
		n.rec = encodeOversized(n.rec[:0], m.Topic, m.Payload, len(m.Payload))
	} else {
		n.rec = encodeRecord(n.rec[:0], m.Topic, m.Payload)
	}
	pos, err := n.log.Append(context.Background(), n.rec)
	if err != nil {
		n.lg.Error("edge: ingest log append; the publisher will send the message again", "topic", m.Topic, "err", err)
		return true // not acknowledged
	}
	n.acks.push(pendingAck{last: pos, broker: ack})
	n.acks.durable(n.log.Durable())
	return true
}

// setIntakeTopics gives the embedded broker's intake the pipelines' topic
// filters.
func (n *node) setIntakeTopics() {
	subs := n.subscriptions()
	n.intakeSubs.Store(&subs)
}

func matchesAny(subs []mqtt.Subscription, topic string) bool {
	for _, s := range subs {
		if mqtt.Match(s.Filter, topic) {
			return true
		}
	}
	return false
}

// recordLen is the length of the message record encodeRecord makes.
func recordLen(topic string, payload []byte) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(len(topic))) + len(topic) + len(payload)
}

// clockEvery is the spacing of clock records in the ingest log: event-time
// bounds and the idle advance see the clock to this precision.
const clockEvery = 1000 // ms

// appendClock writes a clock record when the last one is clockEvery old,
// and the clock is plausible. Both the MQTT handler (before a message) and
// the pump (while input is quiet) call it.
func (n *node) appendClock(now int64) {
	last := n.lastClock.Load()
	if now-last < clockEvery || !n.lastClock.CompareAndSwap(last, now) {
		return
	}
	if now < plausibleClock {
		if n.status.clockImplausible.CompareAndSwap(false, true) {
			n.lg.Warn("edge: the system clock is before 2020; event times are not bounded and idle pipelines do not advance until it is set",
				"clock", time.UnixMilli(now).UTC())
		}
		return
	}
	n.status.clockImplausible.Store(false)
	if _, err := n.log.Append(context.Background(), encodeClock(nil, now)); err != nil {
		n.lg.Warn("edge: ingest log: clock record", "err", err)
	}
}

// holdReason says why the node takes no more messages for now.
type holdReason int

const (
	holdNone holdReason = iota
	holdDisk            // the disk cap is reached
	holdLag             // the ingest lag bound is reached
)

// hold says whether the next message must wait, and why.
func (n *node) hold() holdReason {
	switch {
	case n.cfg.DiskCap > 0 && n.diskUsed() >= n.cfg.DiskCap:
		return holdDisk
	case n.cfg.MaxLag > 0 && n.ingestLag() >= n.cfg.MaxLag:
		return holdLag
	}
	return holdNone
}

// ingestLag is the records appended to the ingest log that the pump has
// not fed to the pipelines yet (durable or about to be).
func (n *node) ingestLag() int64 {
	return max(int64(n.log.End())-int64(n.pumpPos.Load()), 0)
}

// waitForRoom blocks the MQTT handler while the disk cap or the lag bound
// is reached: nothing more is read or acknowledged and the broker keeps
// the rest. When the node stops meanwhile it returns, and the message it
// was holding is taken after all: a message handed to the handler and
// returned from without an ack was seen to be lost (not redelivered) on
// the next session, so the handler never does that.
func (n *node) waitForRoom() {
	for h := n.hold(); h != holdNone; h = n.hold() {
		if !n.waitWhile(h) {
			return
		}
	}
}

// waitWhile waits until h no longer holds (true) or the node stops.
func (n *node) waitWhile(h holdReason) bool {
	// The pump frees lag in milliseconds; checkpoints and the uplink free
	// disk in seconds.
	poll := 5 * time.Millisecond
	if h == holdDisk {
		poll = 50 * time.Millisecond
		n.status.capWaits.Add(1)
		n.status.capBlocked.Store(true)
		defer n.status.capBlocked.Store(false)
		n.lg.Warn("edge: disk cap reached; holding MQTT messages at the broker", "cap", n.cfg.DiskCap, "used", n.diskUsed())
	} else {
		n.status.lagWaits.Add(1)
		n.status.lagBlocked.Store(true)
		defer n.status.lagBlocked.Store(false)
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if h == holdDisk {
			// The log's spare segment file is the first thing the disk
			// gives back; a checkpoint's deletion may have made another.
			n.dropSpares()
		}
		if n.hold() != h {
			break
		}
		select {
		case <-n.closing:
			return false
		case <-t.C:
		}
	}
	return true
}

// dropSpares removes the ingest log's spare segment files.
func (n *node) dropSpares() {
	if freed, err := n.log.DropSpares(); err != nil {
		n.lg.Warn("edge: remove the ingest log's spare segment", "err", err)
	} else if freed > 0 {
		n.lg.Info("edge: the ingest log's spare segment removed to stay under the disk cap", "bytes", freed)
	}
}

// dropAtCap counts messages dropped at the disk cap (policy drop_raw)
// and warns at most every 10 s.
func (n *node) dropAtCap(count int) {
	dropped := n.status.capDropped.Add(uint64(count))
	now := time.Now().UnixNano()
	if last := n.status.capDropWarned.Load(); now-last > int64(10*time.Second) && n.status.capDropWarned.CompareAndSwap(last, now) {
		n.lg.Warn("edge: disk cap reached; dropping incoming messages (disk_cap.policy drop_raw)",
			"cap", n.cfg.DiskCap, "used", n.diskUsed(), "dropped_total", dropped)
	}
}

// diskUsed is what counts toward the disk cap: the ingest log's segments
// and what the state file holds (the outbox, the side outputs, the
// operators' state, and bbolt's own pages: the file's pages less its free
// ones, as of the last commit). The lanes yield in priority order as it
// nears the cap: the raw archive first (segments a checkpoint covers are
// deleted unarchived once two more segments would not fit, raw.go), then
// the side outputs (each checkpoint bounds them to the room the rest
// leaves, oldest first, boundSide), and the aggregates never: at the cap
// the handler holds messages at the broker.
func (n *node) diskUsed() int64 {
	return n.log.Size() + n.stateBytes()
}

// stateBytes is what the state file holds, as of the last commit.
func (n *node) stateBytes() int64 { return n.store.WriteStats().DataBytes }

// stateCompactFree is the fraction of free pages at which the node
// compacts its state file at start (state.Options.CompactFree).
const stateCompactFree = 0.5

// sideQueueLen bounds the side output lines waiting for mqtt outputs.
const sideQueueLen = 1024

// pump reads the durable log from the last checkpoint on and feeds the
// runtimes; it injects a barrier every checkpoint interval. Replay after a
// restart and live ingestion are the same loop. It returns after drain is
// closed and everything durable has been read.
func (n *node) pump(ctx context.Context, drain <-chan struct{}) error {
	rd, err := n.log.NewReader(ingestlog.Position(n.last.LogPos))
	if err != nil {
		return err
	}
	defer rd.Close()
	n.pumpPos.Store(n.last.LogPos)
	next := ingestlog.Position(n.last.LogPos)
	id := n.last.ID
	tick := time.NewTicker(n.cfg.CheckpointInterval)
	defer tick.Stop()
	// barrier injects the next checkpoint barrier; one that carries a
	// reconfiguration returns once its checkpoint is committed.
	barrierWith := func(fc *fleetCommit) error {
		id++
		if fc != nil {
			for _, ps := range fc.ending {
				ps.sink.endID.Store(id)
			}
		}
		for _, ps := range n.pipes {
			if err := ps.rt.Barrier(id); err != nil {
				return err
			}
		}
		if fc != nil {
			fc.done = make(chan error, 1)
		}
		select {
		case n.parts <- ckptPart{id: id, pos: next, isPos: true, fed: n.fed, pipes: len(n.pipes), fleet: fc}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if fc == nil {
			return nil
		}
		select {
		case err := <-fc.done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	barrier := func() error { return barrierWith(nil) }
	// An idle edge writes nothing: a tick with no record fed since the
	// last barrier, and no ack or MQTT output progress to store, would
	// commit a checkpoint equal to the last (an fsync a second on an SD
	// card for nothing).
	barrierPos := next
	tickBarrier := func() error {
		// Held at the disk cap with side output entries that could
		// yield their room, or log segments the last checkpoint covers
		// that the one before did not: a checkpoint frees them.
		held := n.status.capBlocked.Load()
		yield := held && (n.side.bytes.Load() > 0 || n.logFreed.Load() < n.logCovered.Load())
		if next == barrierPos && !yield && n.deletableUpTo() == n.ackCommitted.Load() && n.published.Load() == n.pubCommitted.Load() {
			n.status.checkpointsSkipped.Add(1)
			return nil
		}
		barrierPos = next
		return barrier()
	}
	// checkpointNow injects a barrier for a snapshot on demand: the
	// writer tells the requester when its checkpoint is committed, the
	// pump goes on at once.
	checkpointNow := func(req ckptReq) error {
		id++
		for _, ps := range n.pipes {
			if err := ps.rt.Barrier(id); err != nil {
				return err
			}
		}
		select {
		case n.parts <- ckptPart{id: id, pos: next, isPos: true, fed: n.fed, pipes: len(n.pipes), notify: req.done}:
		case <-ctx.Done():
			return ctx.Err()
		}
		req.id <- id
		return nil
	}
	reconfigure := func(req applyReq) error {
		report, fatal := n.reconfigure(ctx, req, barrierWith)
		req.done <- errors.Join(report, fatal)
		return fatal
	}
	// budgetBarrier keeps the keys the pipelines hold near
	// state.max_resident_keys when new keys come faster than checkpoints:
	// keys wait in memory for the checkpoint that stores them, so it
	// injects a barrier before the interval's (at most every eighth of an
	// interval), and with half again the bound and a barrier in flight it waits
	// for the commit: memory over throughput.
	lastBudget := time.Now()
	budgetBarrier := func() error {
		if n.fed%1024 != 0 {
			return nil
		}
		for _, ps := range n.pipes {
			switch ps.rt.Budget() {
			case operators.BudgetCheckpoint:
				if time.Since(lastBudget) < n.cfg.CheckpointInterval/8 {
					continue
				}
				lastBudget = time.Now()
				barrierPos = next
				return barrier()
			case operators.BudgetWait:
				if err := ps.rt.Flush(); err != nil {
					return err
				}
				select {
				case <-ps.rt.CommitSignal():
				case <-time.After(n.cfg.CheckpointInterval):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		return nil
	}
	draining := false
	lastFlush := time.Now()
	unflushed := false // records fed since the last flush
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	for {
		rec, pos, err := rd.Next()
		switch {
		case err == nil:
			if n.cfg.pumpGate != nil {
				<-n.cfg.pumpGate
			}
			if err := n.feed(rec, pos); err != nil {
				return err
			}
			unflushed = true
			n.pumpPos.Store(uint64(pos) + 1)
			next = pos + 1
			if err := budgetBarrier(); err != nil {
				return err
			}
			select {
			case <-tick.C:
				if err := tickBarrier(); err != nil {
					return err
				}
			case req := <-n.applyReqs:
				if err := reconfigure(req); err != nil {
					return err
				}
			case req := <-n.ckptReqs:
				if err := checkpointNow(req); err != nil {
					return err
				}
			default:
			}
			continue
		case errors.Is(err, io.EOF):
		default:
			return fmt.Errorf("edge: read ingest log at %d: %w", next, err)
		}
		if draining {
			return barrier()
		}
		// Caught up. Flush partial batches (so results and the watermark
		// move) at most every flushEvery: flushing whenever the reader
		// catches up would send one-record batches at low rates.
		now := time.Now()
		if now.Sub(lastFlush) >= flushEvery {
			lastFlush = now
			if unflushed {
				unflushed = false
				for _, ps := range n.pipes {
					if err := ps.rt.Flush(); err != nil {
						return err
					}
				}
			}
			// While input is quiet, clock records go on for as long as
			// an idle pipeline's watermark can still fire a window.
			if ms, h := now.UnixMilli(), n.idleHorizon.Load(); h > 0 && ms-n.lastMessage.Load() <= h {
				n.appendClock(ms)
			}
		}
		// Wait for the next commit, a request or the checkpoint tick;
		// and for the next flush only while there is something to flush,
		// or for the next clock record while one is due: an idle edge
		// sleeps until the tick.
		var flush <-chan time.Time
		if ms, h := now.UnixMilli(), n.idleHorizon.Load(); unflushed || h > 0 && ms-n.lastMessage.Load() <= h {
			at := lastFlush.Add(flushEvery)
			if !unflushed {
				at = time.UnixMilli(n.lastClock.Load() + clockEvery)
			}
			due.Reset(max(at.Sub(now), 0))
			flush = due.C
		}
		select {
		case <-n.log.DurableSignal(next):
		case <-flush:
		case <-tick.C:
			if err := tickBarrier(); err != nil {
				return err
			}
		case req := <-n.applyReqs:
			if err := reconfigure(req); err != nil {
				return err
			}
		case req := <-n.ckptReqs:
			if err := checkpointNow(req); err != nil {
				return err
			}
		case <-drain:
			draining = true
		case <-ctx.Done():
			return ctx.Err()
		}
		due.Stop()
	}
}

// feed hands one ingest log record to the pipelines it is for: a message
// to those whose topic filter matches, a clock record to all, an oversized
// message to those it matches as a dead letter. A record that does not
// decode (not expected: frames are checked) is a dead letter of every
// pipeline.
func (n *node) feed(rec []byte, pos ingestlog.Position) error {
	r, err := decodeRecord(rec, n.lastTopic)
	if r.topic != "" {
		n.lastTopic = r.topic
	}
	if err != nil || r.kind != recordClock {
		n.fed++
	}
	if n.onFeed != nil && err == nil && r.kind == 0 {
		defer n.onFeed(r.payload)
	}
	for _, ps := range n.pipes {
		if ierr := feedRecord(ps.rt, ps.match, rec, r, err, int64(pos), n.maxRecord); ierr != nil {
			return ierr
		}
	}
	return nil
}

// feedRecord hands one ingest-log record (rec, decoded as r, or err) at
// pos to a pipeline's runtime, as the pump and an archive replay do: a
// clock record moves its clock, a message of its topics is ingested, an
// oversized or undecodable one is a dead letter.
func feedRecord(rt *operators.Runtime, m *topicMatch, rec []byte, r record, err error, pos int64, maxRecord int) error {
	switch {
	case err != nil:
		return rt.Reject(rec[:min(len(rec), oversizedPrefix)], "", pos, err.Error())
	case r.kind == recordClock:
		rt.Clock(r.clock)
	case !m.matches(r.topic):
	case r.kind == recordOversized:
		return rt.Reject(r.payload, r.topic, pos, fmt.Sprintf(
			"message of %d bytes is longer than the ingest log's record limit (%d bytes); its first %d bytes are kept here",
			r.size, maxRecord, len(r.payload)))
	default:
		return rt.Ingest(r.payload, r.topic, pos)
	}
	return nil
}

// flushEvery is how often the pump flushes partial batches when it has
// caught up with the log.
const flushEvery = 25 * time.Millisecond

// topicMatch is a pipeline's MQTT topic filter, with its answer for the
// last topic it was asked about: a stream's messages mostly come a run of
// one topic at a time, the same string (decodeRecord reuses it).
type topicMatch struct {
	filter string
	all    bool // no MQTT source: every topic
	last   string
	ok     bool
}

func newTopicMatch(p *operators.Pipeline) *topicMatch {
	m := p.Spec.Source.MQTT
	if m == nil {
		return &topicMatch{all: true}
	}
	return &topicMatch{filter: m.Topic, ok: mqtt.Match(m.Topic, "")}
}

func (m *topicMatch) matches(topic string) bool {
	if m.all {
		return true
	}
	if topic != m.last {
		m.last, m.ok = topic, mqtt.Match(m.filter, topic)
	}
	return m.ok
}

// ackQueue holds the acks of appended batches until the log says their
// last records are durable; acks go out in arrival order.
type ackQueue struct {
	mu   sync.Mutex
	q    []pendingAck
	head int
	src  *atomic.Pointer[mqtt.Source] // batches the acks' writes, once started
}

// pendingAck is a batch from the MQTT source or a message the embedded
// broker's intake took, with its last record.
type pendingAck struct {
	last   ingestlog.Position
	mqtt   mqtt.Acks
	broker broker.Ack
}

func (a *ackQueue) push(p pendingAck) {
	a.mu.Lock()
	a.q = append(a.q, p)
	a.mu.Unlock()
}

// durable is ingestlog's OnDurable: acknowledge every batch below upTo.
// Acks are sent under the lock so that they leave in arrival order even
// when the committer and the handler both call it.
func (a *ackQueue) durable(upTo ingestlog.Position) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.head == len(a.q) || a.q[a.head].last >= upTo {
		return
	}
	send := func() {
		for a.head < len(a.q) && a.q[a.head].last < upTo {
			a.q[a.head].mqtt.Ack()
			a.q[a.head].broker.Ack()
			a.q[a.head] = pendingAck{}
			a.head++
		}
	}
	if src := a.src.Load(); src != nil {
		src.AckBatch(send)
	} else {
		send()
	}
	if a.head > 1024 && a.head*2 > len(a.q) {
		a.q = append(a.q[:0], a.q[a.head:]...)
		a.head = 0
	}
}
