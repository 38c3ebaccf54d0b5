package wire_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // a compressor beside zstd
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/runnel-io/runnel/hub/server/wire"
	"github.com/runnel-io/runnel/internal/testcert"
	"github.com/runnel-io/runnel/sync/grpczstd"
)

const echoMethod = "/wire.test.Echo/Chat"

var echoDesc = &grpc.StreamDesc{StreamName: "Chat", ServerStreams: true, ClientStreams: true}

// echo is a test handler: it answers each message with the same bytes,
// ends the stream on "end:<code>" with that code, and records what the
// streams saw.
type echo struct {
	mu     sync.Mutex
	afters int // context.AfterFunc callbacks run: one for each stream ended
	opened []*wire.Stream
	closed map[*wire.Stream]error
	order  []string // per stream: messages, then "closesend", then "closed"
	refuse error    // Open's answer, when set
}

type echoStream struct {
	e  *echo
	st *wire.Stream
}

func (e *echo) Open(st *wire.Stream) (wire.Receiver, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.refuse != nil {
		return nil, e.refuse
	}
	e.opened = append(e.opened, st)
	context.AfterFunc(st.Context(), func() {
		e.mu.Lock()
		e.afters++
		e.mu.Unlock()
	})
	return &echoStream{e: e, st: st}, nil
}

func (s *echoStream) Message(m []byte) error {
	var in wrapperspb.BytesValue
	if err := proto.Unmarshal(m, &in); err != nil {
		return status.Errorf(codes.InvalidArgument, "not a BytesValue: %v", err)
	}
	if code, ok := bytes.CutPrefix(in.Value, []byte("end:")); ok {
		var c int
		fmt.Sscan(string(code), &c)
		s.st.End(status.Error(codes.Code(c), "ended as asked"))
		return nil
	}
	if bytes.Equal(in.Value, []byte("peer")) {
		p, _ := peer.FromContext(s.st.Context())
		md, _ := metadata.FromIncomingContext(s.st.Context())
		info := fmt.Sprintf("%T token=%v", p.AuthInfo, md.Get("authorization"))
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
			info += " cn=" + ti.State.PeerCertificates[0].Subject.CommonName
		}
		return s.st.Send(wrapperspb.Bytes([]byte(info)))
	}
	return s.st.Send(&in)
}

func (s *echoStream) CloseSend() { s.st.End(nil) }

func (s *echoStream) Closed(err error) {
	s.e.mu.Lock()
	defer s.e.mu.Unlock()
	if s.e.closed == nil {
		s.e.closed = map[*wire.Stream]error{}
	}
	if _, dup := s.e.closed[s.st]; dup {
		panic("Closed twice")
	}
	s.e.closed[s.st] = err
}

func (e *echo) closedCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.closed)
}

// testServer is a wire server on loopback with an echo handler and a
// grpc-go fallback serving the health service.
type testServer struct {
	w    *wire.Server
	g    *grpc.Server
	e    *echo
	addr string
	wg   sync.WaitGroup
}

func startServer(t *testing.T, cfg wire.Config, gopts ...grpc.ServerOption) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS == nil {
		cfg.TLS = wire.ServerTLSForTest() // the TLS run's
	}
	ts := &testServer{w: wire.NewForTest(cfg), e: &echo{}, addr: lis.Addr().String()}
	ts.w.Handle(echoMethod, ts.e)
	if cfg.TLS != nil {
		gopts = append(gopts, grpc.Creds(wire.PassthroughCredentials{}))
	}
	ts.g = grpc.NewServer(gopts...)
	healthpb.RegisterHealthServer(ts.g, health.NewServer())
	ts.wg.Add(2)
	go func() { defer ts.wg.Done(); ts.w.Serve(lis) }()
	go func() { defer ts.wg.Done(); ts.g.Serve(ts.w.Fallback()) }()
	t.Cleanup(func() { ts.stop(t) })
	return ts
}

func (ts *testServer) stop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.w.Shutdown(ctx, nil); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	ts.g.Stop()
	ts.wg.Wait()
}

func dial(t *testing.T, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(clientCreds())}
	}
	c, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// clientCreds are the tests' clients' credentials: TLS in the TLS run.
