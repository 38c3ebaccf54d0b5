package mqtt

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Message is one PUBLISH received from the broker. In a Batch, Topic and
// Payload alias the source's read buffer: they are valid until the
// handler returns, and a handler that keeps them copies them
// (strings.Clone, bytes.Clone; Each does).
type Message struct {
	Topic   string
	Payload []byte
	// Size is the payload's length on the wire. It is more than
	// len(Payload) for a message longer than Config.MaxMessage: the source
	// keeps only the start of such a payload (as much as its buffer holds)
	// and skips the rest, so a huge message costs no memory and still
	// gets acknowledged in its turn.
	Size      int
	QoS       byte
	Retain    bool
	Duplicate bool   // the broker says it may have sent this message before
	PacketID  uint16 // the broker's packet ID, for logs (0 for QoS 0)
}

// Batch is the messages of one read from the connection, in arrival order.
// The handler must not keep the Batch or its Messages slice after it
// returns (see Message for their contents); it keeps Acks to acknowledge
// them later.
type Batch struct {
	Messages []Message
	// Acks acknowledges every message of the batch at once.
	Acks Acks
}

// BatchHandler is called with each batch of messages, in arrival order,
// one call at a time. The source acknowledges the batch's QoS 1/2
// messages (PUBACK for QoS 1, PUBREC for QoS 2) only when its Acks.Ack is
// called, which may be from any goroutine, after the handler has returned.
// Acknowledgements reach the broker in arrival order, as MQTT requires: an
// ack called early is held until every earlier message is acknowledged,
// so ack in arrival order to avoid the wait. An ack after the connection
// the batch came on has dropped is a no-op (the broker redelivers its
// messages); so is a second ack. Every batch must be acked in the end,
// including one whose messages the pipeline rejects (dead letters): an
// unacked message holds back the acks of all later ones, and with them the
// broker.
//
// The handler may block, which is how back-pressure reaches the broker:
// once ReceiveMaximum messages are unacknowledged the broker stops
// sending (with v3.1.1, once the broker's own in-flight limit is reached).
// While it blocks the connection is not read, so keep-alive pings go
// unanswered after KeepAlive. A handler that blocks must also return when
// its owner stops it; Close waits for it.
type BatchHandler func(b *Batch)

// Each adapts a handler of one message at a time: h is called for each
// message of a batch, with its own copies of the topic and payload, and
// an ack func of its own (a no-op for QoS 0), under the rules of
// BatchHandler.
func Each(h func(m Message, ack func())) BatchHandler {
	return func(b *Batch) {
		k := b.Acks
		for _, m := range b.Messages {
			m.Topic = strings.Clone(m.Topic)
			m.Payload = bytes.Clone(m.Payload)
			ack := noAck
			if m.QoS > 0 {
				one := Acks{a: k.a, gen: k.gen, first: k.first, end: k.first + 1}
				k.first++
				ack = func() { one.Ack() }
			}
			h(m, ack)
		}
	}
}

func noAck() {}

// Split divides the batch's acknowledgements at message i: head
// acknowledges Messages[:i], tail the rest. A handler that must stop
// part-way (at a disk cap) acknowledges what it took and holds the rest.
func (b *Batch) Split(i int) (head, tail Acks) {
	k := b.Acks.first
	for _, m := range b.Messages[:i] {
		if m.QoS > 0 {
			k++
		}
	}
	head, tail = b.Acks, b.Acks
	head.end, tail.first = k, k
	return head, tail
}

// Acks are the acknowledgements of a run of QoS 1/2 messages of one
// connection.
type Acks struct {
	a               *acker
	gen, first, end uint64
}

// Ack acknowledges the messages (see BatchHandler). It reports whether
// they were acknowledged now: false for a second call and when their
// connection has dropped.
func (k Acks) Ack() bool {
	if k.a == nil || k.first == k.end {
		return false
	}
	return k.a.ack(k.gen, k.first, k.end)
}

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
	Held            bool   // Config.Hold keeps the source from connecting now
	// OverReceiveMaximum counts messages that arrived while ReceiveMaximum
	// were already unacknowledged: the broker does not honour the bound.
	OverReceiveMaximum uint64
}

