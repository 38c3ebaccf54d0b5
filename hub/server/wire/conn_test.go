package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const testMethod = "/wire.test.Echo/Chat"

// recorder checks the Receiver contract: messages and CloseSend before
// Closed, Closed once.
type checkHandler struct {
	t      testing.TB
	mu     sync.Mutex
	closed map[*Stream]bool
}

type checkStream struct {
	h  *checkHandler
	st *Stream
}

func (h *checkHandler) Open(st *Stream) (Receiver, error) {
	return &checkStream{h: h, st: st}, nil
}

func (s *checkStream) alive(what string) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.h.closed[s.st] {
		s.h.t.Errorf("%s after Closed", what)
	}
}

func (s *checkStream) Message(m []byte) error {
	s.alive("Message")
	var v wrapperspb.BytesValue
	if proto.Unmarshal(m, &v) == nil && len(v.Value) > 0 && v.Value[0] == 'e' {
		s.st.End(nil)
		return nil
	}
	return s.st.Send(&v)
}

func (s *checkStream) CloseSend() {
	s.alive("CloseSend")
	s.st.End(nil)
}

func (s *checkStream) Closed(error) {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.h.closed == nil {
		s.h.closed = map[*Stream]bool{}
	}
	if s.h.closed[s.st] {
		s.h.t.Errorf("Closed twice")
	}
	s.h.closed[s.st] = true
}

// rawClient speaks HTTP/2 frame by frame to a connection of the server.
type rawClient struct {
	t      testing.TB
	c      net.Conn
	frames chan rawFrame
	done   chan struct{}
}

type rawFrame struct {
	h frameHeader
	p []byte
}

func newRawClient(t testing.TB, c net.Conn) *rawClient {
	r := &rawClient{t: t, c: c, frames: make(chan rawFrame, 1024), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		var hdr [frameHeaderLen]byte
		for {
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			fh := parseFrameHeader(hdr[:])
			p := make([]byte, fh.length)
			if _, err := io.ReadFull(c, p); err != nil {
				return
			}
			select {
			case r.frames <- rawFrame{fh, p}:
			default: // a test that does not look
			}
		}
	}()
	return r
}

func (r *rawClient) write(b []byte) {
	r.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	r.c.Write(b)
}

// open writes the preface, SETTINGS (windows of 1 GiB: the client takes
// whatever the server sends) and HEADERS of a stream of testMethod.
func (r *rawClient) open(stream uint32) {
	b := append([]byte(clientPreface), appendSettings(nil, setting{settingInitialWindowSize, 1 << 30})...)
	b = appendWindowUpdate(b, 0, 1<<30)
	r.write(append(b, requestHeaders(stream)...))
}

func requestHeaders(stream uint32) []byte {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", testMethod}, {":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	return appendHeaders(nil, stream, buf.Bytes(), false, maxFrameSize)
}

func message(stream uint32, v []byte, end bool) []byte {
	b, _ := proto.Marshal(wrapperspb.Bytes(v))
	m := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(b)))
	return appendData(nil, stream, append(m, b...), end)
}

// waitFor returns the first frame of type typ, failing after 5 s.
func (r *rawClient) waitFor(typ uint8) rawFrame {
	r.t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case f := <-r.frames:
			if f.h.typ == typ {
				return f
			}
		case <-timeout:
			r.t.Fatalf("no frame of type %d in 5 s", typ)
		}
	}
}

// closedWithin says whether the server closed the connection within d.
func (r *rawClient) closedWithin(d time.Duration) bool {
	select {
	case <-r.done:
		return true
	case <-time.After(d):
		return false
	}
}

func startRaw(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewForTest(withTLS(cfg))
	s.Handle(testMethod, &checkHandler{t: t})
	done := make(chan struct{})
	go func() { s.Serve(lis); close(done) }()
	t.Cleanup(func() {
		s.Shutdown(t.Context(), nil)
		<-done
	})
	return s, lis.Addr().String()
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	return newRawClient(t, dialTest(t, addr))
}

