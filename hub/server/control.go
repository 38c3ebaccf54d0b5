package server

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/hub/server/wire"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

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

// controlHandler serves Control.Connect on the wire server: one stream
// per connected edge, Register first (naming the token's edge), then
// FleetCore.Connect's desired sets out, in order, and the edge's statuses
// in, each passed to FleetCore.Status on the connection's goroutine. It
// ends when the core closes the channel (another connection of the edge
// replaced this one: Aborted), when the edge closes its side (OK), when a
// message is refused (InvalidArgument, PermissionDenied) or on Shutdown
// (Unavailable). An idle stream has no goroutine: the desired sets are
// sent by an outbox that starts one only while it has a set to send.
type controlHandler struct{ s *Server }

func (h controlHandler) Open(st *wire.Stream) (wire.Receiver, error) {
	ctx, err := h.s.tokens.authorize(openContext(st), st.Method())
	if err != nil {
		return nil, err
	}
	h.s.edgeStreams.add(st, presentedBy(ctx))
	return newControlStream(h.s, st, edgeOf(ctx)), nil
}

func newControlStream(s *Server, st edgeStream, edge string) *controlStream {
	return &controlStream{s: s, st: st, edge: edge, out: &outbox{st: st, wg: &s.senders}}
}

// controlStream is one edge's control stream.
type controlStream struct {
	s          *Server
	st         edgeStream
	edge       string
	out        *outbox
	registered bool // the connection's goroutine only
	// gauge is 0 until Register, 1 while counted in the control streams
	// gauge, 2 once Closed: a stream ended while it registered is not
	// counted.
	gauge atomic.Int32
}

func (c *controlStream) Message(m []byte) error {
	var req runnelv1.ControlRequest
	if err := proto.Unmarshal(m, &req); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	s := c.s
	if !c.registered {
		reg := req.GetRegister()
		switch {
		case reg == nil:
			return status.Error(codes.InvalidArgument, "control: the first message must be a Register")
		case reg.EdgeId != c.edge:
			s.metrics.refused.Inc()
			return status.Errorf(codes.PermissionDenied, "control: this stream is edge %s's (by its token or client certificate); Register names %q", c.edge, reg.EdgeId)
		}
		if err := checkRegister(reg); err != nil {
			return err
		}
		// The channel closes when the stream's context ends, which is
		// when the stream does.
		desired, err := s.fleet.Connect(c.st.Context(), c.edge, reg, c.out.notify)
		if err != nil {
			return s.fleetError("Control.Connect", err)
		}
		c.registered = true
		if c.gauge.CompareAndSwap(0, 1) {
			s.metrics.control.Inc()
		}
		s.log.Debug("hub: control stream open", "edge", c.edge, "version", reg.Version)
		c.out.start(desired)
		return nil
	}
	st := req.GetStatus()
	if st == nil {
		return status.Error(codes.InvalidArgument, "control: expected an EdgeStatus; Register is sent once, first")
	}
	if err := checkStatus("status", st); err != nil {
		return err
	}
	if err := s.fleet.Status(c.edge, st); err != nil {
		return s.fleetError("Control.Status", err)
	}
	return nil
}

// CloseSend: the edge closed its side; the stream ends OK.
func (c *controlStream) CloseSend() { c.st.End(nil) }

func (c *controlStream) Closed(err error) {
	c.s.edgeStreams.remove(c.st)
	if c.gauge.Swap(2) == 1 {
		c.s.metrics.control.Dec()
	}
	c.out.close()
	if st, ok := status.FromError(err); ok && err != nil && st.Code() != codes.Canceled {
		c.s.log.Debug("hub: control stream ended", "edge", c.edge, "code", st.Code(), "err", st.Message())
	}
}

// outbox sends a control stream's desired sets. The core calls notify
// (with its lock held) after it puts a set on the channel or closes it;
// notify starts a sender goroutine unless one runs, and the sender sends
// every set it finds and exits when the channel is empty. So an idle
// stream has no goroutine here, and one sender at a time keeps the sets
// in order (the channel holds only the newest). Sends are queued by the
// stream, never waiting for the edge: an edge that does not read is
// ended by the stream's queue bound.
type outbox struct {
	st edgeStream
	wg *sync.WaitGroup // the senders (the Server's: Shutdown waits)

	mu      sync.Mutex
	ch      <-chan *runnelv1.DesiredSet // nil until start
	sending bool                        // a sender runs
	closed  bool                        // the stream ended: no sender starts
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

func (o *outbox) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
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
			o.st.End(errReplaced) // nothing if the stream ended first
			return                // sending stays set: the channel gives nothing more
		case ds == nil:
			continue
		}
		if err := o.st.Send(&runnelv1.ControlResponse{Msg: &runnelv1.ControlResponse_Desired{Desired: ds}}); err != nil {
			return // the stream has ended
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
	// Every status comes through here (1,000 a second at 10,000 edges):
	// nothing is formatted or allocated unless it is refused.
	at := func(i int) string { return fmt.Sprintf("%s.pipelines[%d]", where, i) }
	for i, p := range st.Pipelines {
		switch {
		case p == nil:
			return invalid("control: %s: empty", at(i))
		case p.Name == "":
			return invalid("control: %s.name: empty", at(i))
		case len(p.Name) > maxFieldBytes:
			return invalid("control: %s.name: %d bytes, at most %d", at(i), len(p.Name), maxFieldBytes)
		case len(p.State) > maxFieldBytes:
			return invalid("control: %s.state: %d bytes, at most %d", at(i), len(p.State), maxFieldBytes)
		case len(p.Error) > maxErrorBytes:
			return invalid("control: %s.error: %d bytes, at most %d", at(i), len(p.Error), maxErrorBytes)
		}
		for _, q := range st.Pipelines[:i] {
			if q.Name == p.Name {
				return invalid("control: %s: pipeline %q reported twice", at(i), p.Name)
			}
		}
	}
	return nil
}