func clientCreds() credentials.TransportCredentials {
	if c := wire.ClientTLSForTest(); c != nil {
		return credentials.NewTLS(c) // which clones it
	}
	return insecure.NewCredentials()
}

func chat(t *testing.T, ctx context.Context, c *grpc.ClientConn, opts ...grpc.CallOption) grpc.ClientStream {
	t.Helper()
	s, err := c.NewStream(ctx, echoDesc, echoMethod, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// payload is n bytes that differ from one message to the next.
func payload(seed, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(seed*31 + i*7)
	}
	return b
}

// TestEcho: messages of every size the flow control cuts up (empty, one
// byte, over a frame, over both windows of a stream and a connection),
// sent and echoed back in order, uncompressed and with each compressor;
// concurrent streams on one connection do not mix.
func TestEcho(t *testing.T) {
	ts := startServer(t, wire.Config{MaxRecvMsgSize: 8 << 20})
	sizes := []int{0, 1, 5, 100, 16384, 16385, 100_000, 1 << 20, 3 << 20}
	for _, comp := range []string{"", grpczstd.Name, "gzip"} {
		t.Run("compressor="+comp, func(t *testing.T) {
			conn := dial(t, ts.addr)
			ctx := testCtx(t)
			var opts []grpc.CallOption
			if comp != "" {
				opts = append(opts, grpc.UseCompressor(comp))
			}
			var wg sync.WaitGroup
			for stream := range 4 {
				wg.Go(func() {
					s := chat(t, ctx, conn, opts...)
					for i, n := range sizes {
						want := payload(stream*100+i, n)
						if err := s.SendMsg(wrapperspb.Bytes(want)); err != nil {
							t.Errorf("stream %d send %d: %v", stream, n, err)
							return
						}
						var got wrapperspb.BytesValue
						if err := s.RecvMsg(&got); err != nil {
							t.Errorf("stream %d recv %d: %v", stream, n, err)
							return
						}
						if !bytes.Equal(got.Value, want) {
							t.Errorf("stream %d: %d bytes came back as %d different ones", stream, n, len(got.Value))
						}
					}
					s.CloseSend()
					if err := s.RecvMsg(new(wrapperspb.BytesValue)); err != io.EOF {
						t.Errorf("stream %d end: %v, want OK", stream, err)
					}
				})
			}
			wg.Wait()
		})
	}
}

// TestStatusAndDetails: a stream's end carries its code, a message
// needing percent-encoding, and details; trailers-only when no message
// went before.
func TestStatusAndDetails(t *testing.T) {
	ts := startServer(t, wire.Config{})
	conn := dial(t, ts.addr)
	ctx := testCtx(t)
	ts.e.refuse = func() error {
		st, _ := status.New(codes.PermissionDenied, "refusé: 100% sure\nnot you").WithDetails(wrapperspb.String("why"))
		return st.Err()
	}()
	s := chat(t, ctx, conn)
	err := s.RecvMsg(new(wrapperspb.BytesValue))
	st := status.Convert(err)
	if st.Code() != codes.PermissionDenied || st.Message() != "refusé: 100% sure\nnot you" {
		t.Fatalf("Open's refusal came as %v", err)
	}
	if d := st.Details(); len(d) != 1 || d[0].(*wrapperspb.StringValue).GetValue() != "why" {
		t.Errorf("details %v", d)
	}
	ts.e.refuse = nil
	s = chat(t, ctx, conn)
	s.SendMsg(wrapperspb.Bytes([]byte("x")))
	if err := s.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(cmd("end:9")); err != nil {
		t.Fatal(err)
	}
	err = s.RecvMsg(new(wrapperspb.BytesValue))
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("an end after a message: %v", err)
	}
}

// cmd is a message the echo handler acts on rather than echoes.
func cmd(s string) *wrapperspb.BytesValue { return wrapperspb.Bytes([]byte(s)) }