// TestPolled: a connection past its first stream leaves its goroutine
// for the poller, over TLS too (but in the goroutines' run), and is
// served there: a message sent after is answered.
func TestPolled(t *testing.T) {
	s, addr := startRaw(t, Config{})
	r := dialRaw(t, addr)
	r.open(1)
	r.write(message(1, []byte("one"), false))
	r.waitFor(frameData)
	want := 1
	if goroutinesOnly {
		want = 0
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Polled != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections polled, want %d", s.Stats().Polled, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.write(message(1, []byte("two"), false))
	if f := r.waitFor(frameData); !bytes.Contains(f.p, []byte("two")) {
		t.Fatalf("answer %q", f.p)
	}
	if got := s.Stats().TLSRecords; serverTLS != nil && got != 1 {
		t.Errorf("%d TLS connections taken over by the record layer, want 1", got)
	}
}

// TestKeepalive: a silent client is pinged after KeepaliveTime and
// closed KeepaliveTimeout later; one that answers stays.
func TestKeepalive(t *testing.T) {
	_, addr := startRaw(t, Config{KeepaliveTime: 100 * time.Millisecond, KeepaliveTimeout: 200 * time.Millisecond})
	silent, answers := dialRaw(t, addr), dialRaw(t, addr)
	silent.open(1)
	answers.open(1)
	ping := answers.waitFor(framePing)
	if ping.h.has(flagAck) || !bytes.Equal(ping.p, pingData[:]) {
		t.Fatalf("not the server's ping: %v %q", ping.h, ping.p)
	}
	answers.write(appendPing(nil, true, [8]byte(ping.p)))
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case f := <-answers.frames:
				if f.h.typ == framePing && !f.h.has(flagAck) {
					answers.write(appendPing(nil, true, [8]byte(f.p)))
				}
			case <-stop:
				return
			}
		}
	}()
	defer close(stop)
	if !silent.closedWithin(2 * time.Second) {
		t.Error("a client that answers no ping is still connected after 2 s")
	}
	if answers.closedWithin(500 * time.Millisecond) {
		t.Error("a client that answers pings was closed")
	}
}

