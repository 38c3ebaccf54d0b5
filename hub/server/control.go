package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// control serves the Control service: one Connect stream per connected
// edge, the desired sets out and the edge's status back.
type control struct {
	runnelv1.UnimplementedControlServer
	s *Server
}

// Bounds of what an edge sends on its control stream; beyond them the
// stream ends with InvalidArgument and nothing of the message reaches the
// core. An edge's labels, versions and statuses are small: these leave
// room by orders of magnitude and keep one edge from filling the hub's
// memory.
const (
	maxControlMsgBytes = 1 << 20  // a Register or an EdgeStatus, serialized
	maxLabels          = 1000     // labels of a Register
	maxLabelBytes      = 256      // a label's key or value
	maxFieldBytes      = 256      // version, os, arch, a pipeline's name or state
	maxStatusPipelines = 256      // pipelines of one EdgeStatus
	maxErrorBytes      = 64 << 10 // apply_error, a pipeline's error
)

var errReplaced = status.Error(codes.Aborted, "control: replaced by a newer connection of the same edge")

// Connect runs one edge's control stream: Register first (naming the
// token's edge), then FleetCore.Connect's desired sets out, in order, and
// the edge's statuses in, each passed to FleetCore.Status. It ends when
// the core closes the channel (another connection of the edge replaced
// this one: Aborted), when the edge closes its side (OK), when a message
// is refused (InvalidArgument, PermissionDenied) or on Shutdown
// (Unavailable).
//
// The handler is the receive loop; a stream costs no goroutine of its
// own besides it and gRPC's, which counts at 10,000 edges. The desired
// sets are sent by an outbox (below), which starts a goroutine only while
// it has a set to send, and the ends that do not come from the edge
// (replaced, Shutdown) are written as the stream's status from outside the
// handler, which ends its Recv.
func (c *control) Connect(stream grpc.BidiStreamingServer[runnelv1.ControlRequest, runnelv1.ControlResponse]) error {
	s := c.s
	edge := edgeOf(stream.Context())
	if edge == "" { // not through the interceptor: a wiring bug
		return status.Error(codes.Internal, "control: no authenticated edge")
	}
	end, ok := grpc.ServerTransportStreamFromContext(stream.Context()).(statusWriter)
	if !ok { // grpc-go changed: TestControlReplaced and TestControlShutdown say so
		return status.Error(codes.Internal, "control: the gRPC stream cannot be ended from outside its handler")
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	reg := first.GetRegister()
	switch {
	case reg == nil:
		return status.Error(codes.InvalidArgument, "control: the first message must be a Register")
	case reg.EdgeId != edge:
		s.metrics.refused.Inc()
		return status.Errorf(codes.PermissionDenied, "control: this stream is edge %s's (by its token or client certificate); Register names %q", edge, reg.EdgeId)
	}
	if err := checkRegister(reg); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	out := &outbox{ctx: ctx, stream: stream, end: end}
	desired, err := s.fleet.Connect(ctx, edge, reg, out.notify)
	if err != nil {
		return s.fleetError("Control.Connect", err)
	}
	s.metrics.control.Inc()
	defer s.metrics.control.Dec()
	s.log.Debug("hub: control stream open", "edge", edge, "version", reg.Version)
	if !s.controls.add(out, s.quit) {
		return errShutdown
	}
	out.start(desired)
	err = c.recv(ctx, stream, edge)
	s.controls.remove(out)
	// An end written from outside (replaced, Shutdown) is why Recv
	// failed: it is the stream's status, which gRPC has sent already.
	err = out.close(err)
	cancel()
	if st, ok := status.FromError(err); ok && err != nil && st.Code() != codes.Canceled {
		s.log.Debug("hub: control stream ended", "edge", edge, "code", st.Code(), "err", st.Message())
	}
	return err
}

// controls are the open control streams' outboxes, which Shutdown ends.
type controls struct {
	mu   sync.Mutex
	open map[*outbox]struct{}
}

// add adds o unless quit is closed (Shutdown has begun).
func (c *controls) add(o *outbox, quit <-chan struct{}) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-quit:
		return false
	default:
	}
	if c.open == nil {
		c.open = map[*outbox]struct{}{}
	}
	c.open[o] = struct{}{}
	return true
}

