package server

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/hub/fleet/fleeterr"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// fuzzFleet records the edge ids the control handler calls the core
// with. Only Connect and Status are called on a control stream.
type fuzzFleet struct {
	FleetCore // nil
	replace   bool
	statusErr bool

	mu    sync.Mutex
	edges []string
	regs  []*runnelv1.Register
	sts   []*runnelv1.EdgeStatus
}

func (f *fuzzFleet) Connect(ctx context.Context, edgeID string, reg *runnelv1.Register, notify func()) (<-chan *runnelv1.DesiredSet, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.edges, f.regs = append(f.edges, edgeID), append(f.regs, reg)
	ch := make(chan *runnelv1.DesiredSet, 2)
	ch <- &runnelv1.DesiredSet{Generation: 1}
	if f.replace {
		close(ch)
	} else {
		context.AfterFunc(ctx, func() { close(ch); notify() })
	}
	return ch, nil
}

func (f *fuzzFleet) Status(edgeID string, st *runnelv1.EdgeStatus) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.edges, f.sts = append(f.edges, edgeID), append(f.sts, st)
	if f.statusErr {
		return fleeterr.ErrInvalid
	}
	return nil
}

// fakeControlStream feeds msgs to the handler, then io.EOF (or end, when
// set), and keeps what the handler sends.
type fakeControlStream struct {
	ctx  context.Context
	msgs []*runnelv1.ControlRequest
	end  error

	mu   sync.Mutex
	sent []*runnelv1.ControlResponse
}

func (s *fakeControlStream) Recv() (*runnelv1.ControlRequest, error) {
	if len(s.msgs) == 0 {
		if s.end != nil {
			return nil, s.end
		}
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *fakeControlStream) Send(m *runnelv1.ControlResponse) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, m)
	return nil
}

func (s *fakeControlStream) Context() context.Context     { return s.ctx }
func (s *fakeControlStream) SetHeader(metadata.MD) error  { return nil }
func (s *fakeControlStream) SendHeader(metadata.MD) error { return nil }
func (s *fakeControlStream) SetTrailer(metadata.MD)       {}
func (s *fakeControlStream) SendMsg(any) error            { return nil }
func (s *fakeControlStream) RecvMsg(any) error            { return nil }

// fakeTransportStream stands for grpc-go's server transport stream, which
// the handler ends from outside (a replaced stream) with WriteStatus.
type fakeTransportStream struct {
	mu  sync.Mutex
	end *status.Status
}

func (*fakeTransportStream) Method() string                  { return runnelv1.Control_Connect_FullMethodName }
func (*fakeTransportStream) SetHeader(md metadata.MD) error  { return nil }
func (*fakeTransportStream) SendHeader(md metadata.MD) error { return nil }
func (*fakeTransportStream) SetTrailer(md metadata.MD) error { return nil }

func (f *fakeTransportStream) WriteStatus(st *status.Status) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.end == nil {
		f.end = st
	}
	return nil
}

// fuzzMessages decodes data as flags (one byte) and then ControlRequests,
// each a uvarint length and that many bytes; a chunk that does not decode
// is skipped, as gRPC would have refused it before the handler.
func fuzzMessages(data []byte) (flags byte, msgs []*runnelv1.ControlRequest) {
	if len(data) == 0 {
		return 0, nil
	}
	flags, data = data[0], data[1:]
	for len(data) > 0 {
		n, k := binary.Uvarint(data)
		if k <= 0 {
			break
		}
		data = data[k:]
		if n > uint64(len(data)) {
			n = uint64(len(data))
		}
		m := &runnelv1.ControlRequest{}
		if proto.Unmarshal(data[:n], m) == nil {
			msgs = append(msgs, m)
		}
		data = data[n:]
	}
	return flags, msgs
}

