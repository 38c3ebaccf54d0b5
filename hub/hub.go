package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Errors Apply and Hello return; the server maps them to gRPC codes.
var (
	// ErrFenced: a batch's epoch is older than the one the hub holds.
	ErrFenced = errors.New("hub: epoch fenced")
	// ErrBadEpoch: a Hello or batch with an epoch the hub will not adopt:
	// beyond MaxEpoch, or more than MaxEpochStep past the held one.
	ErrBadEpoch = errors.New("hub: epoch out of bounds")
	// ErrGap: the batch starts past the next sequence the hub expects.
	ErrGap = errors.New("hub: sequence gap")
	// ErrBadBatch: a batch the hub will never take, nothing of it
	// applied: malformed as a whole (edge id, sequence numbers), or with
	// partials it refuses, each named by a *RefusedError (bad bounds or
	// key, state that does not decode, a pipeline the hub does not know
	// once the edge's parking quota is full).
	ErrBadBatch = errors.New("hub: bad batch")
	// ErrClosed: the hub is shutting down.
	ErrClosed = errors.New("hub: closed")
	// ErrBadQuery: a query names an unknown pipeline or revision, or
	// carries a cursor this hub did not hand out.
	ErrBadQuery = errors.New("hub: bad query")
	// ErrCorrupt: the store holds bytes that do not decode; Open fails.
	ErrCorrupt = errors.New("hub: store corrupt")
)

// Bounds of the epochs the hub adopts (package doc, Epochs).
const (
	// MaxEpochStep is how far past the held epoch a Hello or batch may
	// move an edge.
	MaxEpochStep = 16
	// MaxEpoch is the highest epoch of any edge; a store holding a higher
	// one (an older hub adopted anything) is read as holding none.
	MaxEpoch = 1 << 32
)

// Config configures a Hub.
type Config struct {
	Dir            string                // data directory; the store is Dir/hub.db
	Pipelines      []*operators.Pipeline // local pipelines (partials of revision 0), by name
	Revisions      []Revision            // managed revisions known at Open; Define adds more (package doc, Revisions)
	KeyGroups      int                   // default 128; fixed once the store exists
	EdgeTimeout    time.Duration         // silent longer: stops holding the watermark back (default 1m)
	Retention      time.Duration         // windows and results kept this long past min(hub watermark, hub clock) (default 7 days)
	MaxFuture      time.Duration         // how far an edge's watermark or a window's start may lead the hub's clock (default 1h; package doc, Time)
	ParkedQuota    int64                 // bytes of partials of unknown pipelines parked per edge (default 64 MiB; package doc, Unknown pipelines and revisions)
	Resident       time.Duration         // emitted windows ending more than this before the hub watermark leave memory; a late partial reloads one (default 1h; package doc, Memory)
	CommitInterval time.Duration         // group commit period (default 20ms)
	// ArchiveMaxPending turns the archive log on (package doc, Archive
	// log): every commit logs the results it emits for the archiver, and
	// batches are refused (ErrArchiveFull) while this many are logged and
	// not yet archived. 0: no archive log.
	ArchiveMaxPending uint64
	// ArchiveNotify, when set, is called after each commit that logged
	// results, with the results pending in the log. It runs under the
	// commit lock: it must not block or call the hub.
	ArchiveNotify func(pending uint64)
	NoSync        bool             // bbolt NoSync, for tests and benchmarks only
	Now           func() time.Time // wall clock (default time.Now)
	Logger        *slog.Logger
}

// Resume is where an edge continues after Hello.
type Resume struct {
	Epoch    uint64 // the epoch the hub now holds for the edge
	AckedSeq uint64 // highest durable sequence of that epoch (0: none)
}

// Result is one version of one merged window.
type Result struct {
	Pipeline   string
	Key        []byte // encoded key fields (operators' key encoding)
	Start, End int64  // Unix ms
	Version    uint32
	State      []byte // aggregate.Set encoding of the merge over edges
	Edges      uint32 // edges that contributed
	Emitted    int64  // Unix ms wall time when it became durable
	// Class is the class of managed revisions the result merges (0: the
	// local pipeline); Revisions are the distinct revisions of the
	// partials merged into this version, ascending (nil for a local
	// pipeline: revision 0).
	Class     uint32
	Revisions []uint32
}

// Query selects results of one pipeline: of its local pipeline or of one
// class of its managed revisions.
type Query struct {
	Pipeline string
	// Revision picks the class: 0, that of the latest managed revision the
	// hub knows of Pipeline, or its local pipeline when it has none;
	// otherwise the class that holds this revision.
	Revision    uint32
	Key         []byte // encoded key; nil: every key
	From, To    int64  // windows with Start >= From and End <= To; To 0: unbounded
	AllVersions bool
	Limit       int // default 1000
	// After is a cursor from a previous page (opaque). It holds the class
	// of that page, which the next page keeps.
	After []byte
}

