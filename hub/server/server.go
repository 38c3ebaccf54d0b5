package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runnel-io/runnel/hub/server/wire"
	"github.com/runnel-io/runnel/internal/buildinfo"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/archive"
	_ "github.com/runnel-io/runnel/sync/grpczstd" // edges may compress batches with zstd
)

// Defaults of Config.
const (
	DefaultGRPCAddr  = "127.0.0.1:7443"
	DefaultHTTPAddr  = "127.0.0.1:7080"
	DefaultHeartbeat = 15 * time.Second
)

// maxMsgSize bounds a received gRPC message (an uplink batch).
const maxMsgSize = 16 << 20

// The HTTP/2 flow-control windows the hub grants each edge (see NewServer).
const (
	streamWindow = 1 << 20
	connWindow   = 2 << 20
)

// Keepalive: a connection silent for keepaliveTime is pinged, and closed
// when it stays silent keepaliveTimeout after; a client may ping every
// minPingInterval (edges ping after a minute without a frame from the
// hub: uplink.Keepalive).
const (
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
	minPingInterval  = 10 * time.Second
)

// writeBuffer is the size of the buffers the gRPC connections write
// through (see NewServer).
const writeBuffer = 8 << 10

// maxBatchBytes is the serialized SyncRequest the hub announces it takes
// (Limits.max_batch_bytes): maxMsgSize less a margin, so that an edge that
// sizes its batches by its own encoding never meets the gRPC limit.
const maxBatchBytes = maxMsgSize - 64<<10

// Config configures a Server. The zero value of a field is its default.
type Config struct {
	GRPCAddr string // host:port of the gRPC listener (edges and API); default DefaultGRPCAddr
	HTTPAddr string // host:port of REST, SSE, /healthz, /metrics; default DefaultHTTPAddr

	// CertFile and KeyFile (PEM) turn on TLS on both listeners. Without
	// them the server refuses to start unless Insecure is set.
	CertFile, KeyFile string
	Insecure          bool // plaintext; logged as a warning

	// ClientAuth says whether edges authenticate with a TLS client
	// certificate, verified against the CA certificates of ClientCAFile
	// (PEM), as an edge id (its subject CN, internal/edgecert) beside or
	// instead of their token. ClientAuthNone (the default, ""): the
	// gRPC listener asks for no certificate. Needs TLS. The HTTP listener
	// never asks for one (it serves no edge service).
	ClientAuth   ClientAuth
	ClientCAFile string

	// EdgeTokens maps an edge id to its bearer token. An edge may only
	// send Hellos and batches under its own id. Empty: every Sync is
	// refused.
	EdgeTokens map[string]string
	// APIToken, when set, is required (as a bearer token, or another
	// token the Fleet accepts) by the Results, Health and Fleet
	// services, REST and SSE; it has the admin role and is named "api" in
	// the audit log. Empty: the read API is open, and the Fleet's changes
	// are refused until it is set. /healthz and /metrics are always open.
	APIToken string

	// Fleet is the control plane (hub/fleet) behind the Fleet and
	// Control services; nil: both answer Unimplemented. The server never
	// closes it: whoever opened it closes it after Shutdown returns.
	Fleet FleetCore
	// FleetEdgeMetrics says when /metrics has the fleet's per-edge series:
	// EdgeMetricsAuto (the default, ""), EdgeMetricsAlways or EdgeMetricsNever.
	FleetEdgeMetrics EdgeMetrics

	// Archive is the results archive (sync/archive), nil: none. Its
	// metrics join /metrics and its status is served at
	// GET /v1/archive/status (with a reader's token, like the results).
	Archive ArchiveCore

	// PollDelay is the edges' connections' epoll loop's wait after a
	// round of reads (wire.Config.PollDelay); 0: wire's default (20 ms),
	// negative: a goroutine a connection.
	PollDelay time.Duration

	Heartbeat time.Duration // SSE comment interval; default DefaultHeartbeat
	Version   string        // reported by Health.Check (/v1/health) and /healthz; default buildinfo.Version()
	Logger    *slog.Logger  // default slog.Default()
}

