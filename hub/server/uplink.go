package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/hub"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// uplink serves the Uplink service: one Sync stream per connected edge.
type uplink struct {
	runnelv1.UnimplementedUplinkServer
	s *Server
}

// coreError maps the hub core's errors to the gRPC codes edges act on:
// FailedPrecondition (fenced: start a new epoch), OutOfRange (gap:
// reconnect and resume from the ack), InvalidArgument (a batch the hub
// will never take, with a Refusal detail when it is some of its partials;
// an epoch it will not adopt; a bad query), Unavailable (retry later);
// anything else is Internal.
func coreError(err error) error {
	if err == nil {
		return nil
	}
	if re := (*hub.RefusedError)(nil); errors.As(err, &re) {
		return refusal(re)
	}
	code := codes.Internal
	switch {
	case errors.Is(err, hub.ErrFenced):
		code = codes.FailedPrecondition
	case errors.Is(err, hub.ErrGap):
		code = codes.OutOfRange
	case errors.Is(err, hub.ErrBadBatch), errors.Is(err, hub.ErrBadQuery), errors.Is(err, hub.ErrBadEpoch), errors.Is(err, hub.ErrBadRevision):
		code = codes.InvalidArgument
	case errors.Is(err, hub.ErrClosed), errors.Is(err, hub.ErrArchiveFull):
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

// A Refusal detail names at most maxRefusalEntries entries, with reasons
// of at most maxReasonBytes, so that it fits in any peer's trailers; the
// edge sets those aside and resends, and the next refusal names the rest.
const (
	maxRefusalEntries = 1000
	maxReasonBytes    = 256
)

// refusal is the InvalidArgument status of a batch refused for some of its
// partials, with a runnelv1.Refusal detail naming them.
func refusal(re *hub.RefusedError) error {
	st := status.New(codes.InvalidArgument, re.Error())
	d := &runnelv1.Refusal{Entries: make([]*runnelv1.RefusedEntry, 0, min(len(re.Entries), maxRefusalEntries))}
	for _, r := range re.Entries[:min(len(re.Entries), maxRefusalEntries)] {
		reason := r.Reason
		if len(reason) > maxReasonBytes {
			reason = strings.ToValidUTF8(reason[:maxReasonBytes-3], "") + "..."
		}
		d.Entries = append(d.Entries, &runnelv1.RefusedEntry{Seq: r.Seq, Reason: reason})
	}
	if ds, err := st.WithDetails(d); err == nil {
		st = ds
	}
	return st.Err()
}

// limits are what the hub accepts in a batch, announced in every Resume.
var limits = &runnelv1.Limits{
	MaxKeyBytes:      hub.MaxKeyBytes,
	MaxStateBytes:    hub.MaxStateBytes,
	MaxBatchBytes:    maxBatchBytes,
	MaxBatchPartials: hub.MaxBatchPartials,
}

var errShutdown = status.Error(codes.Unavailable, "hub: shutting down")

// Sync runs one edge's stream: Hello → Resume, then Batches in, Acks out.
// The acker is the stream's goroutine: Sync returns only after it has
// stopped, so nothing Sends after the handler. The receive loop may be in
// Recv, which returns only once the handler has; the Server owns it and
// Shutdown waits for it.
func (u *uplink) Sync(stream grpc.BidiStreamingServer[runnelv1.SyncRequest, runnelv1.SyncResponse]) error {
	s := u.s
	edge := edgeOf(stream.Context())
	if edge == "" { // not through the interceptor: a wiring bug
		return status.Error(codes.Internal, "uplink: no authenticated edge")
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	hello := first.GetHello()
	switch {
	case hello == nil:
		return status.Error(codes.InvalidArgument, "uplink: the first message must be a Hello")
	case hello.EdgeId != edge:
		s.metrics.refused.Inc()
		return status.Errorf(codes.PermissionDenied, "uplink: this stream is edge %s's (by its token or client certificate); Hello names %q", edge, hello.EdgeId)
	}
	resume, err := s.core.Hello(edge, hello.Epoch, hello.NextSeq)
	if err != nil {
		return coreError(err)
	}
	if err := stream.Send(&runnelv1.SyncResponse{Msg: &runnelv1.SyncResponse_Resume{Resume: &runnelv1.Resume{Epoch: resume.Epoch, AckedSeq: resume.AckedSeq, Limits: limits}}}); err != nil {
		return err
	}
	s.log.Debug("hub: edge connected", "edge", edge, "epoch", hello.Epoch, "next_seq", hello.NextSeq, "resume_epoch", resume.Epoch, "acked_seq", resume.AckedSeq)
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	// The receive loop is owned by the server, not this call: it may be
	// blocked in Recv, which returns only once this handler has. Shutdown
	// waits for it.
	recvErr := make(chan error, 1)
	lastSeq := make(chan uint64, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		last, err := u.recv(ctx, stream, edge)
		if err == nil {
			lastSeq <- last
		}
		recvErr <- err
	}()
	ackDone := make(chan error, 1)
	go func() { ackDone <- u.ack(ctx, stream, edge, resume, lastSeq) }()

	select {
	case err = <-recvErr:
		if err == nil {
			// The edge closed its side: let the acker send the ack of the
			// last batch before the stream ends.
			select {
			case err = <-ackDone:
				ackDone <- err
			case <-s.quit:
			case <-time.After(drainTimeout):
			}
		}
	case err = <-ackDone:
		ackDone <- err
	case <-s.quit:
		err = errShutdown
	}
	cancel()
	if aerr := <-ackDone; err == nil {
		err = aerr
	}
	if st, ok := status.FromError(err); ok && err != nil && st.Code() != codes.Canceled {
		s.log.Debug("hub: edge stream ended", "edge", edge, "code", st.Code(), "err", st.Message())
	}
	return err
}

// drainTimeout bounds how long a stream the edge closed waits for the ack
// of its last batch (a commit interval or two, normally).
const drainTimeout = 5 * time.Second

// recv applies batches until the edge closes its side (nil, and the last
// sequence applied) or a batch fails. It is the only caller of Recv after
// the Hello.
func (u *uplink) recv(ctx context.Context, stream grpc.BidiStreamingServer[runnelv1.SyncRequest, runnelv1.SyncResponse], edge string) (uint64, error) {
	s := u.s
	var last uint64
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return last, nil
		}
		if err != nil {
			return last, err
		}
		b := m.GetBatch()
		switch {
		case b == nil:
			return last, status.Error(codes.InvalidArgument, "uplink: expected a Batch; Hello is sent once, first")
		case b.EdgeId != edge:
			s.metrics.refused.Inc()
			return last, status.Errorf(codes.PermissionDenied, "uplink: this stream is edge %s's (by its token or client certificate); the batch names %q", edge, b.EdgeId)
		}
		if ctx.Err() != nil {
			return last, ctx.Err() // the stream is ending: leave the batch to the next one
		}
		if err := s.core.Apply(b); err != nil {
			return last, coreError(err)
		}
		last = b.LastSeq
	}
}

// ack sends an Ack whenever the hub's durable sequence for the edge
// advances, until ctx ends, or, once drain gives the last sequence the
// edge sent, until that is acked. It is the only caller of Send after the
// Resume.
func (u *uplink) ack(ctx context.Context, stream grpc.BidiStreamingServer[runnelv1.SyncRequest, runnelv1.SyncResponse], edge string, sent hub.Resume, drain <-chan uint64) error {
	target, draining := uint64(0), false
	for {
		epoch, seq, next := u.s.core.Acked(edge)
		if epoch != sent.Epoch || seq != sent.AckedSeq {
			if err := stream.Send(&runnelv1.SyncResponse{Msg: &runnelv1.SyncResponse_Ack{Ack: &runnelv1.Ack{Epoch: epoch, AckedSeq: seq}}}); err != nil {
				return err
			}
			sent = hub.Resume{Epoch: epoch, AckedSeq: seq}
		}
		if draining && seq >= target {
			return nil
		}
		select {
		case <-next: // nil (a core without commits) blocks: fine
		case target = <-drain:
			draining = true
		case <-ctx.Done():
			return nil
		}
	}
}