func (c *controls) remove(o *outbox) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, o)
}

// shutdown ends every open stream with errShutdown. quit is closed
// already, so no stream is added after it.
func (c *controls) shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for o := range c.open {
		o.finish(errShutdown)
	}
}

// statusWriter is what grpc-go's server transport stream (the
// ServerTransportStream in a handler's context) has beside the
// interface: WriteStatus sends the stream's status and ends it, which
// ends a Recv waiting in the handler. Whatever the handler returns
// after it is not sent.
type statusWriter interface {
	WriteStatus(*status.Status) error
}

// outbox sends a control stream's desired sets. The core calls notify
// (with its lock held) after it puts a set on the channel or closes it;
// notify starts a sender goroutine unless one runs, and the sender sends
// every set it finds and exits when the channel is empty. So an idle
// stream has no goroutine here, one sender at a time keeps the sets in
// order (the channel holds only the newest), and an edge that does not
// read blocks only its own sender, in its stream's flow control.
type outbox struct {
	ctx    context.Context // the stream's, ended when the handler returns
	stream grpc.BidiStreamingServer[runnelv1.ControlRequest, runnelv1.ControlResponse]
	end    statusWriter

	mu      sync.Mutex
	ch      <-chan *runnelv1.DesiredSet // nil until start
	sending bool                        // a sender runs
	closed  bool                        // the handler returns: no sender starts
	cause   error                       // why the stream was ended from outside
	wg      sync.WaitGroup              // the sender
}

// start hands the outbox the core's channel, which holds the edge's
// current set already.
func (o *outbox) start(ch <-chan *runnelv1.DesiredSet) {
	o.mu.Lock()
	o.ch = ch
	o.mu.Unlock()
	o.notify()
}

func (o *outbox) notify() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sending || o.closed || o.ch == nil {
		return
	}
	o.sending = true
	o.wg.Add(1)
	go o.send()
}

// send sends each set it finds on the channel. A closed channel, while
// the stream lasts, means a newer connection of the edge replaced this
// one: the stream ends with errReplaced.
func (o *outbox) send() {
	defer o.wg.Done()
	for {
		o.mu.Lock()
		var (
			ds       *runnelv1.DesiredSet
			open, ok bool
		)
		if !o.closed {
			select {
			case ds, open = <-o.ch:
				ok = true
			default:
			}
		}
		if !ok {
			o.sending = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		switch {
		case !open:
			if o.ctx.Err() == nil {
				o.finish(errReplaced)
			}
			return // sending stays set: the channel gives nothing more
		case ds == nil:
			continue
		}
		if err := o.stream.Send(&runnelv1.ControlResponse{Msg: &runnelv1.ControlResponse_Desired{Desired: ds}}); err != nil {
			return // the stream has ended: its Recv fails too
		}
	}
}

// finish ends the stream with err's status, once, unless the handler
// is returning.
func (o *outbox) finish(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed || o.cause != nil {
		return
	}
	o.cause = err
	st, _ := status.FromError(err)
	o.end.WriteStatus(st)
}

// close stops the outbox as the handler returns err: no sender starts
// any more, and one that runs is waited for. A sender may be blocked in
// Send, on the edge's flow control, which only the stream's end
// releases: then close ends the stream itself, with err's status, the
// one the handler returns. It returns the error the stream ended with:
// the one it was ended with from outside (replaced, Shutdown), if any,
// which gRPC has sent already, or else err.
func (o *outbox) close(err error) error {
	o.mu.Lock()
	o.closed = true
	sending, cause := o.sending, o.cause
	if sending && cause == nil {
		st, _ := status.FromError(err)
		if err == nil {
			st = status.New(codes.OK, "")
		}
		o.end.WriteStatus(st)
	}
	o.mu.Unlock()
	o.wg.Wait()
	if cause != nil {
		return cause
	}
	return err
}

// recv passes every status to the core until the edge closes its side
// (nil), a message is refused or the stream ends. It runs in the handler
// and is the only caller of Recv after the Register, and calls the core
// only with the stream's edge.
func (c *control) recv(ctx context.Context, stream grpc.BidiStreamingServer[runnelv1.ControlRequest, runnelv1.ControlResponse], edge string) error {
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		st := m.GetStatus()
		if st == nil {
			return status.Error(codes.InvalidArgument, "control: expected an EdgeStatus; Register is sent once, first")
		}
		if err := checkStatus("status", st); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err() // the stream is ending: the next one reports again
		}
		if err := c.s.fleet.Status(edge, st); err != nil {
			return c.s.fleetError("Control.Status", err)
		}
	}
}