// TestHandOff: a connection whose first call is another method goes to
// the fallback (grpc-go's health service here) and stays there: the
// wire method on it is grpc-go's unknown service; a connection opened by
// the wire method stays here: another method on it is Unimplemented.
func TestHandOff(t *testing.T) {
	ts := startServer(t, wire.Config{})
	ctx := testCtx(t)
	api := dial(t, ts.addr)
	if r, err := healthpb.NewHealthClient(api).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health through the fallback: %v %v", r, err)
	}
	s := chat(t, ctx, api)
	s.SendMsg(wrapperspb.Bytes([]byte("x")))
	if err := s.RecvMsg(new(wrapperspb.BytesValue)); status.Code(err) != codes.Unimplemented {
		t.Errorf("the wire method on a handed-off connection: %v", err)
	}
	edge := dial(t, ts.addr)
	s = chat(t, ctx, edge)
	s.SendMsg(wrapperspb.Bytes([]byte("x")))
	if err := s.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
		t.Fatal(err)
	}
	_, err := healthpb.NewHealthClient(edge).Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("another method on the wire's connection: %v", err)
	}
	// Many connections of each kind at once.
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			c, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(clientCreds()))
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			if i%2 == 0 {
				if _, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					t.Errorf("health %d: %v", i, err)
				}
				return
			}
			s, err := c.NewStream(ctx, echoDesc, echoMethod)
			if err != nil {
				t.Error(err)
				return
			}
			s.SendMsg(wrapperspb.Bytes(payload(i, 1000)))
			var got wrapperspb.BytesValue
			if err := s.RecvMsg(&got); err != nil || !bytes.Equal(got.Value, payload(i, 1000)) {
				t.Errorf("echo %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if st := ts.w.Stats(); st.HandedOff < 11 || st.Accepted < 22 {
		t.Errorf("stats %+v: want 11 connections handed off of 22", st)
	}
}

// TestTLS: the handshake here, ALPN h2, the client's verified
// certificate in the stream's peer on both sides of the hand-off (the
// fallback's through PassthroughCredentials); a failed handshake is
// reported.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcert.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := testcert.WriteClient(ca, dir, "gw-1", testcert.Client{CommonName: "gw-1"})
	if err != nil {
		t.Fatal(err)
	}
	srvCert, err := tls.LoadX509KeyPair(ca.Cert, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(ca.CA)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	var failedMu sync.Mutex
	var failed []error
	var seenCN string
	// The fallback's view of the peer, through PassthroughCredentials.
	peek := grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok {
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
				failedMu.Lock()
				seenCN = ti.State.VerifiedChains[0][0].Subject.CommonName
				failedMu.Unlock()
			}
		}
		return h(ctx, req)
	})
	ts := startServer(t, wire.Config{
		TLS: &tls.Config{Certificates: []tls.Certificate{srvCert}, NextProtos: []string{"h2"}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool},
		HandshakeFailed: func(_ net.Addr, err error) {
			failedMu.Lock()
			failed = append(failed, err)
			failedMu.Unlock()
		},
	}, peek)
	clientCert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}})
	ctx := testCtx(t)

	edge := dial(t, ts.addr, grpc.WithTransportCredentials(creds))
	s := chat(t, ctx, edge)
	s.SendMsg(cmd("peer"))
	var got wrapperspb.BytesValue
	if err := s.RecvMsg(&got); err != nil {
		t.Fatal(err)
	}
	if g := string(got.Value); g != "credentials.TLSInfo token=[] cn=gw-1" {
		t.Errorf("the wire stream's peer: %q", g)
	}

	api := dial(t, ts.addr, grpc.WithTransportCredentials(creds))
	if _, err := healthpb.NewHealthClient(api).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health over TLS through the fallback: %v", err)
	}
	failedMu.Lock()
	if seenCN != "gw-1" {
		t.Errorf("the fallback saw the client certificate of %q", seenCN)
	}
	failedMu.Unlock()

	// A client of another CA fails the handshake, which is reported.
	other := t.TempDir()
	ca2, _ := testcert.Write(other)
	bad, badKey, _ := testcert.WriteClient(ca2, other, "gw-x", testcert.Client{CommonName: "gw-x"})
	badCert, _ := tls.LoadX509KeyPair(bad, badKey)
	c := dial(t, ts.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{badCert}})))
	_, err = c.NewStream(ctx, echoDesc, echoMethod)
	if err == nil {
		s, _ := c.NewStream(ctx, echoDesc, echoMethod)
		s.SendMsg(wrapperspb.Bytes(nil))
		err = s.RecvMsg(new(wrapperspb.BytesValue))
	}
	if err == nil {
		t.Error("a certificate of another CA was taken")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		failedMu.Lock()
		n := len(failed)
		failedMu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed handshake was not reported")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLimits: a message over MaxRecvMsgSize, announced or inflated,
// ends its stream with ResourceExhausted; the connection serves on.
func TestLimits(t *testing.T) {
	ts := startServer(t, wire.Config{MaxRecvMsgSize: 64 << 10})
	conn := dial(t, ts.addr)
	ctx := testCtx(t)
	for _, comp := range []string{"", grpczstd.Name} {
		var opts []grpc.CallOption
		if comp != "" {
			opts = append(opts, grpc.UseCompressor(comp))
		}
		s := chat(t, ctx, conn, opts...)
		s.SendMsg(wrapperspb.Bytes(make([]byte, 100<<10))) // zstd takes it to a few bytes
		err := s.RecvMsg(new(wrapperspb.BytesValue))
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("compressor %q: a 100 KB message: %v", comp, err)
		}
	}
	s := chat(t, ctx, conn)
	s.SendMsg(wrapperspb.Bytes([]byte("still here")))
	if err := s.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
		t.Errorf("the connection after: %v", err)
	}
}

