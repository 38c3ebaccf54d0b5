package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// Message is one PUBLISH received from the broker. The source does not
// reuse Payload: the handler may keep it.
type Message struct {
	Topic     string
	Payload   []byte
	QoS       byte
	Retain    bool
	Duplicate bool   // the broker says it may have sent this message before
	PacketID  uint16 // the broker's packet ID, for logs (0 for QoS 0)
}

// Handler is called for each message, in arrival order, from one
// goroutine. The source acknowledges the message (PUBACK for QoS 1) only
// when ack is called, and ack may be called from any goroutine, after the
// handler has returned. Acknowledgements reach the broker in arrival
// order, as MQTT requires: an ack called early is held until every
// earlier message is acknowledged, so ack in arrival order to avoid the
// wait. An ack after the connection the message came on has dropped is a
// no-op (the broker redelivers the message); so is a second ack, and any
// ack of a QoS 0 message. Every QoS 1/2 message must be acked in the end,
// including one the pipeline rejects (a dead letter): an unacked message
// holds back the acks of all later ones, and with them the broker.
//
// The handler may block, which is how back-pressure reaches the broker:
// once ReceiveMaximum messages are unacknowledged the broker stops
// sending. A handler that blocks must also return when its owner stops
// it; Close waits for it.
type Handler func(m Message, ack func())

// Stats are the source's counters since Start.
type Stats struct {
	Received        uint64 // messages passed to the handler
	Redelivered     uint64 // of those, with the Duplicate flag
	Acked           uint64 // acks called for QoS 1/2 messages of a live connection
	AcksSent        uint64 // PUBACK/PUBREC written to the broker
	StaleAcks       uint64 // acks dropped because their connection had gone
	Connects        uint64 // successful connections, the first included
	Reconnects      uint64 // connections lost (each followed by reconnecting)
	ConnectFailures uint64 // connection attempts that failed
	SubscribeErrors uint64 // filters the broker refused, or SUBSCRIBEs that failed
	// OverReceiveMaximum counts messages that arrived while ReceiveMaximum
	// were already unacknowledged: the broker does not honour the bound.
	OverReceiveMaximum uint64
}

// Source receives messages from an MQTT broker over one MQTT v5
// connection, reconnecting with back-off until Close.
type Source struct {
	cfg     Config
	log     *slog.Logger
	h       Handler
	brokers []*url.URL
	tls     *tls.Config
	back    backoff
	dial    func(ctx context.Context, u *url.URL) (net.Conn, error)
	acks    *acker

	// inbox carries messages from paho's callback to the delivery
	// goroutine, so that paho never runs user code and Close can always
	// unblock it. Its capacity is ReceiveMaximum up to maxInbox; beyond
	// that, paho's own buffer (ReceiveMaximum deep) takes the rest, so the
	// connection's reader still never blocks on a broker that keeps to
	// Receive Maximum.
	inbox chan delivery
	// stop is closed by Close: no more deliveries.
	stop   chan struct{}
	cancel context.CancelFunc // stops the connection loop
	ran    chan struct{}      // closed when the connection loop has returned
	served chan struct{}      // closed when the delivery goroutine has returned
	closed atomic.Bool

	mu        sync.Mutex
	connected bool
	cli       *paho.Client // the live connection's client, when connected
	changed   chan struct{} // closed and replaced when connected changes
	clientID  string        // the broker-assigned ID once known, when cfg.ClientID is empty

	warnedOverflow atomic.Uint64 // the connection generation last warned about

	received, redelivered, acked                 atomic.Uint64
	connects, reconnects, connectFails, subFails atomic.Uint64
}

// maxInbox caps the inbox so that a large ReceiveMaximum (the embedded
// broker wants 65535) does not allocate megabytes up front.
const maxInbox = 1024

type delivery struct {
	msg      Message
	gen, seq uint64
}

// testHooks replace the network and randomness in tests.
type testHooks struct {
	dial func(ctx context.Context, u *url.URL) (net.Conn, error)
	rand func() float64
}

// Start validates cfg and starts the source: it connects in the
// background, retrying with back-off, so Start succeeds while the broker
// is down. ctx bounds Start only; the source runs until Close.
func Start(ctx context.Context, cfg Config, h Handler) (*Source, error) {
	return start(ctx, cfg, h, testHooks{})
}

