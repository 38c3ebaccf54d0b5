package server_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

type controlStream = grpc.BidiStreamingClient[runnelv1.ControlRequest, runnelv1.ControlResponse]

func register(edge string) *runnelv1.ControlRequest {
	return &runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Register{Register: &runnelv1.Register{
		EdgeId: edge, Labels: map[string]string{"site": "plant-7"}, Version: "v1.2.3", Os: "linux", Arch: "arm64"}}}
}

func statusMsg(st *runnelv1.EdgeStatus) *runnelv1.ControlRequest {
	return &runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Status{Status: st}}
}

// connect opens gw's control stream with tok and registers; it returns
// once the fleet has the stream.
func connect(t *testing.T, e *env, ff *fakeFleet, ctx context.Context, tok, edge string) controlStream {
	t.Helper()
	before := ff.count("Connect")
	s, err := runnelv1.NewControlClient(e.edge).Connect(withToken(ctx, tok))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(register(edge)); err != nil {
		t.Fatal(err)
	}
	if !ff.waitFor(ctx, func() bool { return ff.count("Connect") > before }) {
		t.Fatal("the fleet never saw the Register")
	}
	return s
}

func recvDesired(t *testing.T, s controlStream) *runnelv1.DesiredSet {
	t.Helper()
	m, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if m.GetDesired() == nil {
		t.Fatalf("got %v, want a DesiredSet", m)
	}
	return m.GetDesired()
}

// TestControlStream: desired sets reach the edge in order, its statuses
// reach the core under its own id, and the edge closing its side ends
// the stream cleanly.
func TestControlStream(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	ctx := testCtx(t)
	s := connect(t, e, ff, ctx, "token-1", "gw-1")
	if c, _ := ff.last("Connect"); c.who != "gw-1" || c.args[0] != "gw-1" || fmt.Sprint(c.args[1]) != "map[site:plant-7]" {
		t.Errorf("Connect got %+v", c)
	}
	for g := uint64(1); g <= 20; g++ {
		if !ff.push("gw-1", &runnelv1.DesiredSet{Generation: g, Pipelines: []*runnelv1.DesiredPipeline{{Name: "temps", Revision: uint32(g)}}}) {
			t.Fatal("no stream to push to")
		}
	}
	for g := uint64(1); g <= 20; g++ {
		if d := recvDesired(t, s); d.Generation != g || d.Pipelines[0].Revision != uint32(g) {
			t.Fatalf("got generation %d revision %d, want %d", d.Generation, d.Pipelines[0].Revision, g)
		}
	}
	for g := uint64(1); g <= 3; g++ {
		if err := s.Send(statusMsg(&runnelv1.EdgeStatus{AppliedGeneration: g, OutboxEntries: 10 * g,
			Pipelines: []*runnelv1.PipelineStatus{{Name: "temps", Revision: 2, State: "running"}}})); err != nil {
			t.Fatal(err)
		}
	}
	if !ff.waitFor(ctx, func() bool { return len(ff.statusesOf()) == 3 }) {
		t.Fatalf("%d statuses reached the core, want 3", len(ff.statusesOf()))
	}
	for i, st := range ff.statusesOf() {
		if st.edge != "gw-1" || st.st.AppliedGeneration != uint64(i+1) || st.st.OutboxEntries != uint64(10*(i+1)) {
			t.Errorf("status %d: %s %v", i, st.edge, st.st)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := s.Recv(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("after CloseSend: %v, want EOF", err)
			}
			break
		}
	}
	// The stream's end closes the core's side (its context ends).
	if !ff.waitFor(ctx, func() bool { return !ff.push("gw-1", &runnelv1.DesiredSet{}) }) {
		t.Error("the core's channel is still open")
	}
}

