package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// DefaultAddr is where the embedded broker listens unless told otherwise:
// loopback only, the standard MQTT port.
const DefaultAddr = "127.0.0.1:1883"

// DefaultMaxInflight is Options.MaxInflight's default: the QoS 1/2 messages
// held per client, as large as MQTT's packet IDs allow (mochi's own default
// is 8192). An MQTT source subscribing to this broker should use a Receive
// Maximum this large (see the package Caveats for why).
const DefaultMaxInflight = 65535

// ErrClosed is returned by Close when the broker was already closed.
var ErrClosed = errors.New("broker: already closed")

// Options configure the embedded broker; the zero value is usable and nil
// or zero fields take the documented defaults.
type Options struct {
	// Addr is the TCP address to listen on. Default DefaultAddr. Use
	// "127.0.0.1:0" for a free port (tests), then ask Broker.Addr.
	Addr string
	// MaxInflight bounds the QoS 1/2 messages held per client (in flight
	// plus queued). Default DefaultMaxInflight.
	MaxInflight int
	// Logger receives the broker's logs. Default slog.Default().
	Logger *slog.Logger
	// Intake, if set, takes the messages clients publish in-process,
	// before the broker acknowledges them (see IntakeFunc).
	Intake IntakeFunc
}

// Stats are counters since the broker started.
type Stats struct {
	ClientsConnected int64
	MessagesReceived int64 // PUBLISH packets received from clients
	MessagesTaken    int64 // of those, taken by the intake
	MessagesSent     int64 // PUBLISH packets sent to subscribers
	Inflight         int64 // QoS 1/2 messages held now (mochi's gauge; it can dip below 0)
	InflightDropped  int64 // QoS 1/2 messages dropped: a client's MaxInflight was full
}

// Broker is a running embedded broker.
type Broker struct {
	srv    *mochi.Server
	ln     *tcpListener
	intake *intakeHook
	closed atomic.Bool
}

// Start binds opts.Addr and starts the broker. It returns once the listener
// accepts connections; ctx bounds only the start.
func Start(ctx context.Context, opts Options) (*Broker, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("broker: start: %w", err)
	}
	if opts.Addr == "" {
		opts.Addr = DefaultAddr
	}
	if opts.MaxInflight < 0 || opts.MaxInflight > 65535 {
		return nil, fmt.Errorf("broker: MaxInflight %d outside [0, 65535]", opts.MaxInflight)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxInflight == 0 {
		opts.MaxInflight = DefaultMaxInflight
	}
	caps := mochi.NewDefaultServerCapabilities()
	caps.MaximumInflight = uint16(opts.MaxInflight)
	srv := mochi.New(&mochi.Options{
		Capabilities: caps,
		// mochi's debug logs are per packet (one for every message the
		// intake takes): info and above only.
		Logger: slog.New(infoAndAbove{opts.Logger.Handler()}).With("component", "broker"),
		// The inline client routes what the intake took to the other
		// subscribers.
		InlineClient: opts.Intake != nil,
	})
	if err := srv.AddHook(new(allowAll), nil); err != nil {
		return nil, fmt.Errorf("broker: add auth hook: %w", err)
	}
	var in *intakeHook
	if opts.Intake != nil {
		in = &intakeHook{srv: srv, fn: opts.Intake, closing: make(chan struct{})}
		if err := srv.AddHook(in, nil); err != nil {
			return nil, fmt.Errorf("broker: add intake hook: %w", err)
		}
	}
	ln := &tcpListener{id: "tcp", addr: opts.Addr}
	if err := srv.AddListener(ln); err != nil {
		return nil, fmt.Errorf("broker: listen on %s: %w", opts.Addr, err)
	}
	if err := srv.Serve(); err != nil {
		_ = srv.Close()
		return nil, fmt.Errorf("broker: serve: %w", err)
	}
	return &Broker{srv: srv, ln: ln, intake: in}, nil
}