func start(ctx context.Context, cfg Config, h Handler, hooks testHooks) (*Source, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mqtt: start: %w", err)
	}
	if h == nil {
		return nil, fmt.Errorf("mqtt: start: nil handler: %w", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Source{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "mqtt", "client_id", cfg.ClientID),
		h:        h,
		back:     backoff{min: cfg.ConnectRetryMin, max: cfg.ConnectRetryMax, rand: rand.Float64},
		acks:     newAcker(cfg.ReceiveMaximum),
		inbox:    make(chan delivery, min(int(cfg.ReceiveMaximum), maxInbox)),
		stop:     make(chan struct{}),
		ran:      make(chan struct{}),
		served:   make(chan struct{}),
		changed:  make(chan struct{}),
		clientID: cfg.ClientID,
	}
	for _, b := range cfg.Brokers {
		u, _ := parseBroker(b) // Validate checked
		s.brokers = append(s.brokers, u)
		if isTLS(u) && s.tls == nil {
			t, err := cfg.TLS.build()
			if err != nil {
				return nil, err
			}
			s.tls = t
		}
	}
	s.dial = s.dialBroker
	if hooks.dial != nil {
		s.dial = hooks.dial
	}
	if hooks.rand != nil {
		s.back.rand = hooks.rand
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(runCtx)
	go s.serve()
	return s, nil
}

// Connected reports whether the source is connected and subscribed.
func (s *Source) Connected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected
}

// WaitConnected returns nil once the source is connected and subscribed,
// ctx's error if ctx ends first, or ErrClosed if the source is closed.
func (s *Source) WaitConnected(ctx context.Context) error {
	for {
		s.mu.Lock()
		ok, ch := s.connected, s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("mqtt: wait connected: %w", ctx.Err())
		case <-s.ran:
			return ErrClosed
		}
	}
}

// Stats returns the source's counters.
func (s *Source) Stats() Stats {
	return Stats{
		Received:        s.received.Load(),
		Redelivered:     s.redelivered.Load(),
		Acked:           s.acked.Load(),
		AcksSent:        s.acks.sent.Load(),
		StaleAcks:       s.acks.stale.Load(),
		Connects:        s.connects.Load(),
		Reconnects:      s.reconnects.Load(),
		ConnectFailures: s.connectFails.Load(),
		SubscribeErrors: s.subFails.Load(),

		OverReceiveMaximum: s.acks.overflow.Load(),
	}
}

// Close stops delivering messages, waits for the handler to return, then
// disconnects cleanly (the broker keeps the session) and waits for the
// source's goroutines, or for ctx. Acks called before the disconnect reach
// the broker; later ones are dropped, and the broker redelivers those
// messages to the next source with this ClientID. Closing twice returns
// ErrClosed.
// Publish sends a message on the source's connection (the broker it reads
// from) with the given user properties and, for QoS 1, waits for the
// broker's PUBACK. It returns ErrNotConnected at once while there is no
// connection; the caller retries.
func (s *Source) Publish(ctx context.Context, topic string, payload []byte, qos byte, retain bool, user map[string]string) error {
	s.mu.Lock()
	cli := s.cli
	s.mu.Unlock()
	if cli == nil {
		return ErrNotConnected
	}
	p := &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: payload, Properties: &paho.PublishProperties{}}
	for k, v := range user {
		p.Properties.User = append(p.Properties.User, paho.UserProperty{Key: k, Value: v})
	}
	r, err := cli.Publish(ctx, p)
	if err != nil {
		return fmt.Errorf("mqtt: publish to %s: %w", topic, err)
	}
	if r != nil && r.ReasonCode >= 0x80 {
		return fmt.Errorf("mqtt: publish to %s: refused, reason code %#x", topic, r.ReasonCode)
	}
	return nil
}

// AckBatch runs fn, which calls ack funcs, with the connection's writes
// held back until it returns: the acknowledgements it sends leave in one
// write instead of one each.
func (s *Source) AckBatch(fn func()) { s.acks.batch(fn) }

