package wire

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Config configures a Server. The zero value of a field is its default.
type Config struct {
	// TLS, when set, serves TLS (the handshake happens on the
	// connection's goroutine, before anything else); it should offer
	// ALPN "h2", which gRPC clients require.
	TLS *tls.Config
	// HandshakeFailed, when set, is told of every failed TLS handshake.
	HandshakeFailed func(remote net.Addr, err error)

	// MaxRecvMsgSize bounds a request message, after decompression;
	// default 4 MiB. Beyond it the stream ends with ResourceExhausted.
	MaxRecvMsgSize int
	// StreamWindow and ConnWindow are the flow-control windows granted a
	// stream and a connection: how much a client may send ahead of the
	// handlers. Defaults 1 MiB and 2 MiB.
	StreamWindow, ConnWindow uint32
	// MaxStreams bounds the streams open on one connection; default 100.
	MaxStreams int
	// StreamRate and StreamBurst bound how fast a client opens streams on
	// one connection (a token bucket: StreamBurst at once, StreamRate a
	// second after): the edges' clients open two for the connection's
	// life, and opening and resetting streams without end ("rapid reset")
	// would have the server authenticate each. Beyond, GOAWAY
	// (ENHANCE_YOUR_CALM, "too_many_streams") and the connection closes.
	// Defaults 8 and 32.
	StreamRate  float64
	StreamBurst int
	// MaxQueued bounds the response bytes a stream holds that the client
	// has not taken (its flow control, a full socket): beyond it the
	// stream ends with ResourceExhausted. Default 4 MiB.
	MaxQueued int

	// KeepaliveTime is how long a connection may be silent before the
	// server pings it, KeepaliveTimeout how long it then waits for any
	// frame before closing it. Defaults 1 min and 20 s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// MinPingInterval is the shortest interval between two client pings
	// that does not count against it: after more than two strikes the
	// server says GOAWAY (ENHANCE_YOUR_CALM, "too_many_pings", as grpc-go
	// does) and closes the connection. A response sent clears the
	// strikes. Default 10 s.
	MinPingInterval time.Duration
	// WriteTimeout bounds one write to a connection's socket; a client
	// that does not read for that long is closed. Default 20 s.
	WriteTimeout time.Duration

	// Workers is how many goroutines run the handlers' calls (Open,
	// Message, CloseSend, Unhandled), each for one connection at a time
	// while that connection waits: a connection's own goroutine then
	// needs only the stack of its reads, which the garbage collector
	// shrinks to the least, however deep a handler goes. Default 16.
	Workers int

	// PollDelay is how long the poller that serves connections past
	// their first stream (Linux) waits after a round of events
	// before it looks again: the longer, the more of what 10,000 edges
	// send one wake-up takes, and the later a message is handled (by at
	// most that). Default 20 ms; negative: no poller, every connection on
	// a goroutine of its own.
	PollDelay time.Duration

	// Unhandled, when set, says how a stream of a method without a
	// handler ends, on a connection served here: the status of the error
	// it returns (a nil error is Unimplemented). Default: Unimplemented.
	Unhandled func(st *Stream) error

	Logger *slog.Logger // default slog.Default()
}

