package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"

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
// token's edge), then FleetCore.Connect's desired sets out, each sent in
// order by the handler itself, and the edge's statuses in, each passed
// to FleetCore.Status by the receive loop. It ends when the core closes
// the channel (another connection of the edge replaced this one:
// Aborted), when the edge closes its side (OK), when a message is refused
// (InvalidArgument, PermissionDenied) or on Shutdown (Unavailable). The
// receive loop, which may sit in Recv until the handler returns, is the
// Server's (as the uplink's). A stream costs one goroutine besides
// gRPC's, which counts at 10,000 edges.
func (c *control) Connect(stream grpc.BidiStreamingServer[runnelv1.ControlRequest, runnelv1.ControlResponse]) error {
	s := c.s
	edge := edgeOf(stream.Context())
	if edge == "" { // not through the interceptor: a wiring bug
		return status.Error(codes.Internal, "control: no authenticated edge")
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
	desired, err := s.fleet.Connect(ctx, edge, reg)
	if err != nil {
		return s.fleetError("Control.Connect", err)
	}
	s.metrics.control.Inc()
	defer s.metrics.control.Dec()
	s.log.Debug("hub: control stream open", "edge", edge, "version", reg.Version)

	recvErr := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		recvErr <- c.recv(ctx, stream, edge)
	}()
	err = c.send(ctx, stream, desired, recvErr)
	cancel()
	if st, ok := status.FromError(err); ok && err != nil && st.Code() != codes.Canceled {
		s.log.Debug("hub: control stream ended", "edge", edge, "code", st.Code(), "err", st.Message())
	}
	return err
}

// send sends each desired set until ctx ends, the core closes the
// channel (which, while ctx lasts, means a newer connection of the edge
// replaced this one: errReplaced), the receive loop ends (its error) or
// Shutdown starts (errShutdown). It runs in the handler and is the only
// caller of Send.
func (c *control) send(ctx context.Context, stream grpc.BidiStreamingServer[runnelv1.ControlRequest, runnelv1.ControlResponse], desired <-chan *runnelv1.DesiredSet, recvErr <-chan error) error {
	for {
		select {
		case ds, ok := <-desired:
			switch {
			case !ok && ctx.Err() != nil:
				return nil
			case !ok:
				return errReplaced
			case ds == nil:
				continue
			}
			if err := stream.Send(&runnelv1.ControlResponse{Msg: &runnelv1.ControlResponse_Desired{Desired: ds}}); err != nil {
				return err
			}
		case err := <-recvErr:
			return err
		case <-c.s.quit:
			return errShutdown
		case <-ctx.Done():
			return nil
		}
	}
}

// recv passes every status to the core until the edge closes its side
// (nil) or a message is refused. It is the only caller of Recv after the
// Register, and calls the core only with the stream's edge.
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
