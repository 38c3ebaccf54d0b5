package mqtt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	mqtt3 "github.com/eclipse/paho.mqtt.golang"
	packets3 "github.com/eclipse/paho.mqtt.golang/packets"
)

// link311 is one MQTT v3.1.1 connection. A paho.mqtt.golang client does
// the handshake, keep-alive, SUBSCRIBE and our own publishes; the source
// keeps the rest, as on the v5 path:
//
//   - A new client per connection, with automatic reconnection off: the
//     connection loop (Source.run) owns reconnecting and its back-off, and
//     nothing of one connection (a PUBACK, a pending publish) can leak
//     into the next.
//   - The source's reader (wire.go) takes every received PUBLISH and
//     PUBREL before paho could see it, and the acker writes the PUBACKs
//     and PUBRECs, exactly as with v5. Automatic acknowledgement is off
//     all the same.
//   - A store that keeps nothing (discardStore): a client that lives for
//     one connection has nothing to resume.
type link311 struct {
	s   *Source
	cli mqtt3.Client
	net conn311
	// lost is closed by paho's connection-lost callback, which paho calls
	// only once its goroutines for the connection have returned.
	lost chan struct{}
	// resubscribe is false on a reconnect that found the session: the
	// broker has the subscriptions, and a SUBSCRIBE would make it resend
	// every retained message (v3.1.1 has no Retain Handling).
	resubscribe bool
}

// connect311 dials u and connects with MQTT v3.1.1 and CleanSession false.
// On the first connection with CleanStart it first discards the broker's
// session (cleanSession311).
func (s *Source) connect311(ctx context.Context, u *url.URL, first bool) (link, bool, error) {
	if s.cfg.CleanStart && first {
		if err := s.cleanSession311(ctx, u); err != nil {
			return nil, false, fmt.Errorf("clean session: %w", err)
		}
	}
	bc, err := s.dialBuffered(ctx, u)
	if err != nil {
		return nil, false, err
	}
	nc := conn311{bc}
	// Close (or the attempt's timeout) aborts the handshake.
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer stop()
	l := &link311{s: s, net: nc, lost: make(chan struct{})}
	broker := *u
	broker.User = nil // credentials come from the Config only, as with v5
	opts := mqtt3.NewClientOptions().
		AddBroker(broker.String()).
		SetCustomOpenConnectionFn(func(*url.URL, mqtt3.ClientOptions) (net.Conn, error) {
			return nc, nil
		}).
		SetProtocolVersion(4).
		SetClientID(s.cfg.ClientID).
		SetUsername(s.cfg.Username).
		SetPassword(s.cfg.Password).
		SetCleanSession(false).
		SetKeepAlive(time.Duration(seconds(s.cfg.KeepAlive)) * time.Second).
		SetPingTimeout(s.cfg.ConnectTimeout).
		SetConnectTimeout(s.cfg.ConnectTimeout).
		SetAutoReconnect(false).
		SetConnectRetry(false).
		SetResumeSubs(false).
		SetOrderMatters(true).
		SetAutoAckDisabled(true).
		SetStore(discardStore{}).
		SetConnectionLostHandler(func(_ mqtt3.Client, err error) {
			s.log.Debug("mqtt: connection error", "broker", u.Redacted(), "error", err)
			close(l.lost)
		})
	l.cli = mqtt3.NewClient(opts)
	t := l.cli.Connect()
	<-t.Done() // bounded by ConnectTimeout, and by ctx through stop
	if err := t.Error(); err != nil {
		// paho closed the connection; nothing of it was delivered.
		ct, _ := t.(*mqtt3.ConnectToken)
		if rc := ct.ReturnCode(); rc != packets3.Accepted && rc != packets3.ErrNetworkError {
			return nil, false, fmt.Errorf("refused: return code %d (%s): %w", rc, packets3.ConnackReturnCodes[rc], err)
		}
		return nil, false, err
	}
	present := t.(*mqtt3.ConnectToken).SessionPresent()
	l.resubscribe = first || !present
	return l, present, nil
}

