package broker

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/internal/testbroker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func startBroker(t *testing.T) *Broker {
	t.Helper()
	b, err := Start(t.Context(), Options{Addr: "127.0.0.1:0", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// subscribe connects a paho client that forwards every message to the
// returned channel.
func subscribe(t *testing.T, b *Broker, filter string) (*paho.Client, <-chan *paho.Publish) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ch := make(chan *paho.Publish, 100)
	cc := paho.ClientConfig{ClientID: "sub", OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) { ch <- pr.Packet; return true, nil }}}
	cli, err := testbroker.Dial(ctx, b.Addr(), cc, &paho.Connect{ClientID: "sub", CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Disconnect(&paho.Disconnect{}); <-cli.Done() })
	if _, err := cli.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	return cli, ch
}

func receive(t *testing.T, ch <-chan *paho.Publish) *paho.Publish {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no message within 5s")
		return nil
	}
}

func TestPublishSubscribeQoS1(t *testing.T) {
	b := startBroker(t)
	if !strings.HasPrefix(b.Addr(), "127.0.0.1:") || strings.HasSuffix(b.Addr(), ":0") {
		t.Fatalf("Addr() = %q, want loopback with the bound port", b.Addr())
	}
	if b.URL() != "mqtt://"+b.Addr() {
		t.Fatalf("URL() = %q", b.URL())
	}
	_, ch := subscribe(t, b, "sensors/+/temp")
	pub := testbroker.NewPublisher(t, b.Addr())
	pub.MustPublish("sensors/a/temp", []byte(`{"t":21.5}`), 1)
	p := receive(t, ch)
	if p.Topic != "sensors/a/temp" || string(p.Payload) != `{"t":21.5}` || p.QoS != 1 {
		t.Fatalf("got topic %q payload %q qos %d", p.Topic, p.Payload, p.QoS)
	}
	// mochi counts a message sent after it wrote it, which the subscriber
	// may have read first.
	deadline := time.Now().Add(2 * time.Second)
	for s := b.Stats(); s.MessagesReceived < 1 || s.MessagesSent < 1 || s.ClientsConnected != 2; s = b.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("Stats() = %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Sensors in the field often speak MQTT v3.1.1, which paho.golang cannot:
// Mosquitto's own client stands in for them.
func TestAcceptsMQTT311Publisher(t *testing.T) {
	bin, err := exec.LookPath("mosquitto_pub")
	if err != nil {
		t.Fatalf("mosquitto_pub: %v: run deploy/test/install-deps.sh", err)
	}
	b := startBroker(t)
	_, ch := subscribe(t, b, "v311/#")
	host, port, _ := net.SplitHostPort(b.Addr())
	out, err := exec.CommandContext(t.Context(), bin, "-V", "mqttv311", "-h", host, "-p", port,
		"-q", "1", "-t", "v311/x", "-m", "hello").CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_pub: %v: %s", err, out)
	}
	if p := receive(t, ch); string(p.Payload) != "hello" || p.QoS != 1 {
		t.Fatalf("got payload %q qos %d", p.Payload, p.QoS)
	}
}

func TestCloseDisconnectsAndStopsListening(t *testing.T) {
	b := startBroker(t)
	cli, _ := subscribe(t, b, "x")
	addr := b.Addr()
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-cli.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("client still connected 5s after Close")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after Close", addr)
	}
	if err := b.Close(t.Context()); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
}

func TestStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		opts Options
		want string
	}{
		{"address in use", context.Background(), Options{Addr: busy.Addr().String()}, busy.Addr().String()},
		{"bad address", context.Background(), Options{Addr: "nonsense"}, "nonsense"},
		{"max inflight", context.Background(), Options{Addr: "127.0.0.1:0", MaxInflight: 70000}, "MaxInflight 70000"},
		{"canceled", canceled, Options{Addr: "127.0.0.1:0"}, "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.Logger = quiet()
			b, err := Start(tt.ctx, tt.opts)
			if err == nil {
				_ = b.Close(context.Background())
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not name %q", err, tt.want)
			}
		})
	}
}
