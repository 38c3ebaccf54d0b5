package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/server/wire"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

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

// edgeStream is what the edge services' handlers need of a stream
// (*wire.Stream): its context, and responses and an end that never wait
// for the edge.
type edgeStream interface {
	Context() context.Context
	Send(m proto.Message) error
	End(err error)
}

// uplinkHandler serves Uplink.Sync on the wire server: one stream per
// connected edge, Hello → Resume, then Batches in and Acks out. The
// stream has no goroutine of its own: its messages are handled on its
// connection's goroutine (each batch core.Apply'd in order), and the
// server's acker sends every stream's acks.
type uplinkHandler struct{ s *Server }

func (h uplinkHandler) Open(st *wire.Stream) (wire.Receiver, error) {
	ctx, err := h.s.tokens.authorize(openContext(st), st.Method())
	if err != nil {
		return nil, err
	}
	u := &uplinkStream{s: h.s, st: st, edge: edgeOf(ctx)}
	h.s.edgeStreams.add(st, presentedBy(ctx))
	return u, nil
}

// openContext is the context a wire stream is authorized in: its own,
// with the request's metadata (the token), which the stream keeps no
// longer than its Open.
func openContext(st *wire.Stream) context.Context {
	return metadata.NewIncomingContext(st.Context(), st.Header())
}

// presentedBy is what the authorized edge stream of ctx presented.
func presentedBy(ctx context.Context) presented {
	p := presented{edge: edgeOf(ctx)}
	if tok := bearer(ctx); tok != "" {
		p.token, p.sum = true, sha256.Sum256([]byte(tok))
	}
	return p
}

// uplinkStream is one edge's Sync stream.
type uplinkStream struct {
	s     *Server
	st    edgeStream
	edge  string
	hello bool // the connection's goroutine only

	// Under the acker's mu.
	open     bool        // past the Hello, until Closed
	gone     bool        // Closed
	sent     hub.Resume  // the last epoch and sequence said to the edge
	last     uint64      // the sequence of the last batch applied
	draining bool        // the edge closed its side: end once last is acked
	drain    *time.Timer // ends a draining stream after drainTimeout
}

func (u *uplinkStream) Message(m []byte) error {
	var req runnelv1.SyncRequest
	if err := proto.Unmarshal(m, &req); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	s := u.s
	if !u.hello {
		hello := req.GetHello()
		switch {
		case hello == nil:
			return status.Error(codes.InvalidArgument, "uplink: the first message must be a Hello")
		case hello.EdgeId != u.edge:
			s.metrics.refused.Inc()
			return status.Errorf(codes.PermissionDenied, "uplink: this stream is edge %s's (by its token or client certificate); Hello names %q", u.edge, hello.EdgeId)
		}
		resume, err := s.core.Hello(u.edge, hello.Epoch, hello.NextSeq)
		if err != nil {
			return coreError(err)
		}
		if err := u.st.Send(&runnelv1.SyncResponse{Msg: &runnelv1.SyncResponse_Resume{Resume: &runnelv1.Resume{Epoch: resume.Epoch, AckedSeq: resume.AckedSeq, Limits: limits}}}); err != nil {
			return err
		}
		u.hello = true
		s.acks.opened(u, resume)
		s.log.Debug("hub: edge connected", "edge", u.edge, "epoch", hello.Epoch, "next_seq", hello.NextSeq, "resume_epoch", resume.Epoch, "acked_seq", resume.AckedSeq)
		return nil
	}
	b := req.GetBatch()
	switch {
	case b == nil:
		return status.Error(codes.InvalidArgument, "uplink: expected a Batch; Hello is sent once, first")
	case b.EdgeId != u.edge:
		s.metrics.refused.Inc()
		return status.Errorf(codes.PermissionDenied, "uplink: this stream is edge %s's (by its token or client certificate); the batch names %q", u.edge, b.EdgeId)
	}
	// Pending before the batch is applied: the commit that makes it
	// durable wakes an acker that has the stream to look at already.
	s.acks.applying(u, b.LastSeq)
	if err := s.core.Apply(b); err != nil {
		return coreError(err)
	}
	if _, seq, _ := s.core.Acked(u.edge); seq >= b.LastSeq {
		s.acks.kick() // durable already (a batch resent): no commit will come for it
	}
	return nil
}