// cleanSession311 discards the broker's session for the ClientID, which is
// what CleanStart means: a connection with CleanSession set, ended at once.
// Connecting with CleanSession set and keeping the connection would not
// do, as a v3.1.1 clean session ends with its connection, and with it the
// subscriptions and what the broker had queued.
func (s *Source) cleanSession311(ctx context.Context, u *url.URL) error {
	nc, err := s.dial(ctx, u)
	if err != nil {
		return err
	}
	defer nc.Close()
	deadline := time.Now().Add(s.cfg.ConnectTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	defer stop()
	_ = nc.SetDeadline(deadline)
	cp := packets3.NewControlPacket(packets3.Connect).(*packets3.ConnectPacket)
	cp.ProtocolName, cp.ProtocolVersion = "MQTT", 4
	cp.CleanSession = true
	cp.ClientIdentifier = s.cfg.ClientID
	cp.Keepalive = uint16(seconds(s.cfg.KeepAlive))
	if s.cfg.Username != "" {
		cp.UsernameFlag, cp.Username = true, s.cfg.Username
		if s.cfg.Password != "" {
			cp.PasswordFlag, cp.Password = true, []byte(s.cfg.Password)
		}
	}
	if err := cp.Write(nc); err != nil {
		return err
	}
	p, err := packets3.ReadPacket(nc)
	if err != nil {
		return err
	}
	ca, ok := p.(*packets3.ConnackPacket)
	switch {
	case !ok:
		return fmt.Errorf("broker answered CONNECT with %T", p)
	case ca.ReturnCode != packets3.Accepted:
		return fmt.Errorf("refused: return code %d (%s)", ca.ReturnCode, packets3.ConnackReturnCodes[ca.ReturnCode])
	}
	if err := packets3.NewControlPacket(packets3.Disconnect).Write(nc); err != nil {
		return err
	}
	// Wait for the broker to close the connection, so that it has ended
	// the clean session before the persistent one connects.
	_ = nc.SetReadDeadline(time.Now().Add(min(disconnectWait, time.Until(deadline))))
	_, _ = io.Copy(io.Discard, nc)
	return nil
}

func (l *link311) done() <-chan struct{} { return l.lost }

// abort closes the connection: v3.1.1 has no DISCONNECT with a reason.
func (l *link311) abort() { _ = l.net.Close() }

// subscribe subscribes to every topic on the Source's first connection and
// whenever the broker had no session; see resubscribe.
func (l *link311) subscribe(ctx context.Context) error {
	if !l.resubscribe && !l.s.topicsChanged.Load() {
		return nil
	}
	return l.subscribeTo(ctx, l.s.topicList())
}

func (l *link311) subscribeTo(ctx context.Context, topics []Subscription) error {
	s := l.s
	if len(topics) == 0 {
		return nil
	}
	filters := make(map[string]byte, len(topics))
	for _, t := range topics {
		filters[t.Filter] = t.QoS
	}
	t := l.cli.SubscribeMultiple(filters, nil) // nil: messages go to the default handler
	if err := l.wait(ctx, t); err != nil {
		s.subFails.Add(uint64(len(topics)))
		return err
	}
	result := t.(*mqtt3.SubscribeToken).Result()
	granted := make([]byte, len(topics))
	for i, t := range topics {
		granted[i] = result[t.Filter]
	}
	s.refused(topics, granted)
	return nil
}

func (l *link311) unsubscribe(ctx context.Context, filters []string) error {
	return l.wait(ctx, l.cli.Unsubscribe(filters...))
}

// wait waits for a token of the connection.
func (l *link311) wait(ctx context.Context, t mqtt3.Token) error {
	select {
	case <-t.Done():
	case <-l.lost:
		return errors.New("connection lost before the broker answered")
	case <-ctx.Done():
		return ctx.Err()
	}
	return t.Error()
}

// publish sends one message. user is dropped: v3.1.1 has no properties.
func (l *link311) publish(ctx context.Context, topic string, payload []byte, qos byte, retain bool, _ map[string]string) error {
	t := l.cli.Publish(topic, qos, retain, payload)
	select {
	case <-t.Done():
		return t.Error()
	case <-l.lost:
		return fmt.Errorf("connection lost before the broker acknowledged: %w", ErrNotConnected)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// disconnect ends the connection cleanly: a DISCONNECT, then a wait for
// the broker to close the connection, for the reason link5.disconnect
// gives (the broker must read the last PUBACKs before the next connection
// with this ClientID takes the session over).
func (l *link311) disconnect() {
	disconnect := [2]byte{packets3.Disconnect << 4, 0}
	if _, err := l.net.Write(disconnect[:]); err == nil {
		t := time.NewTimer(disconnectWait)
		select {
		case <-l.lost: // the broker closed the connection
		case <-t.C:
			l.s.log.Warn("mqtt: broker did not close the connection after DISCONNECT", "waited", disconnectWait.String())
		}
		t.Stop()
	}
	// Closing the socket ends paho's reader, and with it the client.
	_ = l.net.Close()
	<-l.lost
}

// conn311 is the bufConn a v3.1.1 client uses. paho.mqtt.golang writes
// each packet with one Write, from more than one goroutine (its writer and
// its keep-alive), and takes no lock: Write takes bufConn's, so packets
// never interleave with each other or with the acker's, and AckBatch's
// cork holds them all back.
type conn311 struct{ *bufConn }

// errConnClosed replaces net.ErrClosed on reads: paho.mqtt.golang does not
// report a read error that says "use of closed network connection" (it
// assumes it closed the connection itself), and would then not notice a
// connection that the source closed (abort, disconnect) or that a failed
// write closed (bufConn.flush).
var errConnClosed = errors.New("mqtt: connection closed")

func (c conn311) Read(p []byte) (int, error) {
	n, err := c.bufConn.Read(p)
	if errors.Is(err, net.ErrClosed) {
		err = errConnClosed
	}
	return n, err
}

func (c conn311) Write(p []byte) (int, error) {
	c.Lock()
	defer c.Unlock() // flushes, unless corked
	return c.bufConn.Write(p)
}

// discardStore is a paho.mqtt.golang Store that keeps nothing; see
// link311.
type discardStore struct{}

func (discardStore) Open()                              {}
func (discardStore) Put(string, packets3.ControlPacket) {}
func (discardStore) Get(string) packets3.ControlPacket  { return nil }
func (discardStore) All() []string                      { return nil }
func (discardStore) Del(string)                         {}
func (discardStore) Close()                             {}
func (discardStore) Reset()                             {}