// PipelineInfo describes what the hub merges under one name: a local
// pipeline (Class 0) or one class of managed revisions.
type PipelineInfo struct {
	// Pipeline is the spec: the local pipeline's, or the latest revision's
	// of the class.
	Pipeline *operators.Pipeline
	// Class is the class's first revision (0: local); Revisions the
	// revisions of it the hub knows, ascending (nil: local).
	Class        uint32
	Revisions    []uint32
	Watermark    int64 // hub watermark; valid when HasWatermark
	HasWatermark bool
	Results      uint64 // result versions stored
}

// EdgeInfo describes an edge the hub has heard from.
type EdgeInfo struct {
	ID       string
	Epoch    uint64
	AckedSeq uint64
	LastSeen time.Time
	Live     bool
	// Watermarks: the edge's watermark per pipeline name (the highest of
	// those the hub holds for the name's local pipeline and classes; an
	// ended revision's end of time is left out).
	Watermarks map[string]int64
}

// Status is the hub's health and counters, for /healthz and metrics.
type Status struct {
	CommitErr   string // last commit failure, "" when fine
	Closed      bool   // Close has begun: nothing more is applied
	EdgesLive   int
	EdgesKnown  int
	Batches     uint64 // applied
	BatchesDup  uint64 // dropped as already applied
	Partials    uint64 // merged
	PartialsDup uint64 // dropped: already applied, or older than the edge's stored version
	// PartialsExpired: dropped because their window ended more than
	// Retention before the hub watermark (and was deleted).
	PartialsExpired uint64
	Results         uint64 // result versions emitted
	Commits         uint64
	CommitNanos     int64 // last commit duration
	// WindowsResident: windows held in memory (open, or emitted within
	// Resident of the hub watermark, or changed and not yet written).
	WindowsResident int
	// OpenWindows is WindowsResident, under the name hub/server exports.
	OpenWindows int
	// WindowsEvicted: windows dropped from memory, durable in the store,
	// since Open.
	WindowsEvicted uint64
	// WindowsReloaded: evicted windows loaded back by a late partial,
	// since Open.
	WindowsReloaded uint64
	// WatermarksClamped: edge watermarks more than MaxFuture ahead of the
	// hub's clock, held at that bound, since Open.
	WatermarksClamped uint64
	// Clamps: the edges whose watermarks were clamped within
	// IncidentWindow.
	Clamps []Incident
	// BatchesRefused: batches refused (ErrBadBatch, a RefusedError among
	// them), nothing of them applied, since Open.
	BatchesRefused uint64
	// PartialsRefused: partials named by a RefusedError, since Open.
	PartialsRefused uint64
	// Refusals: the edges with batches refused within IncidentWindow.
	Refusals []Incident
	// EpochsRefused: Hellos and batches refused with ErrBadEpoch, since
	// Open.
	EpochsRefused uint64
	// EpochRefusals: the edges with epochs refused within IncidentWindow.
	EpochRefusals []Incident
	// PartialsParked: partials of pipelines or revisions the hub does not
	// know parked since Open; PartialsUnparked: parked partials applied
	// (by Open, or by Define once their revision is known);
	// ParkedExpired: parked partials deleted after Retention.
	PartialsParked, PartialsUnparked, ParkedExpired uint64
	// Parked: what is parked now, per pipeline name.
	Parked []ParkedPipeline
	// ArchivePending: results in the archive log not yet archived;
	// ArchiveRefused: batches refused with ErrArchiveFull since Open.
	ArchivePending uint64
	ArchiveRefused uint64
}

// The methods below are the contract with hub/server; see each doc.
var _ interface {
	Hello(edgeID string, epoch, nextSeq uint64) (Resume, error)
	Apply(b *runnelv1.Batch) error
	Define(r Revision) error
	Acked(edgeID string) (epoch, seq uint64, next <-chan struct{})
	Pipelines() []PipelineInfo
	Pipeline(name string) *operators.Pipeline
	Edges() []EdgeInfo
	Query(q Query) (rs []Result, next []byte, err error)
	Subscribe(ctx context.Context, pipeline string, key []byte) <-chan Result
	Status() Status
	Close() error
} = (*Hub)(nil)