// checkRegister refuses a Register beyond the bounds (InvalidArgument,
// naming the field).
func checkRegister(reg *runnelv1.Register) error {
	if n := proto.Size(reg); n > maxControlMsgBytes {
		return invalid("control: Register of %d bytes, at most %d", n, maxControlMsgBytes)
	}
	if n := len(reg.Labels); n > maxLabels {
		return invalid("control: Register.labels: %d labels, at most %d", n, maxLabels)
	}
	for k, v := range reg.Labels {
		switch {
		case k == "":
			return invalid("control: Register.labels: a label with an empty key")
		case len(k) > maxLabelBytes:
			return invalid("control: Register.labels: key %.32q... of %d bytes, at most %d", k, len(k), maxLabelBytes)
		case len(v) > maxLabelBytes:
			return invalid("control: Register.labels[%.64q]: value of %d bytes, at most %d", k, len(v), maxLabelBytes)
		}
	}
	for _, f := range []struct{ name, v string }{{"version", reg.Version}, {"os", reg.Os}, {"arch", reg.Arch}} {
		if len(f.v) > maxFieldBytes {
			return invalid("control: Register.%s: %d bytes, at most %d", f.name, len(f.v), maxFieldBytes)
		}
	}
	if reg.Status != nil {
		return checkStatus("Register.status", reg.Status)
	}
	return nil
}

// checkStatus refuses an EdgeStatus beyond the bounds, or with a count,
// size or rate that no edge reports (negative, not finite).
func checkStatus(where string, st *runnelv1.EdgeStatus) error {
	if n := proto.Size(st); n > maxControlMsgBytes {
		return invalid("control: %s of %d bytes, at most %d", where, n, maxControlMsgBytes)
	}
	if n := len(st.Pipelines); n > maxStatusPipelines {
		return invalid("control: %s.pipelines: %d pipelines, at most %d", where, n, maxStatusPipelines)
	}
	if len(st.ApplyError) > maxErrorBytes {
		return invalid("control: %s.apply_error: %d bytes, at most %d", where, len(st.ApplyError), maxErrorBytes)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"oldest_unsent_ms", st.OldestUnsentMs}, {"disk_used_bytes", st.DiskUsedBytes}, {"disk_cap_bytes", st.DiskCapBytes}} {
		if f.v < 0 {
			return invalid("control: %s.%s: %d; want >= 0", where, f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"records_per_min", st.RecordsPerMin}, {"dead_per_min", st.DeadPerMin}, {"late_per_min", st.LatePerMin}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return invalid("control: %s.%s: %v; want a finite rate >= 0", where, f.name, f.v)
		}
	}
	seen := make(map[string]bool, len(st.Pipelines))
	for i, p := range st.Pipelines {
		at := fmt.Sprintf("%s.pipelines[%d]", where, i)
		switch {
		case p == nil:
			return invalid("control: %s: empty", at)
		case p.Name == "":
			return invalid("control: %s.name: empty", at)
		case len(p.Name) > maxFieldBytes:
			return invalid("control: %s.name: %d bytes, at most %d", at, len(p.Name), maxFieldBytes)
		case seen[p.Name]:
			return invalid("control: %s: pipeline %q reported twice", at, p.Name)
		case len(p.State) > maxFieldBytes:
			return invalid("control: %s.state: %d bytes, at most %d", at, len(p.State), maxFieldBytes)
		case len(p.Error) > maxErrorBytes:
			return invalid("control: %s.error: %d bytes, at most %d", at, len(p.Error), maxErrorBytes)
		}
		seen[p.Name] = true
	}
	return nil
}