// ClientAuth is Config.ClientAuth: whether edges authenticate with TLS
// client certificates.
type ClientAuth string

const (
	// ClientAuthNone: no client certificates; edges send tokens.
	ClientAuthNone ClientAuth = "none"
	// ClientAuthOptional: the gRPC listener asks for a client certificate
	// and verifies one given (a bad one fails the handshake); an edge
	// authenticates with a certificate, a token, or both of the same edge.
	ClientAuthOptional ClientAuth = "optional"
	// ClientAuthRequire: as optional, and the edge services refuse a call
	// without a verified certificate, whatever its token. API clients
	// (runnelctl, REST) need none.
	ClientAuthRequire ClientAuth = "require"
)

func (c ClientAuth) check() error {
	switch c {
	case "", ClientAuthNone, ClientAuthOptional, ClientAuthRequire:
		return nil
	}
	return fmt.Errorf("server: client auth %q: use none, optional or require", string(c))
}

// ArchiveCore is what the server needs of the results archive:
// *archive.Archiver.
type ArchiveCore interface {
	Status() archive.Status
	Collector() prometheus.Collector
}

// Server is the hub's network side. Start it, then Shutdown it; a
// Server is not restarted.
type Server struct {
	cfg     Config
	core    Core
	fleet   FleetCore // nil: no control plane
	log     *slog.Logger
	tokens  *tokens
	tls     *tls.Config // nil: plaintext
	metrics *metrics

	wire        *wire.Server // the gRPC listener: the edges' streams, the rest handed to grpc
	acks        *acker       // the uplink streams' acks
	grpc, inner *grpc.Server // grpc serves the API's connections; inner serves the gateway, in process
	innerLis    *bufconn.Listener
	innerConn   *grpc.ClientConn
	http        *http.Server
	grpcLis     net.Listener
	httpLis     net.Listener

	quit     chan struct{} // closed when Shutdown starts
	quitOnce sync.Once
	errc     chan error     // a listener that failed while serving
	wg       sync.WaitGroup // serving loops and the acker
	senders  sync.WaitGroup // control streams' outbox senders

	edgeStreams edgeStreams // open edge streams, for a reload of the tokens
}