// CloseSend: the edge closed its side; the stream ends once its last
// batch is acked, or after drainTimeout.
func (u *uplinkStream) CloseSend() { u.s.acks.closeSend(u) }

func (u *uplinkStream) Closed(err error) {
	u.s.edgeStreams.remove(u.st)
	u.s.acks.closed(u)
	if st, ok := status.FromError(err); ok && err != nil && st.Code() != codes.Canceled {
		u.s.log.Debug("hub: edge stream ended", "edge", u.edge, "code", st.Code(), "err", st.Message())
	}
}

// drainTimeout bounds how long a stream the edge closed waits for the ack
// of its last batch (a commit interval or two, normally).
const drainTimeout = 5 * time.Second

// acker sends every uplink stream's acks: one goroutine for all of them,
// woken by each commit of the core, which looks at the streams with
// batches not yet acked and sends each an Ack when the hub's durable
// sequence for its edge moved.
type acker struct {
	s       *Server
	mu      sync.Mutex
	pending map[*uplinkStream]struct{}
	wake    chan struct{}
}

func newAcker(s *Server) *acker {
	return &acker{s: s, pending: map[*uplinkStream]struct{}{}, wake: make(chan struct{}, 1)}
}

func (a *acker) kick() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *acker) opened(u *uplinkStream, sent hub.Resume) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if u.gone {
		return // ended while it said Resume (Shutdown)
	}
	u.open, u.sent = true, sent
	a.s.metrics.streams.Inc()
}

func (a *acker) applying(u *uplinkStream, seq uint64) {
	a.mu.Lock()
	if u.open {
		u.last = seq
		a.pending[u] = struct{}{}
	}
	a.mu.Unlock()
}

func (a *acker) closeSend(u *uplinkStream) {
	a.mu.Lock()
	_, waiting := a.pending[u]
	if u.open && waiting {
		u.draining = true
		u.drain = time.AfterFunc(drainTimeout, func() { u.st.End(nil) })
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	u.st.End(nil)
}

func (a *acker) closed(u *uplinkStream) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if u.open {
		a.s.metrics.streams.Dec()
	}
	u.open, u.gone = false, true
	delete(a.pending, u)
	if u.drain != nil {
		u.drain.Stop()
	}
}

// run acks until quit is closed.
func (a *acker) run(quit <-chan struct{}) {
	var streams []*uplinkStream
	for {
		_, _, next := a.s.core.Acked("") // the next commit's signal
		a.mu.Lock()
		streams = streams[:0]
		for u := range a.pending {
			streams = append(streams, u)
		}
		a.mu.Unlock()
		for _, u := range streams {
			a.check(u)
		}
		clear(streams)
		select {
		case <-next: // nil (a core without commits) blocks: fine
		case <-a.wake:
		case <-quit:
			return
		}
	}
}

// check sends u an Ack if the hub's durable sequence for its edge moved,
// and ends a draining stream whose last batch is durable.
func (a *acker) check(u *uplinkStream) {
	epoch, seq, _ := a.s.core.Acked(u.edge)
	a.mu.Lock()
	if _, ok := a.pending[u]; !ok {
		a.mu.Unlock()
		return
	}
	send := epoch != u.sent.Epoch || seq != u.sent.AckedSeq
	if send {
		u.sent = hub.Resume{Epoch: epoch, AckedSeq: seq}
	}
	done := seq >= u.last
	if done {
		delete(a.pending, u)
	}
	end := done && u.draining
	a.mu.Unlock()
	if send {
		_ = u.st.Send(&runnelv1.SyncResponse{Msg: &runnelv1.SyncResponse_Ack{Ack: &runnelv1.Ack{Epoch: epoch, AckedSeq: seq}}})
	}
	if end {
		u.st.End(nil)
	}
}