// Validate reports every problem with c at once. Zero values mean defaults
// and are valid, except Dir.
func (c *Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("hub: config: Dir is empty"))
	}
	if c.KeyGroups < 0 || c.KeyGroups > 1<<16 {
		errs = append(errs, fmt.Errorf("hub: config: KeyGroups %d outside [1, 65536] (0: default)", c.KeyGroups))
	}
	for name, d := range map[string]time.Duration{
		"EdgeTimeout": c.EdgeTimeout, "Retention": c.Retention, "CommitInterval": c.CommitInterval,
		"Resident": c.Resident, "MaxFuture": c.MaxFuture,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("hub: config: %s %v is negative", name, d))
		}
	}
	if c.ParkedQuota < 0 {
		errs = append(errs, fmt.Errorf("hub: config: ParkedQuota %d is negative", c.ParkedQuota))
	}
	seen := map[string]bool{}
	for i, p := range c.Pipelines {
		switch {
		case p == nil || p.Aggregates == nil:
			errs = append(errs, fmt.Errorf("hub: config: pipeline %d is not compiled", i))
		case p.Name == "" || len(p.Name) > maxPipeLen:
			errs = append(errs, fmt.Errorf("hub: config: pipeline %d: name of %d bytes", i, len(p.Name)))
		case strings.IndexByte(p.Name, classSep) >= 0:
			errs = append(errs, fmt.Errorf("hub: config: pipeline %q: the name holds %q, which no pipeline name does", p.Name, classSep))
		case seen[p.Name]:
			errs = append(errs, fmt.Errorf("hub: config: pipeline %q given twice", p.Name))
		default:
			seen[p.Name] = true
		}
	}
	cat := newCatalog()
	for i := range c.Revisions {
		r := &c.Revisions[i]
		if err := r.check(); err != nil {
			errs = append(errs, fmt.Errorf("hub: config: revisions[%d]: %w", i, err))
			continue
		}
		pp, known, err := cat.admit(r)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("hub: config: revisions[%d]: %w", i, err))
		case known:
		case pp == nil:
			cat.add(r, &pipe{idx: len(cat.pipes), name: r.Name, class: r.Class, spec0: r.Pipeline})
		default:
			cat.add(r, pp)
		}
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero values replaced by defaults. KeyGroups
// stays 0 here: Open takes the store's value, or 128 for a new store.
func (c Config) withDefaults() Config {
	if c.EdgeTimeout == 0 {
		c.EdgeTimeout = time.Minute
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = 20 * time.Millisecond
	}
	if c.Resident == 0 {
		c.Resident = time.Hour
	}
	if c.MaxFuture == 0 {
		c.MaxFuture = time.Hour
	}
	if c.ParkedQuota == 0 {
		c.ParkedQuota = defaultParkedQuota
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

const defaultKeyGroups = 128

// Hub is the hub node's core: see the package documentation.
// Its methods are safe for concurrent use.
type Hub struct {
	cfg       Config
	db        *bolt.DB
	keyGroups int
	resident  int64     // cfg.Resident in ms
	opened    time.Time // cfg.Now() at Open: every edge counts as heard from then
	// wmGen counts the edges' watermarks raised (advanceWatermark).
	wmGen uint64
	// dirtyEdges lists the edges whose record the next commit writes
	// (touch): a commit does not visit every edge to find them.
	dirtyEdges []*edge

	// commitMu serialises commits; it is taken before mu, never after.
	commitMu sync.Mutex
	ws       writeSet // guarded by commitMu
	dbClosed bool     // guarded by commitMu

	// cat is the catalog of pipes (revision.go): replaced by Define under
	// commitMu and mu, so stable under either; read without them by
	// validate, Query, Subscribe and Pipeline.
	cat atomic.Pointer[catalog]

	mu      sync.Mutex
	closed  bool
	edges   []*edge
	edgeIdx map[string]int32
	dirty   []*window // windows with parts to write
	loadKey []byte    // reload's scratch key
	// residentFrom is the highest pipe.residentFrom: a batch whose windows
	// all end at or after it needs nothing reloaded.
	residentFrom int64
	next         chan struct{}
	stats        Status
	clamps       incidents // watermarks held at the clock bound
	refusals     incidents // batches refused
	epochs       incidents // epochs refused
	parking      parking   // partials and watermarks of unknown pipelines
	arch         archiving // the archive log

	subMu      sync.Mutex
	subs       map[*subscriber]struct{}
	subsClosed bool

	stop      chan struct{}
	loopDone  chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the hub's store, Dir/hub.db, restores its
// state and starts the commit loop. Config.KeyGroups must match the store's
// (0 takes the store's, or 128 for a new store).
func Open(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("hub: open: %w", err)
	}
	path := filepath.Join(cfg.Dir, "hub.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:        time.Second,
		NoSync:         cfg.NoSync,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		// Address space only; growing the map later makes every commit
		// that crosses a size step re-read its open nodes.
		InitialMmapSize: 1 << 30,
	})
	if err != nil {
		return nil, fmt.Errorf("hub: open %s: %w", path, err)
	}
	h := &Hub{
		cfg:          cfg,
		db:           db,
		opened:       cfg.Now(),
		resident:     int64(cfg.Resident / time.Millisecond),
		residentFrom: math.MinInt64,
		parking:      parking{oldest: math.MaxInt64},
		edgeIdx:      map[string]int32{},
		next:         make(chan struct{}),
		subs:         map[*subscriber]struct{}{},
		stop:         make(chan struct{}),
		loopDone:     make(chan struct{}),
	}
	if err := h.restore(); err != nil {
		db.Close()
		return nil, fmt.Errorf("hub: open %s: %w", path, err)
	}
	go h.loop()
	return h, nil
}

// loop commits every CommitInterval until Close.
func (h *Hub) loop() {
	defer close(h.loopDone)
	t := time.NewTicker(h.cfg.CommitInterval)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
			_ = h.Commit() // logged and retried by the next commit
		}
	}
}