// TestControlRefused: a stream that does not start with a Register of its
// own edge, or sends messages beyond the bounds, ends with the code that
// says why, and nothing of the refused message reaches the core.
func TestControlRefused(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	many := map[string]string{}
	for i := range 1001 {
		many[fmt.Sprint("k", i)] = "v"
	}
	pipes := func(n int) []*runnelv1.PipelineStatus {
		ps := make([]*runnelv1.PipelineStatus, n)
		for i := range ps {
			ps[i] = &runnelv1.PipelineStatus{Name: fmt.Sprint("p", i)}
		}
		return ps
	}
	reg := func(r *runnelv1.Register) *runnelv1.ControlRequest {
		return &runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Register{Register: r}}
	}
	for _, tc := range []struct {
		name    string
		tok     string
		msgs    []*runnelv1.ControlRequest
		code    codes.Code
		msg     string
		connect int // Connect calls that reach the core
	}{
		{"no token", "", []*runnelv1.ControlRequest{register("gw-1")}, codes.Unauthenticated, "missing bearer token", 0},
		{"unknown token", "token-9", []*runnelv1.ControlRequest{register("gw-1")}, codes.Unauthenticated, "unknown token", 0},
		{"another edge", "token-1", []*runnelv1.ControlRequest{register("gw-2")}, codes.PermissionDenied, `Register names "gw-2"`, 0},
		{"no edge id", "token-1", []*runnelv1.ControlRequest{register("")}, codes.PermissionDenied, `Register names ""`, 0},
		{"status first", "token-1", []*runnelv1.ControlRequest{statusMsg(&runnelv1.EdgeStatus{})}, codes.InvalidArgument, "first message must be a Register", 0},
		{"empty message", "token-1", []*runnelv1.ControlRequest{{}}, codes.InvalidArgument, "first message must be a Register", 0},
		{"1001 labels", "token-1", []*runnelv1.ControlRequest{reg(&runnelv1.Register{EdgeId: "gw-1", Labels: many})}, codes.InvalidArgument, "1001 labels, at most 1000", 0},
		{"long label", "token-1", []*runnelv1.ControlRequest{reg(&runnelv1.Register{EdgeId: "gw-1", Labels: map[string]string{"k": strings.Repeat("v", 257)}})}, codes.InvalidArgument, "value of 257 bytes", 0},
		{"long version", "token-1", []*runnelv1.ControlRequest{reg(&runnelv1.Register{EdgeId: "gw-1", Version: strings.Repeat("1", 300)})}, codes.InvalidArgument, "Register.version: 300 bytes", 0},
		{"register status of 257 pipelines", "token-1", []*runnelv1.ControlRequest{reg(&runnelv1.Register{EdgeId: "gw-1", Status: &runnelv1.EdgeStatus{Pipelines: pipes(257)}})},
			codes.InvalidArgument, "Register.status.pipelines: 257 pipelines, at most 256", 0},
		{"status of 257 pipelines", "token-1", []*runnelv1.ControlRequest{register("gw-1"), statusMsg(&runnelv1.EdgeStatus{Pipelines: pipes(257)})},
			codes.InvalidArgument, "257 pipelines", 1},
		{"NaN rate", "token-1", []*runnelv1.ControlRequest{register("gw-1"), statusMsg(&runnelv1.EdgeStatus{DeadPerMin: math.NaN()})},
			codes.InvalidArgument, "status.dead_per_min: NaN", 1},
		{"negative disk", "token-1", []*runnelv1.ControlRequest{register("gw-1"), statusMsg(&runnelv1.EdgeStatus{DiskUsedBytes: -1})},
			codes.InvalidArgument, "status.disk_used_bytes: -1", 1},
		{"pipeline twice", "token-1", []*runnelv1.ControlRequest{register("gw-1"), statusMsg(&runnelv1.EdgeStatus{Pipelines: []*runnelv1.PipelineStatus{{Name: "a"}, {Name: "a"}}})},
			codes.InvalidArgument, `status.pipelines[1]: pipeline "a" reported twice`, 1},
		{"huge apply error", "token-1", []*runnelv1.ControlRequest{register("gw-1"), statusMsg(&runnelv1.EdgeStatus{ApplyError: strings.Repeat("e", 70000)})},
			codes.InvalidArgument, "apply_error: 70000 bytes", 1},
		{"second register", "token-1", []*runnelv1.ControlRequest{register("gw-1"), register("gw-1")}, codes.InvalidArgument, "Register is sent once", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			if tc.tok != "" {
				ctx = withToken(ctx, tc.tok)
			}
			before := ff.count("Connect")
			s, err := runnelv1.NewControlClient(e.edge).Connect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.msgs {
				if s.Send(m) != nil {
					break
				}
			}
			for {
				if _, err = s.Recv(); err != nil {
					break
				}
			}
			wantCode(t, err, tc.code, tc.name)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%v, want %q", err, tc.msg)
			}
			if n := ff.count("Connect") - before; n != tc.connect {
				t.Errorf("%d Connect calls reached the core, want %d", n, tc.connect)
			}
		})
	}
	if n := ff.count("Status"); n != 0 {
		t.Errorf("%d refused statuses reached the core", n)
	}
}