func (c *Config) ensureDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxRecvMsgSize, 4<<20)
	def(&c.MaxStreams, 100)
	def(&c.MaxQueued, 4<<20)
	def(&c.Workers, 16)
	def(&c.StreamBurst, 32)
	if c.StreamRate <= 0 {
		c.StreamRate = 8
	}
	if c.StreamWindow < defaultWindow {
		c.StreamWindow = 1 << 20
	}
	if c.ConnWindow < defaultWindow {
		c.ConnWindow = 2 << 20
	}
	c.StreamWindow, c.ConnWindow = min(c.StreamWindow, maxWindow), min(c.ConnWindow, maxWindow)
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	dur(&c.KeepaliveTime, time.Minute)
	dur(&c.KeepaliveTimeout, 20*time.Second)
	dur(&c.MinPingInterval, 10*time.Second)
	dur(&c.WriteTimeout, 20*time.Second)
	if c.PollDelay == 0 {
		c.PollDelay = 20 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server serves the gRPC methods it has handlers for, one goroutine per
// connection, and hands every connection whose first stream is of another
// method to its fallback listener.
type Server struct {
	cfg      Config
	handlers map[string]Handler
	fallback *fallback
	settings []byte      // the server preface: a SETTINGS frame
	tls      *tls.Config // cfg.TLS, each connection's own key log (recordsTLS)

	work    chan task      // to the workers
	workers sync.WaitGroup // they end after every connection has
	poller  *poller        // nil: a goroutine a connection

	mu       sync.Mutex
	lis      net.Listener
	conns    map[*conn]struct{}
	shutdown bool
	wg       sync.WaitGroup // the accept loop, the sweeper and the connections' goroutines
	quit     chan struct{}
	stopOnce sync.Once
	stats    Stats
}

// Stats counts what a Server did; Server.Stats reads them.
type Stats struct {
	Conns     int    // connections open and served here
	Accepted  uint64 // connections accepted
	HandedOff uint64 // connections handed to the fallback
	Streams   int    // streams open
	Polled    int    // connections the poller serves (no goroutine of their own)
	// TLSRecords counts the TLS connections whose records the server's
	// own record layer took over from crypto/tls after the handshake
	// (tlsRecords).
	TLSRecords uint64
}

// ErrServerClosed is what Serve returns after Shutdown.
var ErrServerClosed = errors.New("wire: server closed")

// New returns a Server with cfg; Handle registers its methods.
func New(cfg Config) *Server {
	cfg.ensureDefaults()
	s := &Server{cfg: cfg, handlers: map[string]Handler{}, conns: map[*conn]struct{}{}, quit: make(chan struct{}),
		work: make(chan task)}
	s.fallback = &fallback{conns: make(chan net.Conn), done: make(chan struct{})}
	if cfg.TLS != nil {
		s.tls = recordsTLS(cfg.TLS)
	}
	// The preface is what grpc-go sends with the hub's options, so that a
	// connection handed to it sees the same settings twice.
	s.settings = appendSettings(nil,
		setting{settingMaxFrameSize, maxFrameSize},
		setting{settingInitialWindowSize, cfg.StreamWindow},
		setting{settingHeaderTableSize, 0})
	return s
}

// Handle serves the streams of method (its full name,
// "/package.Service/Method") with h. Call it before Serve.
func (s *Server) Handle(method string, h Handler) { s.handlers[method] = h }

// Fallback is the listener of the connections this server hands on:
// serve it with a grpc.Server (with TLS, one whose credentials take the
// connection as it is: PassthroughCredentials). Its Addr is Serve's
// listener's.
func (s *Server) Fallback() net.Listener { return s.fallback }

// Serve accepts connections on lis until Shutdown (ErrServerClosed) or
// until lis fails.
func (s *Server) Serve(lis net.Listener) error {
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		lis.Close()
		return ErrServerClosed
	}
	s.lis = lis
	s.fallback.setAddr(lis.Addr())
	s.startWorkers()
	if s.poller == nil && s.cfg.PollDelay > 0 {
		p, err := newPoller(s) // nil without epoll
		if err != nil {
			s.cfg.Logger.Warn("wire: no poller: a goroutine a connection", "err", err)
		}
		s.poller = p
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	s.wg.Add(1)
	go s.sweep()
	var delay time.Duration
	for {
		nc, err := lis.Accept()
		if err != nil {
			select {
			case <-s.quit:
				return ErrServerClosed
			default:
			}
			// Out of file descriptors (10,000 edges past a low ulimit),
			// an aborted connection: wait and go on, as net/http does;
			// the hub keeps serving the edges it has.
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("wire: accept", "err", err, "retry_in", delay)
				select {
				case <-time.After(delay):
				case <-s.quit:
					return ErrServerClosed
				}
				continue
			}
			return err
		}
		delay = 0
		c := newConn(s, nc)
		s.mu.Lock()
		if s.shutdown {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.stats.Accepted++
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Stats returns the server's counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Conns = len(s.conns)
	for c := range s.conns {
		st.Streams += c.openStreams()
		if c.pfd.Load() != nil {
			st.Polled++
		}
	}
	return st
}

func (s *Server) forget(c *conn, handedOff bool) {
	s.mu.Lock()
	delete(s.conns, c)
	if handedOff {
		s.stats.HandedOff++
	}
	s.mu.Unlock()
}

// Shutdown stops accepting, ends every open stream with st (Unavailable
// if nil), says GOAWAY and closes the connections, once what was queued
// for them is written or ctx ends. It closes the fallback listener too
// (what was handed to it is its server's to stop). It returns when every
// goroutine of the server has stopped.
func (s *Server) Shutdown(ctx context.Context, st *status.Status) error {
	if st == nil {
		st = status.New(codes.Unavailable, "wire: server shutting down")
	}
	s.mu.Lock()
	if !s.shutdown {
		s.shutdown = true
		close(s.quit)
		if s.lis != nil {
			s.lis.Close()
		}
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.fallback.Close()
	for _, c := range conns {
		c.goAway(st)
	}
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		if s.poller != nil {
			s.poller.stop()
		}
		s.stopWorkers()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	conns = conns[:0]
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns { // outside s.mu: a polled connection's close forgets it
		c.close(errShutdown)
	}
	<-done
	return ctx.Err()
}

// task is a handler's call for a worker: fn, then a word on done (if
// any); or a polled connection's turn (conn.process).
type task struct {
	fn   func()
	done chan struct{}
}

// call runs fn on a worker for c's goroutine, which waits for it; a
// polled connection is on a worker already.
func (s *Server) call(c *conn, fn func()) {
	if c.pfd.Load() != nil {
		fn()
		return
	}
	if c.done == nil {
		c.done = make(chan struct{}, 1)
	}
	s.work <- task{fn, c.done}
	<-c.done
}

// startWorkers starts the workers (Serve); stopWorkers stops them once
// no connection is left to call them (Shutdown).
func (s *Server) startWorkers() {
	for range s.cfg.Workers {
		s.workers.Go(func() {
			for t := range s.work {
				t.fn()
				if t.done != nil {
					t.done <- struct{}{}
				}
			}
		})
	}
}

func (s *Server) stopWorkers() {
	s.stopOnce.Do(func() { close(s.work) })
	s.workers.Wait()
}

var errShutdown = errors.New("wire: server shut down")

// sweepEvery is how often the keepalive sweep looks at every connection:
// a quarter of the shortest of the keepalive and write timeouts, at least
// every 5 s (the defaults' 20 s: a ping goes out 60-65 s into a silence,
// a connection is closed 20-25 s after its ping or its stalled write).
// Each look at a connection is a cache miss or two, 10,000 of them a
// sweep at 10,000 edges (it was every 2 s; the hub's CPU in runs side by
// side did not tell the two apart).
func (c *Config) sweepEvery() time.Duration {
	return max(min(c.KeepaliveTime, c.KeepaliveTimeout, c.WriteTimeout, 20*time.Second)/4, 10*time.Millisecond)
}

// sweep pings connections silent for KeepaliveTime and closes those that
// stay silent KeepaliveTimeout after, until Shutdown.
func (s *Server) sweep() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.sweepEvery())
	defer t.Stop()
	var conns []*conn
	for {
		select {
		case <-s.quit:
			return
		case now := <-t.C:
			s.mu.Lock()
			conns = conns[:0]
			for c := range s.conns {
				conns = append(conns, c)
			}
			s.mu.Unlock()
			for _, c := range conns {
				c.keepalive(now)
			}
			clear(conns)
		}
	}
}

// fallback is the listener of handed-off connections.
type fallback struct {
	conns    chan net.Conn
	done     chan struct{}
	doneOnce sync.Once
	mu       sync.Mutex
	addr     net.Addr
}

func (f *fallback) setAddr(a net.Addr) {
	f.mu.Lock()
	f.addr = a
	f.mu.Unlock()
}

func (f *fallback) Accept() (net.Conn, error) {
	select {
	case c := <-f.conns:
		return c, nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}

func (f *fallback) Close() error {
	f.doneOnce.Do(func() { close(f.done) })
	return nil
}

func (f *fallback) Addr() net.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.addr == nil {
		return &net.TCPAddr{}
	}
	return f.addr
}

// handOff gives c to the fallback's server, or closes it once the
// fallback is closed.
func (f *fallback) handOff(c net.Conn) bool {
	select {
	case f.conns <- c:
		return true
	case <-f.done:
		c.Close()
		return false
	}
}