func frame(flags byte, msgs ...*runnelv1.ControlRequest) []byte {
	out := []byte{flags}
	for _, m := range msgs {
		b, _ := proto.Marshal(m)
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out
}

// FuzzControlStream runs the control handler on arbitrary message
// sequences of edge gw-1: it never panics, always returns, calls the core
// only with gw-1 (and a Register naming gw-1), never with a message beyond
// the bounds, and refuses a stream that does not open with gw-1's
// Register.
func FuzzControlStream(f *testing.F) {
	reg := func(edge string, labels map[string]string) *runnelv1.ControlRequest {
		return &runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Register{Register: &runnelv1.Register{EdgeId: edge, Labels: labels, Version: "v1"}}}
	}
	st := func(s *runnelv1.EdgeStatus) *runnelv1.ControlRequest {
		return &runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Status{Status: s}}
	}
	ok := &runnelv1.EdgeStatus{AppliedGeneration: 1, Pipelines: []*runnelv1.PipelineStatus{{Name: "temps", Revision: 1, State: "running"}}}
	f.Add(frame(0, reg("gw-1", map[string]string{"site": "a"}), st(ok), st(ok)))
	f.Add(frame(1, reg("gw-1", nil), st(ok)))
	f.Add(frame(2, reg("gw-1", nil)))
	f.Add(frame(4, reg("gw-1", nil), st(ok), reg("gw-1", nil)))
	f.Add(frame(0, reg("gw-2", nil), st(ok)))
	f.Add(frame(0, st(ok), reg("gw-1", nil)))
	f.Add(frame(0, reg("gw-1", nil), st(&runnelv1.EdgeStatus{Pipelines: []*runnelv1.PipelineStatus{{Name: "a"}, {Name: "a"}}})))
	f.Add(frame(0, &runnelv1.ControlRequest{}))
	f.Add([]byte{0, 3, 0xff, 0xff, 0xff})
	f.Add([]byte{})

	log := slog.New(slog.DiscardHandler)
	m := newMetrics(nil, nil, "", nil, log)
	f.Fuzz(func(t *testing.T, data []byte) {
		flags, msgs := fuzzMessages(data)
		ff := &fuzzFleet{replace: flags&2 != 0, statusErr: flags&4 != 0}
		s := &Server{fleet: ff, log: log, quit: make(chan struct{}), metrics: m}
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), edgeKey{}, "gw-1"))
		defer cancel()
		ctx = grpc.NewContextWithServerTransportStream(ctx, &fakeTransportStream{})
		stream := &fakeControlStream{ctx: ctx, msgs: msgs}
		if flags&1 != 0 {
			stream.end = status.Error(codes.Canceled, "the edge went away")
		}
		err := (&control{s: s}).Connect(stream)
		cancel()
		s.wg.Wait()

		for _, e := range ff.edges {
			if e != "gw-1" {
				t.Fatalf("the core was called for edge %q", e)
			}
		}
		for _, r := range ff.regs {
			if r.EdgeId != "gw-1" || len(r.Labels) > maxLabels {
				t.Fatalf("the core got Register %v", r)
			}
		}
		for _, st := range ff.sts {
			if len(st.Pipelines) > maxStatusPipelines || checkStatus("status", st) != nil {
				t.Fatalf("the core got a status beyond the bounds: %v", st)
			}
		}
		switch {
		case len(msgs) == 0:
			if err == nil || len(ff.edges) != 0 {
				t.Fatalf("an empty stream: %v, %d core calls", err, len(ff.edges))
			}
		case msgs[0].GetRegister() == nil:
			if status.Code(err) != codes.InvalidArgument || len(ff.edges) != 0 {
				t.Fatalf("a stream opened by %v: %v, %d core calls", msgs[0], err, len(ff.edges))
			}
		case msgs[0].GetRegister().EdgeId != "gw-1":
			if status.Code(err) != codes.PermissionDenied || len(ff.edges) != 0 {
				t.Fatalf("a Register of %q: %v, %d core calls", msgs[0].GetRegister().EdgeId, err, len(ff.edges))
			}
		}
	})
}