// Source receives messages from an MQTT broker over one MQTT v5 or v3.1.1
// connection (Config.Protocol), reconnecting with back-off until Close.
type Source struct {
	cfg     Config
	log     *slog.Logger
	h       BatchHandler
	brokers []*url.URL
	tls     *tls.Config
	back    backoff
	dial    func(ctx context.Context, u *url.URL) (net.Conn, error)
	acks    *acker

	// handling is held (a token in it) by the reader calling the handler:
	// one call at a time, also while an old connection's reader still
	// finishes a call as the next connection comes up. Close takes it
	// for good. batch is the handler's argument, reused.
	handling chan struct{}
	batch    Batch
	// stop is closed by Close: no more deliveries.
	stop    chan struct{}
	cancel  context.CancelFunc // stops the connection loop
	ran     chan struct{}      // closed when the connection loop has returned
	readers sync.WaitGroup     // the connections' readers (wire.go)
	gens    atomic.Uint64      // connection generations handed out
	closed  atomic.Bool

	mu        sync.Mutex
	connected bool
	link      link          // the live connection, when connected
	changed   chan struct{} // closed and replaced when connected changes
	clientID  string        // the broker-assigned ID once known, when cfg.ClientID is empty

	warnedOverflow atomic.Uint64 // the connection generation last warned about
	// topicsChanged: SetTopics changed the topics; every later connection
	// subscribes to all of them, even one that resumed its session.
	topicsChanged atomic.Bool

	received, redelivered                        atomic.Uint64
	connects, reconnects, connectFails, subFails atomic.Uint64
	held                                         atomic.Bool // Config.Hold keeps it from connecting now
}

// testHooks replace the network and randomness in tests.
type testHooks struct {
	dial func(ctx context.Context, u *url.URL) (net.Conn, error)
	rand func() float64
}

// Start validates cfg and starts the source: it connects in the
// background, retrying with back-off, so Start succeeds while the broker
// is down. ctx bounds Start only; the source runs until Close.
func Start(ctx context.Context, cfg Config, h BatchHandler) (*Source, error) {
	return start(ctx, cfg, h, testHooks{})
}

func start(ctx context.Context, cfg Config, h BatchHandler, hooks testHooks) (*Source, error) {
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
	acks := newAcker(cfg.ReceiveMaximum)
	if cfg.Protocol == ProtocolV311 {
		// No Receive Maximum: nothing the broker sends is "over" it.
		acks.limit = math.MaxInt
	}
	s := &Source{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "mqtt", "client_id", cfg.ClientID),
		h:        h,
		back:     backoff{min: cfg.ConnectRetryMin, max: cfg.ConnectRetryMax, rand: rand.Float64},
		acks:     acks,
		handling: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		ran:      make(chan struct{}),
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
		Acked:           s.acks.acked.Load(),
		AcksSent:        s.acks.sent.Load(),
		StaleAcks:       s.acks.stale.Load(),
		Connects:        s.connects.Load(),
		Reconnects:      s.reconnects.Load(),
		ConnectFailures: s.connectFails.Load(),
		SubscribeErrors: s.subFails.Load(),
		Held:            s.held.Load(),

		OverReceiveMaximum: s.acks.overflow.Load(),
	}
}

// Publish sends a message on the source's connection (the broker it reads
// from) and, for QoS 1, waits for the broker's PUBACK. It returns
// ErrNotConnected at once while there is no connection; the caller
// retries. With MQTT v5 the message carries the given user properties;
// MQTT v3.1.1 has no properties, so there user is not sent (a reader that
// needs it, to deduplicate say, does not get it).
func (s *Source) Publish(ctx context.Context, topic string, payload []byte, qos byte, retain bool, user map[string]string) error {
	s.mu.Lock()
	l := s.link
	s.mu.Unlock()
	if l == nil {
		return ErrNotConnected
	}
	if err := l.publish(ctx, topic, payload, qos, retain, user); err != nil {
		return fmt.Errorf("mqtt: publish to %s: %w", topic, err)
	}
	return nil
}

// AckBatch runs fn, which calls ack funcs, with the connection's writes
// held back until it returns: the acknowledgements it sends leave in one
// write instead of one each.
func (s *Source) AckBatch(fn func()) { s.acks.batch(fn) }

