package testbroker

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

var publisherSeq atomic.Uint64

// Publisher is a bare paho.golang MQTT v5 client that sends test traffic.
// It connects with a clean session and no reconnect logic: a test that
// needs the publisher to survive a broker restart makes a new one.
type Publisher struct {
	t   testing.TB
	cli *paho.Client
}

// NewPublisher connects a publisher to hostPort ("127.0.0.1:1883") and
// disconnects it when the test ends.
func NewPublisher(t testing.TB, hostPort string) *Publisher {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id := fmt.Sprintf("testbroker-pub-%d", publisherSeq.Add(1))
	cli, err := Dial(ctx, hostPort, paho.ClientConfig{ClientID: id}, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatalf("testbroker: publisher: %v", err)
	}
	p := &Publisher{t: t, cli: cli}
	t.Cleanup(p.Close)
	return p
}

// Publish sends one message and, for QoS 1 and 2, waits for the broker's
// acknowledgement. It may be called from any goroutine.
func (p *Publisher) Publish(ctx context.Context, topic string, payload []byte, qos byte) error {
	_, err := p.cli.Publish(ctx, &paho.Publish{Topic: topic, Payload: payload, QoS: qos})
	if err != nil {
		return fmt.Errorf("testbroker: publish to %q: %w", topic, err)
	}
	return nil
}

// PublishAsync sends one message and returns once it is written, without
// waiting for the broker's acknowledgement; it blocks while the broker's
// Receive Maximum worth of messages are unacknowledged. It is the fast
// path for benchmarks.
func (p *Publisher) PublishAsync(ctx context.Context, topic string, payload []byte, qos byte) error {
	_, err := p.cli.PublishWithOptions(ctx, &paho.Publish{Topic: topic, Payload: payload, QoS: qos},
		paho.PublishOptions{Method: paho.PublishMethod_AsyncSend})
	if err != nil {
		return fmt.Errorf("testbroker: publish to %q: %w", topic, err)
	}
	return nil
}

// MustPublish is Publish that fails the test on error; call it from the
// test goroutine.
func (p *Publisher) MustPublish(topic string, payload []byte, qos byte) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, topic, payload, qos); err != nil {
		p.t.Fatal(err)
	}
}

// Close disconnects; it is safe to call more than once.
func (p *Publisher) Close() {
	_ = p.cli.Disconnect(&paho.Disconnect{ReasonCode: 0})
	<-p.cli.Done()
}

// Dial opens a TCP connection to hostPort and connects an MQTT v5 client on
// it with cc (whose Conn it sets). It is the smallest correct use of
// paho.golang, shared by tests that need a plain client.
func Dial(ctx context.Context, hostPort string, cc paho.ClientConfig, cp *paho.Connect) (*paho.Client, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", hostPort)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", hostPort, err)
	}
	cc.Conn = conn
	cli := paho.NewClient(cc)
	ca, err := cli.Connect(ctx, cp)
	if err != nil {
		if ca != nil {
			return nil, fmt.Errorf("connect to %s: reason %d: %w", hostPort, ca.ReasonCode, err)
		}
		return nil, fmt.Errorf("connect to %s: %w", hostPort, err)
	}
	return cli, nil
}
