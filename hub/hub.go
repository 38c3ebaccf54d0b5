// Package hub is the hub node's core: it applies edge batches exactly once,
// merges the edges' partials per (pipeline, key, window), tracks the hub
// watermark, emits versioned results and keeps them durable in bbolt.
// The network side (gRPC, REST, auth) is hub/server; this package knows
// nothing of it beyond the batch message.
package hub

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Errors Apply and Hello return; the server maps them to gRPC codes.
var (
	// ErrFenced: the edge's epoch is older than the one the hub holds.
	ErrFenced = errors.New("hub: epoch fenced")
	// ErrGap: the batch starts past the next sequence the hub expects.
	ErrGap = errors.New("hub: sequence gap")
	// ErrBadBatch: malformed batch (unknown pipeline, corrupt state, bad
	// bounds); nothing of it was applied.
	ErrBadBatch = errors.New("hub: bad batch")
	// ErrClosed: the hub is shutting down.
	ErrClosed = errors.New("hub: closed")
)

// Config configures a Hub.
type Config struct {
	Dir            string                // data directory; the store is Dir/hub.db
	Pipelines      []*operators.Pipeline // what the hub merges, by name
	KeyGroups      int                   // default 128; fixed once the store exists
	EdgeTimeout    time.Duration         // silent longer: stops holding the watermark back (default 1m)
	Retention      time.Duration         // windows and results kept this long past the hub watermark (default 7 days)
	CommitInterval time.Duration         // group commit period (default 20ms)
	NoSync         bool                  // bbolt NoSync, for tests and benchmarks only
	Now            func() time.Time      // wall clock (default time.Now)
	Logger         *slog.Logger
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
}

// Query selects results of one pipeline.
type Query struct {
	Pipeline    string
	Key         []byte // encoded key; nil: every key
	From, To    int64  // windows with Start >= From and End <= To; To 0: unbounded
	AllVersions bool
	Limit       int    // default 1000
	After       []byte // cursor from a previous page (opaque)
}

// PipelineInfo describes a pipeline the hub merges.
type PipelineInfo struct {
	Pipeline     *operators.Pipeline
	Watermark    int64 // hub watermark; valid when HasWatermark
	HasWatermark bool
	Results      uint64 // result versions stored
}

// EdgeInfo describes an edge the hub has heard from.
type EdgeInfo struct {
	ID         string
	Epoch      uint64
	AckedSeq   uint64
	LastSeen   time.Time
	Live       bool
	Watermarks map[string]int64
}

// Status is the hub's health and counters, for /healthz and metrics.
type Status struct {
	CommitErr   string // last commit failure, "" when fine
	EdgesLive   int
	EdgesKnown  int
	Batches     uint64 // applied
	BatchesDup  uint64 // dropped as already applied
	Partials    uint64 // merged
	PartialsDup uint64 // dropped: already applied, or older than the edge's stored version
	Results     uint64 // result versions emitted
	Commits     uint64
	CommitNanos int64 // last commit duration
	OpenWindows int
}

// The methods below are the contract with hub/server; see each doc.
var _ interface {
	Hello(edgeID string, epoch, nextSeq uint64) (Resume, error)
	Apply(b *runnelv1.Batch) error
	Acked(edgeID string) (epoch, seq uint64, next <-chan struct{})
	Pipelines() []PipelineInfo
	Pipeline(name string) *operators.Pipeline
	Edges() []EdgeInfo
	Query(q Query) (rs []Result, next []byte, err error)
	Subscribe(ctx context.Context, pipeline string, key []byte) <-chan Result
	Status() Status
	Close() error
} = (*Hub)(nil)

// Hub is the hub node's core. (Stub: being built; every method fails.)
type Hub struct{}

// Open opens (creating if needed) the hub's store and restores its state.
func Open(cfg Config) (*Hub, error)                                       { return nil, ErrClosed }
func (h *Hub) Hello(edgeID string, epoch, nextSeq uint64) (Resume, error) { return Resume{}, ErrClosed }
func (h *Hub) Apply(b *runnelv1.Batch) error                              { return ErrClosed }
func (h *Hub) Acked(edgeID string) (epoch, seq uint64, next <-chan struct{}) {
	return 0, 0, nil
}
func (h *Hub) Pipelines() []PipelineInfo                           { return nil }
func (h *Hub) Pipeline(name string) *operators.Pipeline            { return nil }
func (h *Hub) Edges() []EdgeInfo                                   { return nil }
func (h *Hub) Query(q Query) (rs []Result, next []byte, err error) { return nil, nil, ErrClosed }
func (h *Hub) Subscribe(ctx context.Context, pipeline string, key []byte) <-chan Result {
	return nil
}
func (h *Hub) Status() Status { return Status{} }
func (h *Hub) Close() error   { return nil }