func (s *Source) Close(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	close(s.stop)
	var errs []error
	// Let the handler finish first, so the acks it sends on its way out
	// still find the connection up.
	select {
	case <-s.served:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("mqtt: close: handler still running: %w", ctx.Err()))
	}
	s.cancel()
	select {
	case <-s.ran:
		_ = s.acks.Close()
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("mqtt: close: connection still closing: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// serve is the delivery goroutine: it calls the handler for each message.
func (s *Source) serve() {
	defer close(s.served)
	for {
		select {
		case <-s.stop:
			return
		default:
		}
		select {
		case d := <-s.inbox:
			s.received.Add(1)
			if d.msg.Duplicate {
				s.redelivered.Add(1)
			}
			s.h(d.msg, s.ackFunc(d))
		case <-s.stop:
			return
		}
	}
}

func noAck() {}

func (s *Source) ackFunc(d delivery) func() {
	if d.msg.QoS == 0 {
		return noAck
	}
	return func() {
		if s.acks.ack(d.gen, d.seq) {
			s.acked.Add(1)
		}
	}
}

// onPublish is paho's message callback, on paho's routing goroutine.
func (s *Source) onPublish(pr paho.PublishReceived) (bool, error) {
	p := pr.Packet
	d := delivery{msg: Message{
		Topic:     p.Topic,
		Payload:   p.Payload,
		QoS:       p.QoS,
		Retain:    p.Retain,
		Duplicate: p.Duplicate(),
		PacketID:  p.PacketID,
	}}
	if p.QoS > 0 {
		var over bool
		d.gen, d.seq, over = s.acks.track(p.PacketID, p.QoS)
		if over && s.warnedOverflow.Swap(d.gen) != d.gen {
			s.log.Warn("mqtt: broker exceeds our Receive Maximum; back-pressure is not bounded by this broker (Mosquitto before 2.0.13 does this)",
				"receive_maximum", s.cfg.ReceiveMaximum)
		}
	}
	select {
	case s.inbox <- d:
	case <-s.stop:
		// Closing: the message is not acknowledged, so the broker keeps
		// it for the next connection of this session.
	}
	return true, nil
}

func (s *Source) setConnected(up bool, cli *paho.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cli = cli
	if s.connected != up {
		s.connected = up
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// stableAfter is how long a connection must last before its loss resets
// the back-off: a broker that accepts and then drops us at once (a
// duplicate ClientID taking the session over, an ACL that kicks us) must
// not be hammered.
const stableAfter = 10 * time.Second

// run is the connection loop: connect, subscribe, wait for the connection
// to drop, back off, repeat; until ctx is cancelled by Close.
func (s *Source) run(ctx context.Context) {
	defer close(s.ran)
	first := true // CleanStart applies to the first connection only
	retry := 0    // retries since the last stable connection
	var wait time.Duration
	for {
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
		c, err := s.connect(ctx, first)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			retry++
			wait = s.back.delay(retry)
			s.log.Warn("mqtt: cannot connect to any broker", "error", err, "retry", retry, "retry_in", wait.String())
			continue
		}
		first = false
		if err := s.subscribe(ctx, c.cli); err != nil {
			if ctx.Err() == nil {
				s.log.Error("mqtt: subscribe failed; reconnecting", "error", err)
			}
			_ = c.cli.Disconnect(&paho.Disconnect{ReasonCode: 0x80}) // unspecified error
		} else {
			s.setConnected(true, c.cli)
		}
		select {
		case <-c.cli.Done():
			s.setConnected(false, nil)
			s.reconnects.Add(1)
			if time.Since(c.since) >= stableAfter {
				retry = 0
			}
			retry++ // the first reconnect waits too: the broker is likely restarting
			wait = s.back.delay(retry)
			s.log.Warn("mqtt: connection lost; reconnecting", "up_for", time.Since(c.since).String(), "retry_in", wait.String())
		case <-ctx.Done():
			s.setConnected(false, nil)
			s.disconnect(c)
			return
		}
	}
}

// disconnectWait bounds how long Close waits for the broker to close the
// connection after our DISCONNECT.
const disconnectWait = 2 * time.Second

// disconnect ends a connection cleanly: a normal DISCONNECT (the broker
// keeps the session, with its expiry), then it waits for the broker to
// close the connection, which it does only after it has read everything we
// sent before. paho's own Disconnect closes the socket at once; if the next
// source with this ClientID then connects before the broker has read the
// last PUBACKs, the broker takes the session over and never reads them,
// and redelivers those messages (seen with Mosquitto under load).
func (s *Source) disconnect(c conn) {
	dp := packets.NewControlPacket(packets.DISCONNECT)
	if _, err := dp.WriteTo(c.net); err == nil {
		t := time.NewTimer(disconnectWait)
		select {
		case <-c.cli.Done(): // the broker closed the connection
		case <-t.C:
			s.log.Warn("mqtt: broker did not close the connection after DISCONNECT", "waited", disconnectWait.String())
		}
		t.Stop()
	}
	// Closing the socket ends paho's reader, and with it the client.
	_ = c.net.Close()
	<-c.cli.Done()
	s.log.Info("mqtt: disconnected")
}

// conn is one live MQTT connection.
type conn struct {
	cli   *paho.Client
	net   net.Conn // what cli writes to
	since time.Time
}

func (s *Source) connect(ctx context.Context, first bool) (conn, error) {
	var errs []error
	for _, u := range s.brokers {
		c, err := s.connectTo(ctx, u, first)
		if err == nil {
			return c, nil
		}
		s.connectFails.Add(1)
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return conn{}, errors.Join(errs...)
}

func (s *Source) connectTo(ctx context.Context, u *url.URL, first bool) (conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	nc, err := s.dial(ctx, u)
	if err != nil {
		return conn{}, fmt.Errorf("%s: %w", u.Redacted(), err)
	}
	// Buffered reads, one write per packet (paho locks the connection
	// around a packet's writes, so concurrent writers never interleave),
	// and runs of acks corked into one write (Source.AckBatch).
	nc = newBufConn(nc)
	cli := paho.NewClient(paho.ClientConfig{
		ClientID:          s.currentClientID(),
		Conn:              nc,
		Session:           s.acks,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){s.onPublish},
		PacketTimeout:     s.cfg.ConnectTimeout,
		OnClientError: func(err error) {
			s.log.Debug("mqtt: connection error", "broker", u.Redacted(), "error", err)
		},
		OnServerDisconnect: func(d *paho.Disconnect) {
			reason := ""
			if d.Properties != nil {
				reason = d.Properties.ReasonString
			}
			s.log.Warn("mqtt: broker disconnected us", "broker", u.Redacted(), "reason_code", d.ReasonCode, "reason", reason)
		},
	})
	expiry := uint32(seconds(s.cfg.SessionExpiry))
	rm := s.cfg.ReceiveMaximum
	cp := &paho.Connect{
		ClientID:   s.currentClientID(),
		KeepAlive:  uint16(seconds(s.cfg.KeepAlive)),
		CleanStart: s.cfg.CleanStart && first,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry, ReceiveMaximum: &rm},
	}
	if s.cfg.Username != "" {
		cp.UsernameFlag, cp.Username = true, s.cfg.Username
	}
	if s.cfg.Password != "" {
		cp.PasswordFlag, cp.Password = true, []byte(s.cfg.Password)
	}
	ca, err := cli.Connect(ctx, cp)
	if err != nil {
		// paho closes conn on a failed Connect.
		if ca != nil {
			return conn{}, fmt.Errorf("%s: refused: reason code %#x: %w", u.Redacted(), ca.ReasonCode, err)
		}
		return conn{}, fmt.Errorf("%s: %w", u.Redacted(), err)
	}
	s.connects.Add(1)
	if ca.Properties != nil && ca.Properties.AssignedClientID != "" {
		s.mu.Lock()
		s.clientID = ca.Properties.AssignedClientID
		s.mu.Unlock()
	}
	if !ca.SessionPresent && !(s.cfg.CleanStart && first) {
		// Expected on the very first connection of a new ClientID; after
		// that it means the broker lost the session (expired, restarted
		// without persistence) and with it any queued messages.
		s.log.Warn("mqtt: broker has no session for this client; queued messages, if any, are lost", "broker", u.Redacted())
	}
	s.log.Info("mqtt: connected", "broker", u.Redacted(), "session_present", ca.SessionPresent)
	return conn{cli: cli, net: nc, since: time.Now()}, nil
}

func (s *Source) currentClientID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientID
}

// subscribe (re)subscribes to every topic on each connection. With a
// persistent session the broker already has the subscriptions; sending
// them again is harmless (Retain Handling 1: retained messages only for a
// subscription that is new) and picks up filters added to the config
// since the session was created.
func (s *Source) subscribe(ctx context.Context, cli *paho.Client) error {
	sub := &paho.Subscribe{Subscriptions: make([]paho.SubscribeOptions, len(s.cfg.Topics))}
	for i, t := range s.cfg.Topics {
		sub.Subscriptions[i] = paho.SubscribeOptions{Topic: t.Filter, QoS: t.QoS, RetainHandling: 1}
	}
	sa, err := cli.Subscribe(ctx, sub)
	if sa == nil {
		if err == nil {
			err = errors.New("no SUBACK")
		}
		s.subFails.Add(uint64(len(s.cfg.Topics)))
		return err
	}
	// A SUBACK with some refusals: report them and keep what was granted.
	for i, code := range sa.Reasons {
		if i >= len(s.cfg.Topics) {
			break
		}
		t := s.cfg.Topics[i]
		switch {
		case code >= 0x80:
			s.subFails.Add(1)
			s.log.Error("mqtt: broker refused subscription", "filter", t.Filter, "reason_code", fmt.Sprintf("%#x", code))
		case code < t.QoS:
			s.log.Warn("mqtt: broker granted a lower QoS", "filter", t.Filter, "requested", t.QoS, "granted", code)
		}
	}
	return nil
}

func (s *Source) dialBroker(ctx context.Context, u *url.URL) (net.Conn, error) {
	if isTLS(u) {
		d := tls.Dialer{Config: s.tls}
		return d.DialContext(ctx, "tcp", u.Host)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", u.Host)
}