// TestClientCancel: a stream the client cancels ends here with Canceled
// (its Closed), and the others on the connection go on.
func TestClientCancel(t *testing.T) {
	ts := startServer(t, wire.Config{})
	conn := dial(t, ts.addr)
	ctx := testCtx(t)
	keep := chat(t, ctx, conn)
	cctx, cancel := context.WithCancel(ctx)
	gone := chat(t, cctx, conn)
	for _, s := range []grpc.ClientStream{keep, gone} {
		s.SendMsg(wrapperspb.Bytes([]byte("a")))
		if err := s.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for ts.e.closedCount() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the cancelled stream was not closed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	ts.e.mu.Lock()
	for st, err := range ts.e.closed {
		if st != ts.e.opened[1] || status.Code(err) != codes.Canceled {
			t.Errorf("closed %v with %v", st.Method(), err)
		}
	}
	ts.e.mu.Unlock()
	keep.SendMsg(wrapperspb.Bytes([]byte("b")))
	if err := keep.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
		t.Errorf("the other stream: %v", err)
	}
}

// TestShutdown: open streams end with the status given, the fallback
// stops taking connections, and every goroutine is gone.
func TestShutdown(t *testing.T) {
	ts := startServer(t, wire.Config{})
	ctx := testCtx(t)
	var streams []grpc.ClientStream
	for range 3 {
		s := chat(t, ctx, dial(t, ts.addr))
		s.SendMsg(wrapperspb.Bytes([]byte("a")))
		if err := s.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
			t.Fatal(err)
		}
		streams = append(streams, s)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := ts.w.Shutdown(sctx, status.New(codes.Unavailable, "going down")); err != nil {
		t.Fatal(err)
	}
	for _, s := range streams {
		err := s.RecvMsg(new(wrapperspb.BytesValue))
		if st := status.Convert(err); st.Code() != codes.Unavailable || st.Message() != "going down" {
			t.Errorf("a stream at shutdown: %v", err)
		}
	}
	if n := ts.e.closedCount(); n != 3 {
		t.Errorf("%d streams closed, want 3", n)
	}
	// Their contexts ended: Done closed, Err set, AfterFunc run.
	ts.e.mu.Lock()
	opened := ts.e.opened
	ts.e.mu.Unlock()
	for _, st := range opened {
		select {
		case <-st.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a stream's context is not done")
		}
		if st.Context().Err() != context.Canceled {
			t.Errorf("Err %v", st.Context().Err())
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ts.e.mu.Lock()
		n := ts.e.afters
		ts.e.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d AfterFunc callbacks ran, want 3", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestQueueBound: a client that takes no responses ends its stream at
// MaxQueued (ResourceExhausted); it holds no other stream up.
func TestQueueBound(t *testing.T) {
	ts := startServer(t, wire.Config{MaxQueued: 256 << 10})
	ctx := testCtx(t)
	// A client window of 64 KiB (fixed): the server queues the rest.
	slow := dial(t, ts.addr, grpc.WithTransportCredentials(clientCreds()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	s := chat(t, ctx, slow)
	big := payload(1, 60<<10)
	var err error
	for i := 0; i < 20 && err == nil; i++ {
		err = s.SendMsg(wrapperspb.Bytes(big))
	}
	other := chat(t, ctx, dial(t, ts.addr))
	other.SendMsg(wrapperspb.Bytes([]byte("b")))
	if err := other.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
		t.Errorf("another connection: %v", err)
	}
	for err == nil {
		err = s.RecvMsg(new(wrapperspb.BytesValue))
	}
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("the slow stream: %v, want ResourceExhausted", err)
	}
}

// flakyListener fails its first Accepts as a process out of file
// descriptors does.
type flakyListener struct {
	net.Listener
	mu    sync.Mutex
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

// TestAcceptOutOfFiles: accept failing for want of file descriptors is
// waited out, not the end of the server.
func TestAcceptOutOfFiles(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := wire.NewForTest(wire.Config{TLS: wire.ServerTLSForTest()})
	e := &echo{}
	w.Handle(echoMethod, e)
	served := make(chan error, 1)
	go func() { served <- w.Serve(&flakyListener{Listener: lis, fails: 3}) }()
	defer func() {
		w.Shutdown(context.Background(), nil)
		if err := <-served; err != wire.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	}()
	ctx := testCtx(t)
	s := chat(t, ctx, dial(t, lis.Addr().String()))
	s.SendMsg(wrapperspb.Bytes([]byte("after")))
	if err := s.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
		t.Fatalf("after three failed accepts: %v", err)
	}
}

// TestConcurrentStreams: streams on several connections at once, each
// sending messages of random sizes and ending by the client's close, its
// cancel, the handler's end, or an end from another goroutine (as the
// hub's acker ends a drained stream), while a sender goroutine answers on
// streams it picked: under -race, every echo comes back whole or the
// stream ends with a status, and every receiver is closed once (the echo
// handler panics on a second Closed).
func TestConcurrentStreams(t *testing.T) {
	ts := startServer(t, wire.Config{MaxRecvMsgSize: 1 << 20})
	ctx := testCtx(t)
	stop := make(chan struct{})
	var outside sync.WaitGroup
	outside.Go(func() { // ends and answers streams from outside their connection
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			ts.e.mu.Lock()
			var st *wire.Stream
			if n := len(ts.e.opened); n > 0 {
				st = ts.e.opened[rng.IntN(n)]
			}
			ts.e.mu.Unlock()
			switch {
			case st == nil:
			case rng.IntN(10) == 0:
				st.End(status.Error(codes.Aborted, "ended from outside"))
			default:
				st.Send(wrapperspb.Bytes([]byte("unasked")))
			}
		}
	})
	var wg sync.WaitGroup
	for c := range 6 {
		conn := dial(t, ts.addr)
		for s := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(c), uint64(s)))
				sctx, cancel := context.WithCancel(ctx)
				defer cancel()
				st, err := conn.NewStream(sctx, echoDesc, echoMethod)
				if err != nil {
					t.Error(err)
					return
				}
				how := rng.IntN(10)
				for i := range 1 + rng.IntN(15) {
					if how < 2 && i == 3 {
						cancel()
						return
					}
					if how == 2 && i == 3 {
						st.SendMsg(cmd("end:10"))
						break
					}
					want := payload(i, rng.IntN(40_000))
					if err := st.SendMsg(wrapperspb.Bytes(want)); err != nil {
						break // ended: the status comes with the next RecvMsg
					}
					for {
						var got wrapperspb.BytesValue
						if err := st.RecvMsg(&got); err != nil {
							if status.Code(err) == codes.Unknown {
								t.Errorf("a stream ended with %v", err)
							}
							return
						}
						if string(got.Value) == "unasked" {
							continue
						}
						if !bytes.Equal(got.Value, want) {
							t.Errorf("stream %d/%d: an echo of %d bytes came back as %d different ones", c, s, len(want), len(got.Value))
							return
						}
						break
					}
				}
				st.CloseSend()
				for {
					if err := st.RecvMsg(new(wrapperspb.BytesValue)); err != nil {
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(stop)
	outside.Wait()
}
