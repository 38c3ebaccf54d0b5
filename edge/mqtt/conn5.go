package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
)

// link5 is one MQTT v5 connection: a paho.golang client on a bufConn,
// with the source's acker as its session (session.go). paho does the
// handshake, keep-alive, SUBSCRIBE and our own publishes; the source's
// reader takes the received messages (wire.go).
type link5 struct {
	s   *Source
	cli *paho.Client
	net *bufConn // what cli reads and writes
}

// connect5 dials u and connects with MQTT v5; clean is CleanStart.
func (s *Source) connect5(ctx context.Context, u *url.URL, clean bool) (link, bool, error) {
	// Buffered reads, one write per packet (paho locks the connection
	// around a packet's writes, so concurrent writers never interleave),
	// and runs of acks corked into one write (Source.AckBatch).
	nc, err := s.dialBuffered(ctx, u)
	if err != nil {
		return nil, false, err
	}
	cli := paho.NewClient(paho.ClientConfig{
		ClientID:      s.currentClientID(),
		Conn:          nc,
		Session:       s.acks,
		PacketTimeout: s.cfg.ConnectTimeout,
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
		CleanStart: clean,
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
			return nil, false, fmt.Errorf("refused: reason code %#x: %w", ca.ReasonCode, err)
		}
		return nil, false, err
	}
	if ca.Properties != nil && ca.Properties.AssignedClientID != "" {
		s.mu.Lock()
		s.clientID = ca.Properties.AssignedClientID
		s.mu.Unlock()
	}
	return &link5{s: s, cli: cli, net: nc}, ca.SessionPresent, nil
}

func (l *link5) done() <-chan struct{} { return l.cli.Done() }

func (l *link5) abort() {
	_ = l.cli.Disconnect(&paho.Disconnect{ReasonCode: 0x80}) // unspecified error
}

// subscribe (re)subscribes to every topic on each connection. With a
// persistent session the broker already has the subscriptions; sending
// them again is harmless (Retain Handling 1: retained messages only for a
// subscription that is new) and picks up filters added to the config
// since the session was created.
func (l *link5) subscribe(ctx context.Context) error {
	return l.subscribeTo(ctx, l.s.topicList())
}

func (l *link5) subscribeTo(ctx context.Context, topics []Subscription) error {
	s := l.s
	if len(topics) == 0 {
		return nil
	}
	sub := &paho.Subscribe{Subscriptions: make([]paho.SubscribeOptions, len(topics))}
	for i, t := range topics {
		sub.Subscriptions[i] = paho.SubscribeOptions{Topic: t.Filter, QoS: t.QoS, RetainHandling: 1}
	}
	sa, err := l.cli.Subscribe(ctx, sub)
	if sa == nil {
		if err == nil {
			err = errors.New("no SUBACK")
		}
		s.subFails.Add(uint64(len(topics)))
		return err
	}
	// A SUBACK with some refusals: report them and keep what was granted.
	s.refused(topics, sa.Reasons)
	return nil
}

func (l *link5) unsubscribe(ctx context.Context, filters []string) error {
	_, err := l.cli.Unsubscribe(ctx, &paho.Unsubscribe{Topics: filters})
	return err
}

func (l *link5) publish(ctx context.Context, topic string, payload []byte, qos byte, retain bool, user map[string]string) error {
	p := &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: payload, Properties: &paho.PublishProperties{}}
	for k, v := range user {
		p.Properties.User = append(p.Properties.User, paho.UserProperty{Key: k, Value: v})
	}
	r, err := l.cli.Publish(ctx, p)
	if err != nil {
		return err
	}
	if r != nil && r.ReasonCode >= 0x80 {
		return fmt.Errorf("refused, reason code %#x", r.ReasonCode)
	}
	return nil
}

// disconnect ends a connection cleanly: a normal DISCONNECT (the broker
// keeps the session, with its expiry), then it waits for the broker to
// close the connection, which it does only after it has read everything we
// sent before. paho's own Disconnect closes the socket at once; if the next
// source with this ClientID then connects before the broker has read the
// last PUBACKs, the broker takes the session over and never reads them,
// and redelivers those messages (seen with Mosquitto under load).
func (l *link5) disconnect() {
	dp := packets.NewControlPacket(packets.DISCONNECT)
	if _, err := dp.WriteTo(l.net); err == nil {
		t := time.NewTimer(disconnectWait)
		select {
		case <-l.cli.Done(): // the broker closed the connection
		case <-t.C:
			l.s.log.Warn("mqtt: broker did not close the connection after DISCONNECT", "waited", disconnectWait.String())
		}
		t.Stop()
	}
	// Closing the socket ends paho's reader, and with it the client.
	_ = l.net.Close()
	<-l.cli.Done()
}