// TestKeepaliveBeforeAStream: a connection that has opened no stream yet
// is kept while it answers pings and closed when it does not; a client's
// ping then is answered here, once: the fallback does not see it.
func TestKeepaliveBeforeAStream(t *testing.T) {
	s, addr := startRaw(t, Config{KeepaliveTime: 100 * time.Millisecond, KeepaliveTimeout: 200 * time.Millisecond})
	silent := dialRaw(t, addr)
	silent.write(append([]byte(clientPreface), appendSettings(nil)...))
	if !silent.closedWithin(2 * time.Second) {
		t.Error("a client without a stream that answers no ping is still connected after 2 s")
	}

	r := dialRaw(t, addr)
	r.write(append(append([]byte(clientPreface), appendSettings(nil)...), appendPing(nil, false, [8]byte{'m', 'i', 'n', 'e'})...))
	acks := 0
	deadline := time.After(600 * time.Millisecond)
	for done := false; !done; {
		select {
		case f := <-r.frames:
			if f.h.typ == framePing && f.h.has(flagAck) && f.p[0] == 'm' {
				acks++
			}
			if f.h.typ == framePing && !f.h.has(flagAck) {
				r.write(appendPing(nil, true, [8]byte(f.p)))
			}
		case <-deadline:
			done = true
		}
	}
	if acks != 1 {
		t.Errorf("%d answers to the client's ping, want 1", acks)
	}
	if r.closedWithin(10 * time.Millisecond) {
		t.Error("a client without a stream that answers pings was closed")
	}
	// Then a stream of another method: handed off, with no ping of the
	// client's in what the fallback reads.
	handed := make(chan []byte, 1)
	go func() {
		c, err := s.Fallback().Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b := make([]byte, 4096)
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, _ := io.ReadAtLeast(c, b, len(clientPreface)+1)
		handed <- b[:n]
	}()
	r.write(requestHeadersFor(1, "/other.Service/Call"))
	select {
	case b := <-handed:
		if !bytes.HasPrefix(b, []byte(clientPreface)) || bytes.Contains(b, []byte("mine")) {
			t.Errorf("the fallback read %q", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("not handed off")
	}
}

// TestTooManyPings: a client pinging faster than MinPingInterval gets
// GOAWAY ENHANCE_YOUR_CALM "too_many_pings" after two strikes.
func TestTooManyPings(t *testing.T) {
	_, addr := startRaw(t, Config{MinPingInterval: time.Hour})
	r := dialRaw(t, addr)
	r.open(1)
	for i := range 5 {
		r.write(appendPing(nil, false, [8]byte{byte(i)}))
	}
	g := r.waitFor(frameGoAway)
	if code := binary.BigEndian.Uint32(g.p[4:]); code != codeEnhanceYourCalm || string(g.p[8:]) != "too_many_pings" {
		t.Errorf("GOAWAY %d %q", code, g.p[8:])
	}
	if !r.closedWithin(2 * time.Second) {
		t.Error("still connected")
	}
}

// TestStreamChurn: a client that opens streams and resets them as fast
// as it can ("rapid reset") is told GOAWAY (ENHANCE_YOUR_CALM,
// "too_many_streams") past the burst, and closed.
func TestStreamChurn(t *testing.T) {
	_, addr := startRaw(t, Config{StreamBurst: 10, StreamRate: 1})
	r := dialRaw(t, addr)
	r.open(1)
	var b []byte
	for id := uint32(3); id < 3+2*40; id += 2 {
		b = append(b, requestHeaders(id)...)
		b = appendRSTStream(b, id, codeCancel)
	}
	r.write(b)
	g := r.waitFor(frameGoAway)
	if code := binary.BigEndian.Uint32(g.p[4:]); code != codeEnhanceYourCalm || string(g.p[8:]) != "too_many_streams" {
		t.Errorf("GOAWAY %d %q", code, g.p[8:])
	}
	if !r.closedWithin(2 * time.Second) {
		t.Error("still connected")
	}
}

// TestProtocolErrors: each breach of the protocol ends the connection
// with GOAWAY and its code.
func TestProtocolErrors(t *testing.T) {
	_, addr := startRaw(t, Config{})
	for _, tc := range []struct {
		name  string
		frame []byte
		code  uint32
	}{
		{"DATA on stream 0", appendData(nil, 0, []byte("x"), false), codeProtocol},
		{"DATA on an idle stream", appendData(nil, 9, []byte("x"), false), codeProtocol},
		{"a frame over the limit", appendFrameHeader(make([]byte, 0, 9), maxFrameSize+1, frameData, 0, 1), codeFrameSize},
		{"HEADERS on an even stream", requestHeaders(2), codeProtocol},
		{"WINDOW_UPDATE of 0", appendWindowUpdate(nil, 0, 0), codeProtocol},
		{"SETTINGS of 5 bytes", append(appendFrameHeader(nil, 5, frameSettings, 0, 0), 0, 0, 0, 0, 0), codeFrameSize},
		{"PING of 7 bytes", append(appendFrameHeader(nil, 7, framePing, 0, 0), make([]byte, 7)...), codeFrameSize},
		{"CONTINUATION alone", appendFrameHeader(nil, 0, frameContinuation, flagEndHeaders, 1), codeProtocol},
		{"RST_STREAM of an idle stream", appendRSTStream(nil, 7, codeCancel), codeProtocol},
		{"PUSH_PROMISE", appendFrameHeader(nil, 0, framePushPromise, 0, 1), codeProtocol},
		{"a bad header block", append(appendFrameHeader(nil, 1, frameHeaders, flagEndHeaders, 3), 0xff), codeCompression},
		{"SETTINGS_MAX_FRAME_SIZE 10", appendSettings(nil, setting{settingMaxFrameSize, 10}), codeProtocol},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, addr)
			r.open(1)
			r.write(tc.frame)
			g := r.waitFor(frameGoAway)
			if code := binary.BigEndian.Uint32(g.p[4:]); code != tc.code {
				t.Errorf("GOAWAY code %d (%q), want %d", code, g.p[8:], tc.code)
			}
			if !r.closedWithin(2 * time.Second) {
				t.Error("still connected")
			}
		})
	}
}

// TestFlowControl: DATA past the connection's window is a connection
// error; the window is granted again as messages are handled.
func TestFlowControl(t *testing.T) {
	_, addr := startRaw(t, Config{StreamWindow: 1 << 16, ConnWindow: 1 << 16})
	r := dialRaw(t, addr)
	r.open(1)
	// 3 windows of messages: fine, the server grants as it goes.
	msg := message(1, make([]byte, 10_000), false)
	var got int
	for range 20 {
		r.write(msg)
	}
	timeout := time.After(5 * time.Second)
	for got < 20 {
		select {
		case f := <-r.frames:
			if f.h.typ == frameData {
				got++
			}
			if f.h.typ == frameGoAway {
				t.Fatalf("GOAWAY %d %q", binary.BigEndian.Uint32(f.p[4:]), f.p[8:])
			}
		case <-timeout:
			t.Fatalf("%d of 20 echoes", got)
		}
	}
}