// TestControlReplaced: a second stream of the same edge ends the first
// with Aborted; the second goes on.
func TestControlReplaced(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	ctx := testCtx(t)
	first := connect(t, e, ff, ctx, "token-1", "gw-1")
	other := connect(t, e, ff, ctx, "token-2", "gw-2")
	second := connect(t, e, ff, ctx, "token-1", "gw-1")
	_, err := first.Recv()
	wantCode(t, err, codes.Aborted, "the replaced stream")
	if !strings.Contains(err.Error(), "replaced by a newer connection") {
		t.Errorf("%v does not say why", err)
	}
	ff.push("gw-1", &runnelv1.DesiredSet{Generation: 7})
	ff.push("gw-2", &runnelv1.DesiredSet{Generation: 9})
	if d := recvDesired(t, second); d.Generation != 7 {
		t.Errorf("the newer stream got generation %d", d.Generation)
	}
	if d := recvDesired(t, other); d.Generation != 9 {
		t.Errorf("the other edge's stream got generation %d", d.Generation)
	}
}

// TestControlShutdown: Shutdown ends open control streams with
// Unavailable, at once, and leaves no goroutine behind.
func TestControlShutdown(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	ctx := testCtx(t)
	s1 := connect(t, e, ff, ctx, "token-1", "gw-1")
	s2 := connect(t, e, ff, ctx, "token-2", "gw-2")
	ff.push("gw-1", &runnelv1.DesiredSet{Generation: 1})
	recvDesired(t, s1)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	if err := e.srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("shutdown took %v", d)
	}
	for _, s := range []controlStream{s1, s2} {
		_, err := s.Recv()
		wantCode(t, err, codes.Unavailable, "control stream at shutdown")
	}
	e.conn.Close()
	e.edge.Close()
	e.http.CloseIdleConnections()
	goleak.VerifyNone(t, ignore)
}

// TestControlSlowEdge: an edge that does not read its desired sets holds
// up no other edge's (the hub queues what it does not take, never
// waiting for it), and its stream still ends, with the status of the
// refused message that ends it, with sets still queued.
func TestControlSlowEdge(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	ctx := testCtx(t)
	// Fixed 64 KiB windows: what the edge does not read stays queued at
	// the hub after 64 KiB.
	conn, err := grpc.NewClient(e.srv.GRPCAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: e.pool})),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	slowEnv := *e
	slowEnv.edge = conn
	slow := connect(t, &slowEnv, ff, ctx, "token-1", "gw-1")
	other := connect(t, e, ff, ctx, "token-2", "gw-2")
	big := strings.Repeat("x", 100<<10)
	for g := uint64(1); g <= 8; g++ {
		ff.push("gw-1", &runnelv1.DesiredSet{Generation: g, Pipelines: []*runnelv1.DesiredPipeline{{Name: "temps", Revision: 1, Spec: big}}})
	}
	// The sender takes the sets as they come (the channel holds the
	// newest only).
	for ff.queued("gw-1") > 5 {
		select {
		case <-ctx.Done():
			t.Fatalf("the sender never took set 3: %d sets queued", ff.queued("gw-1"))
		case <-time.After(time.Millisecond):
		}
	}
	ff.push("gw-2", &runnelv1.DesiredSet{Generation: 9})
	if d := recvDesired(t, other); d.Generation != 9 {
		t.Errorf("the other edge's stream got generation %d", d.Generation)
	}
	// A refused status ends the handler while its Send waits.
	if err := slow.Send(statusMsg(&runnelv1.EdgeStatus{DeadPerMin: math.NaN()})); err != nil {
		t.Fatal(err)
	}
	if !ff.waitFor(ctx, func() bool { return !ff.push("gw-1", &runnelv1.DesiredSet{}) }) {
		t.Fatal("the slow edge's stream did not end")
	}
	for {
		if _, err = slow.Recv(); err != nil {
			break
		}
	}
	wantCode(t, err, codes.InvalidArgument, "the slow edge's stream")
	conn.Close()
	e.conn.Close()
	e.edge.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	e.http.CloseIdleConnections()
	goleak.VerifyNone(t, ignore)
}
