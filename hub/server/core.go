package server

import (
	"context"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Core is what the server needs of the hub core; *hub.Hub satisfies it.
// The server never closes it: whoever opened the hub closes it after
// Shutdown returns.
type Core interface {
	Hello(edgeID string, epoch, nextSeq uint64) (hub.Resume, error)
	Apply(b *runnelv1.Batch) error
	Acked(edgeID string) (epoch, seq uint64, next <-chan struct{})
	Pipelines() []hub.PipelineInfo
	Pipeline(name string) *operators.Pipeline
	Edges() []hub.EdgeInfo
	Query(q hub.Query) (rs []hub.Result, next []byte, err error)
	Subscribe(ctx context.Context, pipeline string, key []byte) <-chan hub.Result
	Status() hub.Status
}

var _ Core = (*hub.Hub)(nil)