// TestFlowControlViolation: DATA past the connection's window is an
// error of the connection; past a stream's, an error of the stream only.
func TestFlowControlViolation(t *testing.T) {
	s := NewForTest(Config{})
	h := &checkHandler{t: t}
	s.Handle(testMethod, h)
	s.startWorkers()
	defer s.stopWorkers()
	server, client := net.Pipe()
	defer client.Close()
	go io.Copy(io.Discard, client)
	c := newConn(s, server)
	c.dec = hpack.NewDecoder(4096, nil)
	c.streams = map[uint32]*Stream{}
	c.served = true
	c.recvAvail = 100
	c.pending = appendData(nil, 1, make([]byte, 101), false)
	var ce connError
	if err := c.readLoop(); !errors.As(err, &ce) || ce.code != codeFlowControl {
		t.Errorf("101 bytes in a window of 100: %v", err)
	}

	c.recvAvail = 1 << 20
	c.pending = requestHeaders(1)
	done := make(chan error, 1)
	go func() { done <- c.readLoop() }()
	deadline := time.Now().Add(5 * time.Second)
	for c.openStreams() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the stream did not open")
		}
		time.Sleep(time.Millisecond)
	}
	c.mu.Lock()
	st := c.streams[1]
	c.mu.Unlock()
	st.recvAvail = 10 // the reader waits on the pipe, which orders this before its next read
	client.Write(appendData(nil, 1, make([]byte, 20), false))
	for c.openStreams() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the stream past its window is still open")
		}
		time.Sleep(time.Millisecond)
	}
	h.mu.Lock()
	closed := h.closed[st]
	h.mu.Unlock()
	if !closed {
		t.Error("its receiver was not closed")
	}
	select {
	case err := <-done:
		t.Fatalf("the connection ended: %v", err)
	default:
	}
	c.close(nil)
	<-done
}

// FuzzConn feeds a connection arbitrary bytes after the preface and a
// stream of the handled method: the server never panics, keeps the
// Receiver contract, and its goroutine ends when the client hangs up.
func FuzzConn(f *testing.F) {
	f.Add(message(1, []byte("hello"), false))
	f.Add(append(message(1, []byte("a"), false), message(1, []byte("e"), true)...))
	f.Add(append(appendSettings(nil, setting{settingInitialWindowSize, 1}), appendWindowUpdate(nil, 1, 100)...))
	f.Add(append(requestHeaders(3), appendRSTStream(nil, 3, codeCancel)...))
	f.Add(appendData(nil, 1, []byte{0, 0, 0, 0, 5, 1}, true))
	f.Add(appendPing(nil, false, [8]byte{1}))
	f.Add(append(appendFrameHeader(nil, 4, frameHeaders, flagPadded, 5), 3, 0, 0, 0))
	f.Add(append(appendFrameHeader(nil, 3, frameHeaders, 0, 5), 0x82, 0x84, 0x86))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := NewForTest(Config{MaxRecvMsgSize: 1 << 16, StreamWindow: 1 << 16, ConnWindow: 1 << 16, MaxQueued: 1 << 16})
		s.fallback.Close()
		h := &checkHandler{t: t}
		s.Handle(testMethod, h)
		s.startWorkers()
		defer s.stopWorkers()
		server, client := net.Pipe()
		c := newConn(s, server)
		s.wg.Add(1)
		ended := make(chan struct{})
		go func() { c.serve(); close(ended) }()
		go io.Copy(io.Discard, client)
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		w := append([]byte(clientPreface), appendSettings(nil)...)
		w = append(w, requestHeaders(1)...)
		client.Write(append(w, data...))
		client.Close()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatal("the connection's goroutine did not end after the client hung up")
		}
		s.wg.Wait()
	})
}

var _ = strings.Contains