// New checks cfg and builds a Server for core. It opens nothing; Start
// listens.
func New(core Core, cfg Config) (*Server, error) {
	cfg.GRPCAddr = cmp.Or(cfg.GRPCAddr, DefaultGRPCAddr)
	cfg.HTTPAddr = cmp.Or(cfg.HTTPAddr, DefaultHTTPAddr)
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, DefaultHeartbeat)
	cfg.Version = cmp.Or(cfg.Version, buildinfo.Version())
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.FleetEdgeMetrics.check(); err != nil {
		return nil, err
	}
	if err := cfg.ClientAuth.check(); err != nil {
		return nil, err
	}
	if cfg.ClientAuth == "" {
		cfg.ClientAuth = ClientAuthNone
	}
	s := &Server{cfg: cfg, core: core, fleet: cfg.Fleet, log: cfg.Logger, quit: make(chan struct{}), errc: make(chan error, 3)}
	var err error
	if s.tokens, err = newTokens(cfg.EdgeTokens, cfg.APIToken, cfg.Fleet, cfg.Logger); err != nil {
		return nil, fmt.Errorf("server: tokens: %w", err)
	}
	s.tokens.clientAuth = cfg.ClientAuth
	switch {
	case cfg.CertFile != "" || cfg.KeyFile != "":
		if cfg.CertFile == "" || cfg.KeyFile == "" {
			return nil, errors.New("server: TLS needs both a certificate and a key file")
		}
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("server: TLS certificate %s, key %s: %w", cfg.CertFile, cfg.KeyFile, err)
		}
		s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
	case !cfg.Insecure:
		return nil, errors.New("server: no TLS certificate and key; set them, or allow plaintext explicitly (insecure)")
	}
	grpcTLS := s.tls
	switch {
	case cfg.ClientAuth != ClientAuthNone && s.tls == nil:
		return nil, fmt.Errorf("server: client auth %s needs TLS (a certificate and key)", cfg.ClientAuth)
	case cfg.ClientAuth != ClientAuthNone && cfg.ClientCAFile == "":
		return nil, fmt.Errorf("server: client auth %s needs a client CA file", cfg.ClientAuth)
	case cfg.ClientAuth == ClientAuthNone && cfg.ClientCAFile != "":
		return nil, errors.New("server: a client CA file without client auth (optional or require)")
	case cfg.ClientAuth != ClientAuthNone:
		pem, err := os.ReadFile(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("server: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server: client CA %s holds no PEM certificate", cfg.ClientCAFile)
		}
		// Verified if given, in both modes: whether one is required is
		// the edge services' to decide (tokens.edge), so that API
		// clients on the same listener need none.
		grpcTLS = s.tls.Clone()
		grpcTLS.ClientAuth, grpcTLS.ClientCAs = tls.VerifyClientCertIfGiven, pool
	}
	s.metrics = newMetrics(core, cfg.Fleet, cfg.FleetEdgeMetrics, s.report, s.log)
	s.tokens.refused = func(reason string) { s.metrics.authRefused.WithLabelValues(reason).Inc() }
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "runnel_hub_edge_tokens",
		Help: "Edges with a token (auth.edge_tokens_file, as last loaded)."},
		func() float64 { return float64(len(s.tokens.edges.Load().list)) }))
	if cfg.Archive != nil {
		s.metrics.reg.MustRegister(cfg.Archive.Collector())
	}

	// The edges' streams are served by the wire server, which holds an
	// idle edge for one goroutine and a few KB (package wire); a
	// connection whose first call is another method is handed to grpc,
	// with the same options as below. The keepalive, windows and message
	// limit are the same for both.
	s.acks = newAcker(s)
	s.wire = wire.New(wire.Config{
		TLS:              grpcTLS,
		HandshakeFailed:  s.handshakeFailed,
		MaxRecvMsgSize:   maxMsgSize,
		StreamWindow:     streamWindow,
		ConnWindow:       connWindow,
		KeepaliveTime:    keepaliveTime,
		KeepaliveTimeout: keepaliveTimeout,
		MinPingInterval:  minPingInterval,
		PollDelay:        cfg.PollDelay,
		// An API method on an edge's connection: refused as the API
		// would refuse it (an edge's certificate or token), else told
		// where it is served.
		Unhandled: func(st *wire.Stream) error {
			if _, err := s.tokens.authorize(openContext(st), st.Method()); err != nil {
				return err
			}
			return errAPIElsewhere
		},
		Logger: s.log,
	})
	s.wire.Handle(runnelv1.Uplink_Sync_FullMethodName, uplinkHandler{s})
	if s.fleet != nil {
		s.wire.Handle(runnelv1.Control_Connect_FullMethodName, controlHandler{s})
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMsgSize),
		grpc.ChainUnaryInterceptor(s.tokens.unary),
		grpc.ChainStreamInterceptor(s.tokens.stream),
		// Clients on flaky links ping to keep NAT state; a dead one is
		// dropped after a missed ping.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPingInterval, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
		// Fixed flow-control windows: setting them turns off gRPC's
		// bandwidth-delay estimator, which answers every DATA frame it
		// samples with a PING. 1 MiB per stream carries ~5 MB/s over a
		// 200 ms link.
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
		// No HPACK dynamic table for the headers clients send (what the
		// wire server asks too, before it knows which server a
		// connection is for).
		grpc.HeaderTableSize(0),
		// grpc-go (v1.85) takes a connection's write buffer from a pool
		// for each run of writes and gives it back when it flushes: 32 KB
		// by default; larger answers go out in more writes.
		grpc.WriteBufferSize(writeBuffer),
	}
	grpcOpts := opts
	if grpcTLS != nil {
		// The wire server did the handshake; a TLS connection's reads are
		// buffered by crypto/tls already (a record at a time), so grpc-go
		// gets no read buffer of its own (32 KB a connection otherwise).
		grpcOpts = append(slices.Clip(opts), grpc.Creds(wire.PassthroughCredentials{}), grpc.ReadBufferSize(0))
	}
	s.grpc = grpc.NewServer(grpcOpts...)
	runnelv1.RegisterUplinkServer(s.grpc, edgeServiceElsewhere{})
	runnelv1.RegisterResultsServer(s.grpc, &results{s: s})
	runnelv1.RegisterHealthServer(s.grpc, &healthService{s: s})
	s.registerFleet(s.grpc, true)

	// The gateway calls an in-process server over a pipe: grpc-gateway's
	// direct (HandlerServer) mode cannot stream, and dialing our own
	// TLS listener would need a certificate valid for loopback. Same
	// interceptors, so REST requests carry and need the same token.
	s.inner = grpc.NewServer(opts...)
	runnelv1.RegisterResultsServer(s.inner, &results{s: s})
	runnelv1.RegisterHealthServer(s.inner, &healthService{s: s})
	s.registerFleet(s.inner, false)
	s.innerLis = bufconn.Listen(1 << 20)
	s.innerConn, err = grpc.NewClient("passthrough:///hub",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.innerLis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("server: gateway connection: %w", err)
	}
	handler, err := s.httpHandler()
	if err != nil {
		s.innerConn.Close()
		return nil, err
	}
	// net/http writes to its TLSConfig when it starts (HTTP/2's
	// protocols), which the wire server's handshakes read: its own copy.
	var httpTLS *tls.Config
	if s.tls != nil {
		httpTLS = s.tls.Clone()
	}
	s.http = &http.Server{Handler: handler, TLSConfig: httpTLS, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}
	return s, nil
}