// Addr is the address the broker listens on ("127.0.0.1:1883"), with the
// real port when Options.Addr asked for port 0.
func (b *Broker) Addr() string { return b.ln.Address() }

// URL is Addr as a broker URL for the MQTT source ("mqtt://127.0.0.1:1883").
func (b *Broker) URL() string { return "mqtt://" + b.Addr() }

// Stats returns the broker's counters.
func (b *Broker) Stats() Stats {
	i := b.srv.Info.Clone()
	var taken int64
	if b.intake != nil {
		taken = b.intake.taken.Load()
	}
	return Stats{
		ClientsConnected: i.ClientsConnected,
		MessagesReceived: i.MessagesReceived,
		MessagesTaken:    taken,
		MessagesSent:     i.MessagesSent,
		Inflight:         i.Inflight,
		InflightDropped:  i.InflightDropped,
	}
}

// Close disconnects every client, stops listening and waits for the
// connection goroutines to end, or for ctx. Closing twice returns
// ErrClosed.
func (b *Broker) Close(ctx context.Context) error {
	if !b.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	if b.intake != nil {
		close(b.intake.closing)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.srv.Close() // always nil in mochi v2.7.9
		b.ln.wait()
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("broker: close: %w", ctx.Err())
	}
}

// allowAll lets every client connect, publish and subscribe. It is what
// mochi's hooks/auth.AllowHook does; that package also pulls in a YAML
// ledger (and gopkg.in/yaml.v3) that the edge does not need.
type allowAll struct{ mochi.HookBase }

func (*allowAll) ID() string { return "allow-all" }

func (*allowAll) Provides(b byte) bool {
	return b == mochi.OnConnectAuthenticate || b == mochi.OnACLCheck
}

func (*allowAll) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }

func (*allowAll) OnACLCheck(*mochi.Client, string, bool) bool { return true }

// tcpListener is mochi's listeners.TCP with two differences: it counts the
// goroutines it starts so that Close can wait for them (mochi's Close does
// not), and it does not share an error variable between them (mochi's
// does, which the race detector reports when two clients connect at once).
type tcpListener struct {
	id, addr string
	log      *slog.Logger

	mu sync.Mutex
	ln net.Listener
	wg sync.WaitGroup
}

var _ listeners.Listener = (*tcpListener)(nil)

func (l *tcpListener) ID() string       { return l.id }
func (l *tcpListener) Protocol() string { return "tcp" }

func (l *tcpListener) Address() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln != nil {
		return l.ln.Addr().String()
	}
	return l.addr
}

func (l *tcpListener) Init(log *slog.Logger) error {
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.ln, l.log = ln, log
	l.mu.Unlock()
	// Counted here, not in Serve: mochi starts Serve on a goroutine of its
	// own, which may not have run yet when Close waits.
	l.wg.Add(1)
	return nil
}

// Serve accepts until the listener is closed.
func (l *tcpListener) Serve(establish listeners.EstablishFn) {
	defer l.wg.Done() // Add in Init
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			return // closed; any other Accept error is not recoverable here either
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if err := establish(l.id, conn); err != nil {
				l.log.Debug("client connection ended", "remote", conn.RemoteAddr().String(), "error", err)
			}
		}()
	}
}

// Close closes the listener first, so no client connects after
// closeClients has disconnected the existing ones.
func (l *tcpListener) Close(closeClients listeners.CloseFn) {
	l.mu.Lock()
	ln := l.ln
	l.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	closeClients(l.id)
}

func (l *tcpListener) wait() { l.wg.Wait() }

// infoAndAbove drops the debug records of the handler it wraps.
type infoAndAbove struct{ slog.Handler }

func (h infoAndAbove) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo && h.Handler.Enabled(ctx, l)
}

func (h infoAndAbove) WithAttrs(as []slog.Attr) slog.Handler {
	return infoAndAbove{h.Handler.WithAttrs(as)}
}

func (h infoAndAbove) WithGroup(name string) slog.Handler {
	return infoAndAbove{h.Handler.WithGroup(name)}
}