// TestSlowReader: a client that reads nothing while the answers fill its
// socket gets every one of them, in order, once it reads (a polled
// connection's writer waits for the poller's word that there is room);
// a client that reads nothing for WriteTimeout is closed.
func TestSlowReader(t *testing.T) {
	// Two servers: the slow reader's with the default WriteTimeout (20 s:
	// the 21 MB take a while on a loaded machine), the silent one's with
	// 1 s.
	_, addr := startRaw(t, Config{MaxQueued: 64 << 20})
	// 21 MB of answers: past both sockets' buffers (at most 4 and 6 MiB
	// here, net.ipv4.tcp_wmem and tcp_rmem). Capitals: "e…" ends a stream.
	const n, size = 1400, 15_000
	send := func(c net.Conn) chan error {
		b := append([]byte(clientPreface), appendSettings(nil, setting{settingInitialWindowSize, 1 << 30})...)
		b = appendWindowUpdate(b, 0, 1<<30)
		b = append(b, requestHeaders(1)...)
		for i := range n {
			b = append(b, message(1, bytes.Repeat([]byte{'A' + byte(i%26)}, size), false)...)
		}
		done := make(chan error, 1)
		go func() {
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			_, err := c.Write(b)
			done <- err
		}()
		return done
	}
	c := dialTest(t, addr)
	if err := <-send(c); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the server's writes meet a full socket
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var msg []byte // DATA of stream 1, gathered
	got := 0
	var hdr [frameHeaderLen]byte
	for got < n {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			t.Fatalf("after %d of %d answers: %v", got, n, err)
		}
		fh := parseFrameHeader(hdr[:])
		p := make([]byte, fh.length)
		if _, err := io.ReadFull(c, p); err != nil {
			t.Fatalf("answer %d of %d: %v", got, n, err)
		}
		if fh.typ == frameRSTStream || fh.typ == frameGoAway || fh.typ == frameHeaders && fh.has(flagEndStream) {
			t.Fatalf("after %d of %d answers: %v %q", got, n, fh, p)
		}
		if fh.typ != frameData {
			continue
		}
		for msg = append(msg, p...); len(msg) >= msgPrefixLen; {
			l := int(binary.BigEndian.Uint32(msg[1:]))
			if len(msg) < msgPrefixLen+l {
				break
			}
			var v wrapperspb.BytesValue
			if err := proto.Unmarshal(msg[msgPrefixLen:msgPrefixLen+l], &v); err != nil {
				t.Fatal(err)
			}
			if want := bytes.Repeat([]byte{'A' + byte(got%26)}, size); !bytes.Equal(v.Value, want) {
				t.Fatalf("answer %d: %.10q…, want %.10q…", got, v.Value, want)
			}
			got++
			msg = msg[msgPrefixLen+l:]
		}
	}

	c.Close()
	s, addr := startRaw(t, Config{WriteTimeout: time.Second, MaxQueued: 64 << 20})
	conns := func(want int, within time.Duration) bool {
		for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if s.Stats().Conns == want {
				return true
			}
		}
		return false
	}
	c = dialTest(t, addr)
	sent := send(c)
	if !conns(1, 5*time.Second) {
		t.Fatal("the second connection is not served")
	}
	start := time.Now()
	if !conns(0, 5*time.Second) { // WriteTimeout, and the sweep's quarter of it
		t.Fatalf("a client that read nothing for %v is still served", time.Since(start))
	}
	c.Close()
	<-sent
}

// blockingHandler echoes, but holds a message "block" until release
// closes.
type blockingHandler struct {
	release chan struct{}
	held    chan struct{} // a "block" is held
}

type blockingStream struct {
	h  *blockingHandler
	st *Stream
}

func (h *blockingHandler) Open(st *Stream) (Receiver, error) { return &blockingStream{h, st}, nil }

func (s *blockingStream) Message(m []byte) error {
	var v wrapperspb.BytesValue
	if err := proto.Unmarshal(m, &v); err != nil {
		return err
	}
	if string(v.Value) == "block" {
		s.h.held <- struct{}{}
		<-s.h.release
	}
	return s.st.Send(&v)
}

func (*blockingStream) CloseSend()   {}
func (*blockingStream) Closed(error) {}

// TestSlowHandler: a handler that holds its message holds back its own
// connection and no other (the poller calls another worker when its
// queue does not move).
func TestSlowHandler(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := NewForTest(withTLS(Config{}))
	h := &blockingHandler{release: make(chan struct{}), held: make(chan struct{}, 1)}
	s.Handle(testMethod, h)
	done := make(chan struct{})
	go func() { s.Serve(lis); close(done) }()
	defer func() {
		s.Shutdown(t.Context(), nil)
		<-done
	}()
	defer close(h.release)

	// Each message later than its stream, so that it is read from the
	// poller's queue, not with the stream's first bytes.
	a := dialRaw(t, lis.Addr().String())
	a.open(1)
	var bs []*rawClient
	for range 3 {
		b := dialRaw(t, lis.Addr().String())
		b.open(1)
		bs = append(bs, b)
	}
	time.Sleep(50 * time.Millisecond)
	// The first wakes the poller, which sleeps PollDelay after its round:
	// the held one and the next come in the next round together.
	bs[0].write(message(1, []byte("hello"), false))
	a.write(message(1, []byte("block"), false))
	for _, b := range bs[1:] {
		b.write(message(1, []byte("hello"), false))
	}
	select {
	case <-h.held:
	case <-time.After(5 * time.Second):
		t.Fatal("the blocking message was not handled")
	}
	for i, b := range bs {
		if f := b.waitFor(frameData); len(f.p) == 0 {
			t.Fatalf("connection %d: an empty answer", i)
		}
	}
}