// Close stops delivering messages, waits for the handler to return, then
// disconnects cleanly (the broker keeps the session) and waits for the
// source's goroutines, or for ctx. Acks called before the disconnect reach
// the broker; later ones are dropped, and the broker redelivers those
// messages to the next source with this ClientID. Closing twice returns
// ErrClosed.
func (s *Source) Close(ctx context.Context) error {
	if !s.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	close(s.stop)
	var errs []error
	// Let the handler finish first, so the acks it sends on its way out
	// still find the connection up; the token is never given back.
	select {
	case s.handling <- struct{}{}:
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
	read := make(chan struct{})
	go func() { s.readers.Wait(); close(read) }()
	select {
	case <-read:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("mqtt: close: connection reader still running: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// handle passes the messages of one read of connection gen to the
// handler, unless the source is closing: then they are not acknowledged,
// and the broker keeps them for the next connection of this session.
func (s *Source) handle(gen uint64, msgs []Message) {
	select {
	case s.handling <- struct{}{}:
	case <-s.stop:
		return
	}
	defer func() { <-s.handling }()
	select {
	case <-s.stop:
		return
	default:
	}
	first, end, over := s.acks.track(gen, msgs)
	if over && s.warnedOverflow.Swap(gen) != gen {
		s.log.Warn("mqtt: broker exceeds our Receive Maximum; back-pressure is not bounded by this broker (Mosquitto before 2.0.13 does this)",
			"receive_maximum", s.cfg.ReceiveMaximum)
	}
	s.received.Add(uint64(len(msgs)))
	for i := range msgs {
		if msgs[i].Duplicate {
			s.redelivered.Add(1)
		}
	}
	s.batch = Batch{Messages: msgs, Acks: Acks{a: s.acks, gen: gen, first: first, end: end}}
	s.h(&s.batch)
	s.batch = Batch{}
}

// topicList returns the topics to subscribe to now.
func (s *Source) topicList() []Subscription {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.Topics
}

// SetTopics replaces the topic filters the source subscribes to: on the
// live connection it subscribes to the new filters and unsubscribes from
// those no longer listed, and every later connection subscribes to the
// new list. A failure on the live connection is returned (the next
// connection subscribes again); the list is replaced either way. Removed
// filters stay in a broker session the source does not connect to again.
func (s *Source) SetTopics(ctx context.Context, topics []Subscription) error {
	if errs := checkTopics(topics); len(errs) > 0 {
		return errors.Join(errs...)
	}
	topics = slices.Clone(topics)
	s.mu.Lock()
	old := s.cfg.Topics
	s.cfg.Topics = topics
	l := s.link
	s.mu.Unlock()
	s.topicsChanged.Store(true)
	var added []Subscription
	var removed []string
	for _, t := range topics {
		if i := slices.IndexFunc(old, func(o Subscription) bool { return o.Filter == t.Filter }); i < 0 || old[i].QoS != t.QoS {
			added = append(added, t)
		}
	}
	for _, o := range old {
		if !slices.ContainsFunc(topics, func(t Subscription) bool { return t.Filter == o.Filter }) {
			removed = append(removed, o.Filter)
		}
	}
	if l == nil {
		return nil
	}
	var errs []error
	if len(added) > 0 {
		errs = append(errs, l.subscribeTo(ctx, added))
	}
	if len(removed) > 0 {
		if err := l.unsubscribe(ctx, removed); err != nil {
			errs = append(errs, fmt.Errorf("mqtt: unsubscribe %v: %w", removed, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Source) setConnected(up bool, l link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.link = l
	if s.connected != up {
		s.connected = up
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// link is one live connection to a broker, in one protocol version:
// conn5.go (paho.golang) and conn311.go (paho.mqtt.golang). The
// connection loop (run) opens it, owns it and ends it; Publish borrows it.
// Every link's connection is a bufConn read by the source's reader
// (wire.go), which hands the received messages to the handler.
type link interface {
	// subscribe subscribes to every configured topic and waits for the
	// broker's answer. Filters the broker refuses are logged and counted
	// (Stats.SubscribeErrors), not returned: the others still work.
	subscribe(ctx context.Context) error
	// subscribeTo subscribes to topics on the live connection, likewise.
	subscribeTo(ctx context.Context, topics []Subscription) error
	// unsubscribe ends the subscriptions of filters and waits for the
	// broker's answer.
	unsubscribe(ctx context.Context, filters []string) error
	// publish sends one message and, for QoS 1, waits for its PUBACK.
	publish(ctx context.Context, topic string, payload []byte, qos byte, retain bool, user map[string]string) error
	// done is closed once the connection has ended and the client
	// goroutines serving it have returned.
	done() <-chan struct{}
	// abort ends the connection at once, telling the broker it is an
	// error where the protocol can (after a failed subscribe).
	abort()
	// disconnect ends the connection cleanly (a normal DISCONNECT: the
	// broker keeps the session) and returns once done is closed.
	disconnect()
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
		if !s.waitUnheld(ctx) {
			return
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
		if err := c.link.subscribe(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Error("mqtt: subscribe failed; reconnecting", "error", err)
			}
			c.link.abort()
		} else {
			s.setConnected(true, c.link)
		}
		select {
		case <-c.link.done():
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
			c.link.disconnect()
			s.log.Info("mqtt: disconnected")
			return
		}
	}
}

// holdPoll is how often a held source asks Config.Hold again.
const holdPoll = 250 * time.Millisecond

// waitUnheld waits while Config.Hold says to, logging it; it
// returns false when ctx ends first.
func (s *Source) waitUnheld(ctx context.Context) bool {
	if s.cfg.Hold == nil || !s.cfg.Hold() {
		return true
	}
	s.held.Store(true)
	defer s.held.Store(false)
	began := time.Now()
	s.log.Warn("mqtt: not connecting while the handler holds messages; the broker keeps them")
	t := time.NewTicker(holdPoll)
	defer t.Stop()
	for s.cfg.Hold() {
		select {
		case <-t.C:
		case <-ctx.Done():
			return false
		}
	}
	s.log.Info("mqtt: the handler takes messages again; connecting", "held_for", time.Since(began).Round(time.Millisecond).String())
	return true
}

// disconnectWait bounds how long Close waits for the broker to close the
// connection after our DISCONNECT.
const disconnectWait = 2 * time.Second

// conn is one live MQTT connection and when it came up.
type conn struct {
	link  link
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

// connectTo makes one connection attempt to u, in the configured protocol
// version, bounded by ConnectTimeout.
func (s *Source) connectTo(ctx context.Context, u *url.URL, first bool) (conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ConnectTimeout)
	defer cancel()
	clean := s.cfg.CleanStart && first
	var (
		l              link
		sessionPresent bool
		err            error
	)
	if s.cfg.Protocol == ProtocolV311 {
		l, sessionPresent, err = s.connect311(ctx, u, first)
	} else {
		l, sessionPresent, err = s.connect5(ctx, u, clean)
	}
	if err != nil {
		return conn{}, fmt.Errorf("%s: %w", u.Redacted(), err)
	}
	s.connects.Add(1)
	if !sessionPresent && !clean {
		// Expected on the very first connection of a new ClientID; after
		// that it means the broker lost the session (expired, restarted
		// without persistence) and with it any queued messages.
		s.log.Warn("mqtt: broker has no session for this client; queued messages, if any, are lost", "broker", u.Redacted())
	}
	s.log.Info("mqtt: connected", "broker", u.Redacted(), "protocol", string(s.cfg.Protocol), "session_present", sessionPresent)
	return conn{link: l, since: time.Now()}, nil
}

// dialBuffered dials u, wraps the connection for the source's reader and
// corked writes (bufConn), and starts the reader, as connection
// generation gen (the acker's, from the CONNACK on).
func (s *Source) dialBuffered(ctx context.Context, u *url.URL) (*bufConn, error) {
	nc, err := s.dial(ctx, u)
	if err != nil {
		return nil, err
	}
	c := newBufConn(nc)
	s.readers.Add(1)
	go s.readLoop(c, s.gens.Add(1))
	return c, nil
}

func (s *Source) currentClientID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientID
}

// refused logs and counts the filters a SUBACK refused or downgraded;
// granted is the SUBACK's return code for each topic, in order.
func (s *Source) refused(topics []Subscription, granted []byte) {
	for i, code := range granted {
		if i >= len(topics) {
			break
		}
		t := topics[i]
		switch {
		case code >= 0x80:
			s.subFails.Add(1)
			s.log.Error("mqtt: broker refused subscription", "filter", t.Filter, "reason_code", fmt.Sprintf("%#x", code))
		case code < t.QoS:
			s.log.Warn("mqtt: broker granted a lower QoS", "filter", t.Filter, "requested", t.QoS, "granted", code)
		}
	}
}

func (s *Source) dialBroker(ctx context.Context, u *url.URL) (net.Conn, error) {
	if isTLS(u) {
		d := tls.Dialer{Config: s.tls}
		return d.DialContext(ctx, "tcp", u.Host)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", u.Host)
}