// registerFleet registers the Fleet service on g and, with edges, the
// Control service (the gateway's inner server serves no edge). Without a
// fleet the interceptor answers both with errNoFleet; the Unimplemented
// servers registered then are never reached.
func (s *Server) registerFleet(g *grpc.Server, edges bool) {
	if s.fleet == nil {
		runnelv1.RegisterFleetServer(g, runnelv1.UnimplementedFleetServer{})
		if edges {
			runnelv1.RegisterControlServer(g, runnelv1.UnimplementedControlServer{})
		}
		return
	}
	runnelv1.RegisterFleetServer(g, &fleetService{s: s})
	if edges {
		runnelv1.RegisterControlServer(g, edgeServiceElsewhere{})
	}
}

// edgeServiceElsewhere answers the edge services on a connection handed
// to grpc: the wire server serves them, on connections whose first call
// is one of them (an edge's).
type edgeServiceElsewhere struct {
	runnelv1.UnimplementedUplinkServer
	runnelv1.UnimplementedControlServer
}

var errAPIElsewhere = status.Error(codes.Unimplemented, "hub: this connection's first call was an edge stream, so it serves the uplink and control streams only: call the API on a connection of its own")

var errEdgeElsewhere = status.Error(codes.Unimplemented, "hub: the uplink and control streams are served on a connection whose first call is one of them (an edge's): open a connection of its own for them")

func (edgeServiceElsewhere) Sync(grpc.BidiStreamingServer[runnelv1.SyncRequest, runnelv1.SyncResponse]) error {
	return errEdgeElsewhere
}

func (edgeServiceElsewhere) Connect(grpc.BidiStreamingServer[runnelv1.ControlRequest, runnelv1.ControlResponse]) error {
	return errEdgeElsewhere
}