// Acked returns the edge's epoch and the highest sequence of it that is
// durable, and a channel closed at the next commit (or at Close), after
// which they may have changed. An unknown edge has epoch and seq 0.
func (h *Hub) Acked(edgeID string) (epoch, seq uint64, next <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i, ok := h.edgeIdx[edgeID]; ok {
		e := h.edges[i]
		return e.epoch, e.ackedSeq(), h.next
	}
	return 0, 0, h.next
}

// Pipelines describes what the hub merges: the local pipelines in Config
// order, then one entry per class of managed revisions, in the order the
// hub learned them.
func (h *Hub) Pipelines() []PipelineInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	pipes := h.cat.Load().pipes
	out := make([]PipelineInfo, len(pipes))
	for i, pp := range pipes {
		out[i] = PipelineInfo{Pipeline: pp.p, Class: pp.class, Revisions: slices.Clone(pp.revisions),
			Watermark: pp.wm, HasWatermark: pp.hasWM, Results: pp.results}
	}
	return out
}

// Pipeline returns the spec of what a query or subscription of name
// reads: its latest managed revision's (whose class Query and Subscribe
// pick), or its local pipeline's; nil when the hub knows neither.
func (h *Hub) Pipeline(name string) *operators.Pipeline {
	return h.cat.Load().resolvedSpec(name)
}

// Edges describes every edge the hub has heard from, in order of first
// contact.
func (h *Hub) Edges() []EdgeInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.cfg.Now()
	out := make([]EdgeInfo, len(h.edges))
	for i, e := range h.edges {
		out[i] = EdgeInfo{
			ID:         e.id,
			Epoch:      e.epoch,
			AckedSeq:   e.ackedSeq(),
			LastSeen:   e.lastSeen,
			Live:       h.live(e, now),
			Watermarks: map[string]int64{},
		}
		for j, pp := range h.cat.Load().pipes {
			// An ended revision's end of time is no watermark to show.
			if w, ok := out[i].Watermarks[pp.name]; e.hasWM[j] && e.wm[j] != endOfTime && (!ok || e.wm[j] > w) {
				out[i].Watermarks[pp.name] = e.wm[j]
			}
		}
	}
	return out
}

// Status returns the counters and health.
func (h *Hub) Status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.stats
	st.Closed = h.closed
	now := h.cfg.Now()
	st.EdgesKnown = len(h.edges)
	for _, e := range h.edges {
		if h.live(e, now) {
			st.EdgesLive++
		}
	}
	for _, pp := range h.cat.Load().pipes {
		st.WindowsResident += pp.nwin
	}
	st.OpenWindows = st.WindowsResident
	st.Clamps = h.clamps.recent(now)
	st.Refusals = h.refusals.recent(now)
	st.EpochRefusals = h.epochs.recent(now)
	st.Parked = h.parkedStatus()
	st.ArchivePending = h.arch.pending()
	return st
}

// Close stops the commit loop, commits what was applied, closes the
// subscriptions and the store. Apply and Hello fail with ErrClosed from
// the moment Close starts. Close is idempotent.
func (h *Hub) Close() error {
	h.closeOnce.Do(func() {
		h.mu.Lock()
		h.closed = true
		h.mu.Unlock()
		close(h.stop)
		<-h.loopDone
		h.commitMu.Lock()
		err := h.commitLocked()
		h.closeErr = errors.Join(err, h.db.Close())
		h.dbClosed = true
		h.commitMu.Unlock()
		h.mu.Lock()
		close(h.next)
		h.mu.Unlock()
		h.closeSubs()
	})
	return h.closeErr
}
