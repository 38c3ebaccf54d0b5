package server

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
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

// fakeStream is an edgeStream that keeps what the handler sends and the
// status it ended the stream with.
type fakeStream struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	sent  []proto.Message
	ended bool
	end   error
}

func newFakeStream(ctx context.Context) *fakeStream {
	ctx, cancel := context.WithCancel(ctx)
	return &fakeStream{ctx: ctx, cancel: cancel}
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func (s *fakeStream) Send(m proto.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return errors.New("ended")
	}
	s.sent = append(s.sent, m)
	return nil
}

func (s *fakeStream) End(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.ended, s.end = true, err
		s.cancel()
	}
}

func (s *fakeStream) done() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended, s.end
}

// fuzzMessages decodes data as flags (one byte) and then messages, each
// a uvarint length and that many bytes, as the handler gets them.
func fuzzMessages(data []byte) (flags byte, msgs [][]byte) {
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
		msgs = append(msgs, data[:n])
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
// sequences of edge gw-1, as the wire server hands them over: it never
// panics, calls the core only with gw-1 (and a Register naming gw-1),
// never with a message beyond the bounds, and refuses a stream that does
// not open with gw-1's Register.
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
		stream := newFakeStream(context.Background())
		c := newControlStream(s, stream, "gw-1")
		// As the wire server does: messages in order until the stream
		// ended, then the edge's end (it went away, or closed its side),
		// then Closed.
		for _, msg := range msgs {
			if ended, _ := stream.done(); ended {
				break
			}
			if err := c.Message(msg); err != nil {
				stream.End(err)
			}
		}
		if ended, _ := stream.done(); !ended {
			if flags&1 != 0 {
				stream.End(status.Error(codes.Canceled, "the edge went away"))
			} else {
				c.CloseSend()
			}
		}
		_, err := stream.done()
		c.Closed(err)
		s.senders.Wait()

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
		if len(msgs) == 0 {
			if len(ff.edges) != 0 {
				t.Fatalf("an empty stream: %d core calls", len(ff.edges))
			}
			return
		}
		first := &runnelv1.ControlRequest{}
		switch {
		case proto.Unmarshal(msgs[0], first) != nil:
			if len(ff.edges) != 0 || err == nil {
				t.Fatalf("a stream opened by %x: %v, %d core calls", msgs[0], err, len(ff.edges))
			}
		case first.GetRegister() == nil:
			if status.Code(err) != codes.InvalidArgument || len(ff.edges) != 0 {
				t.Fatalf("a stream opened by %v: %v, %d core calls", first, err, len(ff.edges))
			}
		case first.GetRegister().EdgeId != "gw-1":
			if status.Code(err) != codes.PermissionDenied || len(ff.edges) != 0 {
				t.Fatalf("a Register of %q: %v, %d core calls", first.GetRegister().EdgeId, err, len(ff.edges))
			}
		}
	})
}