// Start listens on both addresses and serves in the background. When it
// returns nil, both listeners accept connections.
func (s *Server) Start() error {
	var err error
	if s.grpcLis, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		s.innerConn.Close()
		return fmt.Errorf("server: gRPC listener: %w", err)
	}
	if s.httpLis, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		s.grpcLis.Close()
		s.innerConn.Close()
		return fmt.Errorf("server: HTTP listener: %w", err)
	}
	if s.tls == nil {
		s.log.Warn("hub: serving without TLS (insecure): tokens and results cross the network in plaintext",
			"grpc", s.grpcLis.Addr().String(), "http", s.httpLis.Addr().String())
	}
	if len(s.cfg.EdgeTokens) == 0 && s.cfg.ClientAuth == ClientAuthNone {
		s.log.Warn("hub: no edge tokens configured and no client certificates asked for; every edge is refused")
	}
	if s.fleet != nil && s.cfg.APIToken == "" {
		s.log.Warn("hub: no API token configured: the fleet's state is open to read and its changes are refused; set auth.api_token")
	}
	serve := func(name string, f func() error) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := f(); err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, wire.ErrServerClosed) {
				s.errc <- fmt.Errorf("server: %s: %w", name, err)
			}
		}()
	}
	serve("gRPC", func() error { return s.wire.Serve(s.grpcLis) })
	serve("gRPC API", func() error { return s.grpc.Serve(s.wire.Fallback()) })
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.acks.run(s.quit) }()
	serve("gateway", func() error { return s.inner.Serve(s.innerLis) })
	if s.tls != nil {
		serve("HTTPS", func() error { return s.http.ServeTLS(s.httpLis, "", "") })
	} else {
		serve("HTTP", func() error { return s.http.Serve(s.httpLis) })
	}
	s.log.Info("hub: listening", "grpc", s.grpcLis.Addr().String(), "http", s.httpLis.Addr().String(), "tls", s.tls != nil, "client_auth", string(s.cfg.ClientAuth))
	return nil
}

// GRPCAddr and HTTPAddr return the listeners' addresses (useful with
// port 0); nil before Start.
func (s *Server) GRPCAddr() net.Addr { return addr(s.grpcLis) }
func (s *Server) HTTPAddr() net.Addr { return addr(s.httpLis) }

func addr(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}

// Err reports a listener that stopped serving on its own (the server is
// then no longer whole: shut it down).
func (s *Server) Err() <-chan error { return s.errc }

// Serve starts the server, serves until ctx ends or a listener fails, and
// then shuts down, giving connections up to grace to finish.
func (s *Server) Serve(ctx context.Context, grace time.Duration) error {
	if err := s.Start(); err != nil {
		return err
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-s.errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return errors.Join(err, s.Shutdown(sctx))
}

// Shutdown stops the server: uplink and control streams end with
// Unavailable (edges reconnect to the next hub or retry), subscriptions and SSE streams end,
// in-flight unary calls finish until ctx ends, and then everything is
// cut. It returns once every goroutine the server started has stopped;
// after that the core and the fleet may be closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.quitOnce.Do(func() { close(s.quit) })
	var errs []error
	if err := s.wire.Shutdown(ctx, status.Convert(errShutdown)); err != nil {
		errs = append(errs, fmt.Errorf("server: edge connections shutdown: %w", err))
	}
	if s.grpcLis != nil {
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("server: HTTP shutdown: %w", err))
			s.http.Close()
		}
	}
	for _, g := range []*grpc.Server{s.grpc, s.inner} {
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			g.Stop()
			<-done
			errs = append(errs, fmt.Errorf("server: gRPC shutdown: %w", ctx.Err()))
		}
	}
	s.innerConn.Close()
	s.wg.Wait()
	// Every control stream has ended (the wire server's Shutdown), so no
	// sender starts any more.
	s.senders.Wait()
	return errors.Join(errs...)
}

// handshakeFailed counts (and logs) the gRPC listener's failed TLS
// handshakes: a client certificate the CA did not sign, or one expired,
// fails there, before any call the interceptor could count.
func (s *Server) handshakeFailed(remote net.Addr, err error) {
	s.metrics.handshakes.Inc()
	// A refused certificate is the operator's to see; a scanner or a
	// client that hung up is not worth more than debug.
	lvl := slog.LevelDebug
	if strings.Contains(err.Error(), "certificate") {
		lvl = slog.LevelWarn
	}
	s.log.Log(context.Background(), lvl, "hub: TLS handshake failed", "remote", remote.String(), "err", err)
}
