package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge/broker"
	"github.com/runnel-io/runnel/internal/testbroker"
)

// brokerUnderTest is where a test's source connects. The tests that push
// traffic run against the real Mosquitto the edge meets in the field; the
// embedded broker gets TestEmbeddedBroker, which keeps one message in
// flight at a time because mochi v2.7.9 can deadlock under a QoS 1 stream
// (edge/broker's Caveats; it hung these tests about once in 25 runs).
type brokerUnderTest struct {
	hostPort string
	// receiveMaximum is the source's ReceiveMaximum with this broker (0:
	// the default). With the embedded broker it is the broker's
	// MaxInflight (edge/broker's Caveats).
	receiveMaximum uint16
}

func (b brokerUnderTest) url() string { return "mqtt://" + b.hostPort }

func startMosquitto(t *testing.T) brokerUnderTest { return mosquittoUnderTest(testbroker.Start(t)) }

func mosquittoUnderTest(m *testbroker.Mosquitto) brokerUnderTest {
	return brokerUnderTest{hostPort: m.HostPort()}
}

func startEmbedded(t *testing.T) (brokerUnderTest, *broker.Broker) {
	t.Helper()
	b, err := broker.Start(t.Context(), broker.Options{Addr: "127.0.0.1:0", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := b.Close(ctx); err != nil {
			t.Errorf("embedded broker: %v (mochi deadlocked? see edge/broker's Caveats)", err)
		}
	})
	return brokerUnderTest{hostPort: b.Addr(), receiveMaximum: broker.DefaultMaxInflight}, b
}

// got is one delivery as the handler saw it.
type got struct {
	Message
	ack func()
}

func (g got) seq(t *testing.T) int {
	t.Helper()
	n, err := strconv.Atoi(string(g.Payload))
	if err != nil {
		t.Fatalf("payload %q is not a sequence number", g.Payload)
	}
	return n
}

// startSource starts a source that sends every delivery to the returned
// channel (the test acks) and closes it when the test ends.
func startSource(t *testing.T, cfg Config, buffer int) (*Source, <-chan got) {
	t.Helper()
	ch := make(chan got, buffer)
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	src, err := Start(t.Context(), cfg, Each(func(m Message, ack func()) { ch <- got{m, ack} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeSource(t, src) })
	waitConnected(t, src)
	return src, ch
}

func closeSource(t *testing.T, src *Source) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.Close(ctx); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("Close: %v", err)
	}
}

func waitConnected(t *testing.T, src *Source) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := src.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
}

func next(t *testing.T, ch <-chan got) got {
	t.Helper()
	select {
	case g := <-ch:
		return g
	case <-time.After(20 * time.Second):
		t.Fatal("no message within 20s")
		return got{}
	}
}

// nothingWithin asserts that no message arrives for d. Proving a negative
// against a real broker takes a wait; d is kept short.
func nothingWithin(t *testing.T, ch <-chan got, d time.Duration, why string) {
	t.Helper()
	select {
	case g := <-ch:
		t.Fatalf("%s, but got message %q (dup=%v)", why, g.Payload, g.Duplicate)
	case <-time.After(d):
	}
}

func publishSeq(t *testing.T, p *testbroker.Publisher, topic string, from, to int) {
	t.Helper()
	if err := publishRange(t.Context(), p, topic, from, to); err != nil {
		t.Fatal(err)
	}
}

// publishInBackground publishes while the test receives; an error fails
// the test when it ends.
func publishInBackground(t *testing.T, p *testbroker.Publisher, topic string, from, to int) {
	errc := make(chan error, 1)
	go func() { errc <- publishRange(t.Context(), p, topic, from, to) }()
	t.Cleanup(func() {
		if err := <-errc; err != nil {
			t.Errorf("background publisher: %v", err)
		}
	})
}

func publishRange(ctx context.Context, p *testbroker.Publisher, topic string, from, to int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i := from; i < to; i++ {
		if err := p.PublishAsync(ctx, topic, []byte(strconv.Itoa(i)), 1); err != nil {
			return err
		}
	}
	return nil
}

func cfgFor(b brokerUnderTest, proto Protocol, clientID string) Config {
	return Config{
		Brokers:  []string{b.url()},
		Protocol: proto,
		ClientID: clientID,
		Topics:   []Subscription{{Filter: "sensors/#", QoS: 1}},

		ReceiveMaximum: b.receiveMaximum,
	}
}

// expectSeqs reads len(want) messages, checks their sequence numbers (in
// order) and Duplicate flags (dup(seq)), and acks each.
func expectSeqs(t *testing.T, ch <-chan got, want []int, dup func(int) bool) {
	t.Helper()
	for i, w := range want {
		g := next(t, ch)
		switch s := g.seq(t); {
		case s != w:
			t.Fatalf("message %d: seq %d, want %d", i, s, w)
		case g.Duplicate != dup(s):
			t.Fatalf("message %d: seq %d Duplicate=%v, want %v", i, s, g.Duplicate, dup(s))
		}
		g.ack()
	}
}

func seqRange(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// assertDrained proves the broker holds nothing unacknowledged for the
// session: a new source with the same ClientID receives nothing. It speaks
// proto, so that the session is only ever used by the protocol under test.
func assertDrained(t *testing.T, b brokerUnderTest, proto Protocol, clientID string) {
	t.Helper()
	src, ch := startSource(t, cfgFor(b, proto, clientID), 1<<16) // never blocks the handler
	nothingWithin(t, ch, 300*time.Millisecond, "everything was acknowledged")
	closeSource(t, src)
}

// protocols are the MQTT versions a Source speaks. A test of what both
// promise runs once per protocol, as subtests protocol=5 and
// protocol=3.1.1, each with its own client IDs; where the versions differ,
// the test says how.
var protocols = []Protocol{ProtocolV5, ProtocolV311}

func forEachProtocol(t *testing.T, test func(t *testing.T, proto Protocol)) {
	for _, proto := range protocols {
		t.Run("protocol="+string(proto), func(t *testing.T) { test(t, proto) })
	}
}

// Mosquitto only: the embedded broker (mochi v2.7.9) can deadlock under a
// sustained QoS 1 stream to a subscriber (edge/broker's Caveats), and this
// test produced that hang there.
func TestQoS1InOrderAllAcked(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		n := 10_000
		if proto == ProtocolV311 {
			n = 5000 // only to keep the run short
		}
		b := startMosquitto(t)
		id := "inorder-" + string(proto)
		src, ch := startSource(t, cfgFor(b, proto, id), n)
		pub := testbroker.NewPublisher(t, b.hostPort)
		publishInBackground(t, pub, "sensors/a", 0, n)
		for want := range n {
			g := next(t, ch)
			if s := g.seq(t); s != want || g.Duplicate || g.QoS != 1 || g.Topic != "sensors/a" || g.PacketID == 0 {
				t.Fatalf("message %d: seq %d dup %v qos %d topic %q id %d", want, s, g.Duplicate, g.QoS, g.Topic, g.PacketID)
			}
			g.ack()
		}
		nothingWithin(t, ch, 200*time.Millisecond, "all messages were received once")
		st := src.Stats()
		if st.Received != uint64(n) || st.Acked != uint64(n) || st.AcksSent != uint64(n) || st.Redelivered != 0 ||
			st.StaleAcks != 0 || st.Connects != 1 {
			t.Fatalf("Stats() = %+v", st)
		}
		// v3.1.1 has no Receive Maximum to exceed. With v5, Mosquitto
		// 2.0.11 may overshoot it after acks (TestReceiveMaximumHoldsBroker).
		if proto == ProtocolV311 && st.OverReceiveMaximum != 0 {
			t.Fatalf("Stats() = %+v: OverReceiveMaximum means nothing with v3.1.1", st)
		}
		closeSource(t, src)
		assertDrained(t, b, proto, id)
	})
}

// Acks called out of order leave in arrival order (the broker would
// otherwise be free to treat a later PUBACK as acking nothing), and an
// AckBatch corks them into one write without losing any.
func TestAcksOutOfOrderAndBatched(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		const n = 20
		b := startMosquitto(t)
		id := "order-" + string(proto)
		src, ch := startSource(t, cfgFor(b, proto, id), n)
		pub := testbroker.NewPublisher(t, b.hostPort)
		publishSeq(t, pub, "sensors/o", 0, n)
		var held []got
		for range n {
			held = append(held, next(t, ch))
		}
		held[n-1].ack() // held back: every earlier one is unacknowledged
		if st := src.Stats(); st.Acked != 1 || st.AcksSent != 0 {
			t.Fatalf("after acking the last message only: Stats() = %+v", st)
		}
		src.AckBatch(func() {
			for i := n - 2; i >= 0; i-- {
				held[i].ack()
			}
		})
		if st := src.Stats(); st.Acked != n || st.AcksSent != n {
			t.Fatalf("Stats() = %+v", st)
		}
		closeSource(t, src)
		assertDrained(t, b, proto, id)
	})
}

// The back-pressure path: with ReceiveMaximum N the broker sends N
// messages and waits for an ack before sending more; after acks the rest
// arrive, in order.
//
// Mosquitto only. With the embedded broker the source runs with a Receive
// Maximum as large as the broker's store (edge/broker's Caveats), so the
// bound is never reached there. And Mosquitto 2.0.11 (Debian 12) honours
// the bound only until the first ack: each PUBACK then releases up to N
// more messages (fixed in 2.0.13, "various fixes around inflight quota
// management"), so this test checks the first window exactly, and after
// that only that nothing is lost, duplicated or reordered.
func TestReceiveMaximumHoldsBroker(t *testing.T) {
	const rm, n = 5, 23
	b := startMosquitto(t)
	cfg := cfgFor(b, ProtocolV5, "backpressure")
	cfg.ReceiveMaximum = rm
	src, ch := startSource(t, cfg, n)
	pub := testbroker.NewPublisher(t, b.hostPort)
	publishSeq(t, pub, "sensors/bp", 0, n)

	var held []got
	for range rm {
		held = append(held, next(t, ch))
	}
	nothingWithin(t, ch, 300*time.Millisecond, fmt.Sprintf("ReceiveMaximum %d messages are unacknowledged", rm))
	for i, g := range held {
		if g.seq(t) != i {
			t.Fatalf("message %d: seq %d", i, g.seq(t))
		}
		g.ack()
	}
	expectSeqs(t, ch, seqRange(rm, n), func(int) bool { return false })
	nothingWithin(t, ch, 200*time.Millisecond, "all messages were received once")
	if over := src.Stats().OverReceiveMaximum; over > 0 {
		t.Logf("broker sent %d messages beyond Receive Maximum %d after the first ack (Mosquitto < 2.0.13)", over, rm)
	}
}

// A source that received messages and did not acknowledge them goes away
// (Close); the next source with the same ClientID gets them again, marked
// Duplicate, then the later ones: those published while no source was
// connected (queued in the persistent session) and those published after
// it connected. Nothing is lost. (TestCrashedProcessRedelivery does the
// same with SIGKILL.)
func TestRedeliveryToNextSource(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		const n, acked, away, later = 100, 50, 10, 10
		b := startMosquitto(t)
		id := "redeliver-" + string(proto)
		a, ch := startSource(t, cfgFor(b, proto, id), n)
		pub := testbroker.NewPublisher(t, b.hostPort)
		publishSeq(t, pub, "sensors/r", 0, n)
		for want := range n {
			g := next(t, ch)
			if s := g.seq(t); s != want {
				t.Fatalf("first source: message %d has seq %d", want, s)
			}
			if want < acked {
				g.ack()
			}
		}
		closeSource(t, a)

		publishSeq(t, pub, "sensors/r", n, n+away) // queued in the session
		bsrc, ch := startSource(t, cfgFor(b, proto, id), n)
		publishSeq(t, pub, "sensors/r", n+away, n+away+later)
		expectSeqs(t, ch, seqRange(acked, n+away+later), func(s int) bool { return s < n })
		nothingWithin(t, ch, 200*time.Millisecond, "every message was received")
		if st := bsrc.Stats(); st.Redelivered != n-acked {
			t.Fatalf("Stats().Redelivered = %d, want %d", st.Redelivered, n-acked)
		}
		closeSource(t, bsrc)
		assertDrained(t, b, proto, id)
	})
}

// killableDial dials like the source does and keeps the connections so the
// test can cut them, as a network failure would.
type killableDial struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (k *killableDial) dial(ctx context.Context, u *url.URL) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.Host)
	if err == nil {
		k.mu.Lock()
		k.conns = append(k.conns, c)
		k.mu.Unlock()
	}
	return c, err
}

func (k *killableDial) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	_ = k.conns[len(k.conns)-1].Close()
}

// The connection dies while the handler holds acks: the source reconnects
// with back-off by itself, the late acks are no-ops (never sent on the new
// connection), the broker redelivers, nothing is lost, and messages
// published after the reconnect keep coming. (With v3.1.1 the reconnect
// finds the session and does not subscribe again, which would resend
// retained messages; v5 subscribes again, harmless with Retain Handling
// 1.)
func TestAckAfterConnectionLossIsNoop(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		const n = 10
		b := startMosquitto(t)
		k := &killableDial{}
		ch := make(chan got, 100)
		id := "killed-" + string(proto)
		cfg := cfgFor(b, proto, id)
		cfg.Logger, cfg.ConnectRetryMin, cfg.ConnectRetryMax = quietLogger(), 50*time.Millisecond, time.Second
		src, err := start(t.Context(), cfg, Each(func(m Message, ack func()) { ch <- got{m, ack} }), testHooks{dial: k.dial})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeSource(t, src) })
		waitConnected(t, src)
		pub := testbroker.NewPublisher(t, b.hostPort)
		publishSeq(t, pub, "sensors/k", 0, n)
		var held []got
		for range n {
			held = append(held, next(t, ch))
		}

		k.kill()
		deadline := time.Now().Add(20 * time.Second)
		for src.Stats().Connects < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		waitConnected(t, src)
		for _, g := range held {
			g.ack() // their connection is gone
		}
		if st := src.Stats(); st.StaleAcks != n || st.Acked != 0 || st.AcksSent != 0 || st.Reconnects != 1 {
			t.Fatalf("after acking on a dead connection: Stats() = %+v", st)
		}
		expectSeqs(t, ch, seqRange(0, n), func(int) bool { return true })
		publishSeq(t, pub, "sensors/k", n, 2*n)
		expectSeqs(t, ch, seqRange(n, 2*n), func(int) bool { return false })
		closeSource(t, src)
		assertDrained(t, b, proto, id)
	})
}

// A Mosquitto restart mid-stream: the source reconnects by itself; QoS 1
// messages the broker held for it (sent and unacknowledged, and queued
// behind the in-flight bound) survive the restart in Mosquitto's database
// and arrive; messages published after the restart arrive.
//
// The bound is protocol-specific: v5's is the source's Receive Maximum,
// v3.1.1 has none and relies on the broker's max_inflight_messages.
func TestBrokerRestart(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		// held is well above what Mosquitto 2.0.11 overshoots by, so some
		// always queue (with 30, all of them came through once under -race).
		const bound, before, held, after = 8, 50, 300, 40
		var m *testbroker.Mosquitto
		switch proto {
		case ProtocolV5:
			m = testbroker.Start(t)
		case ProtocolV311:
			m = testbroker.StartWith(t, testbroker.Options{MaxInflightMessages: bound})
		}
		b := mosquittoUnderTest(m)
		id := "restart-" + string(proto)
		cfg := cfgFor(b, proto, id)
		if proto == ProtocolV5 {
			cfg.ReceiveMaximum = bound
		}
		cfg.ConnectRetryMin, cfg.ConnectRetryMax = 50*time.Millisecond, 500*time.Millisecond
		src, ch := startSource(t, cfg, 1000)
		pub := testbroker.NewPublisher(t, b.hostPort)

		// Phase 1: normal flow.
		publishSeq(t, pub, "sensors/x", 0, before)
		expectSeqs(t, ch, seqRange(0, before), func(int) bool { return false })

		// Phase 2: the pipeline stalls. At least bound messages are in
		// flight (more with Mosquitto 2.0.11, which overshoots its quota
		// after acks: TestReceiveMaximumHoldsBroker) and the rest queue in
		// the broker.
		publishSeq(t, pub, "sensors/x", before, before+held)
		stalled := map[int]got{}
		for _, g := range drainFor(ch, 300*time.Millisecond) {
			stalled[g.seq(t)] = g
		}
		if len(stalled) < bound || len(stalled) == held {
			t.Fatalf("stalled with %d of %d messages delivered, want at least %d and some queued", len(stalled), held, bound)
		}
		pub.Close()

		m.Restart()
		waitConnected(t, src)
		if st := src.Stats(); st.Reconnects < 1 {
			t.Fatalf("Stats() = %+v, want a reconnect", st)
		}
		for _, g := range stalled {
			g.ack() // too late: their connection died with the broker
		}
		if st := src.Stats(); st.StaleAcks != uint64(len(stalled)) {
			t.Fatalf("StaleAcks = %d, want %d", st.StaleAcks, len(stalled))
		}

		// Phase 3: after the restart the stalled messages come back marked
		// Duplicate, then the queued ones, then new ones; all in order.
		pub = testbroker.NewPublisher(t, b.hostPort)
		publishInBackground(t, pub, "sensors/x", before+held, before+held+after)
		expectSeqs(t, ch, seqRange(before, before+held+after), func(s int) bool { _, ok := stalled[s]; return ok })
		nothingWithin(t, ch, 200*time.Millisecond, "every message was received")
		closeSource(t, src)
		assertDrained(t, b, proto, id)
	})
}

// drainFor returns what arrives until nothing has for quiet.
func drainFor(ch <-chan got, quiet time.Duration) []got {
	var out []got
	for {
		select {
		case g := <-ch:
			out = append(out, g)
		case <-time.After(quiet):
			return out
		}
	}
}

// A QoS 0 subscription: a message arrives with QoS 0 and no packet ID,
// whether published at QoS 0 or at QoS 1 (downgraded to the
// subscription's QoS), and its ack is allowed and does nothing. With the
// embedded broker and with Mosquitto.
func TestQoS0NeedsNoAck(t *testing.T) {
	embedded, _ := startEmbedded(t)
	brokers := []struct {
		name string
		b    brokerUnderTest
	}{{"embedded", embedded}, {"mosquitto", startMosquitto(t)}}
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		for _, br := range brokers {
			t.Run("broker="+br.name, func(t *testing.T) {
				b := br.b
				cfg := cfgFor(b, proto, "qos0-"+br.name+"-"+string(proto))
				cfg.Topics[0].QoS = 0
				src, ch := startSource(t, cfg, 10)
				pub := testbroker.NewPublisher(t, b.hostPort)
				for seq, qos := range []byte{0, 1} {
					pub.MustPublish("sensors/q0", []byte(strconv.Itoa(seq)), qos)
					g := next(t, ch)
					if g.QoS != 0 || g.PacketID != 0 || g.seq(t) != seq {
						t.Fatalf("published at qos %d: got qos %d packet id %d payload %q", qos, g.QoS, g.PacketID, g.Payload)
					}
					g.ack() // allowed, does nothing
				}
				if st := src.Stats(); st.Received != 2 || st.Acked != 0 || st.AcksSent != 0 || st.StaleAcks != 0 {
					t.Fatalf("Stats() = %+v", st)
				}
			})
		}
	})
}

// CleanStart discards what the broker queued for the ClientID, and the
// session is persistent afterwards: messages published while the source
// is away after that are kept for it. (v3.1.1 has no CleanStart that
// does this by itself; doc.go says how the source gets it.)
func TestCleanStart(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		b := startMosquitto(t)
		id := "clean-" + string(proto)
		pub := testbroker.NewPublisher(t, b.hostPort)
		a, _ := startSource(t, cfgFor(b, proto, id), 10)
		closeSource(t, a)
		pub.MustPublish("sensors/c", []byte("1"), 1) // queued for the session

		cfg := cfgFor(b, proto, id)
		cfg.CleanStart = true
		src, ch := startSource(t, cfg, 10)
		nothingWithin(t, ch, 300*time.Millisecond, "CleanStart discarded the queued message")
		closeSource(t, src)

		pub.MustPublish("sensors/c", []byte("2"), 1) // queued: the session is persistent
		src, ch = startSource(t, cfgFor(b, proto, id), 10)
		expectSeqs(t, ch, []int{2}, func(int) bool { return false })
		closeSource(t, src)
	})
}

// Publish sends on the source's own connection, and once the source is
// closed returns ErrNotConnected. The user properties go out with v5 only
// (v3.1.1 has none); a Message does not carry them, so edge's
// TestMQTTOutput checks them, with a v5 subscriber.
func TestPublish(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		b := startMosquitto(t)
		rcv, ch := startSource(t, cfgFor(b, proto, "rcv-"+string(proto)), 10)
		src, _ := startSource(t, cfgFor(b, proto, "pub-"+string(proto)), 10)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if err := src.Publish(ctx, "sensors/p", []byte("42"), 1, false, map[string]string{"result_id": "x"}); err != nil {
			t.Fatal(err)
		}
		g := next(t, ch)
		if g.seq(t) != 42 || g.Topic != "sensors/p" || g.QoS != 1 {
			t.Fatalf("got %+v", g.Message)
		}
		g.ack()
		closeSource(t, src)
		if err := src.Publish(ctx, "sensors/p", []byte("43"), 1, false, nil); !errors.Is(err, ErrNotConnected) {
			t.Fatalf("Publish after Close = %v, want ErrNotConnected", err)
		}
		closeSource(t, rcv)
	})
}

// A broker that refuses the CONNECT (here Mosquitto, for a ClientID
// without the prefix its config demands) is a connect failure, retried
// with back-off.
func TestConnectRefused(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		m := testbroker.StartWith(t, testbroker.Options{Extra: []string{"clientid_prefixes allowed-"}})
		b := mosquittoUnderTest(m)
		cfg := cfgFor(b, proto, "not-allowed-"+string(proto))
		cfg.Logger, cfg.ConnectRetryMin, cfg.ConnectRetryMax = quietLogger(), 10*time.Millisecond, 20*time.Millisecond
		src, err := Start(t.Context(), cfg, func(*Batch) {})
		if err != nil {
			t.Fatal(err)
		}
		defer closeSource(t, src)
		deadline := time.Now().Add(10 * time.Second)
		for src.Stats().ConnectFailures < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if st := src.Stats(); st.ConnectFailures < 2 || st.Connects != 0 || src.Connected() {
			t.Fatalf("Stats() = %+v", st)
		}
	})
}

func TestStartRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := Start(ctx, Config{}, func(*Batch) {}); !errors.Is(err, ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "brokers") {
		t.Errorf("empty config: %v", err)
	}
	if _, err := Start(ctx, validConfig(), nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("nil handler: %v", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Start(canceled, validConfig(), func(*Batch) {}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled ctx: %v", err)
	}
	cfg := validConfig()
	cfg.Brokers = []string{"mqtts://127.0.0.1:8883"}
	cfg.TLS = &TLSConfig{CAFile: "/nonexistent/ca.pem"}
	if _, err := Start(ctx, cfg, func(*Batch) {}); err == nil || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Errorf("missing CA file: %v", err)
	}
}

// mqtts:// with the broker's CA: connects, receives, acks (over the locked
// connection wrapper that TLS needs), in both protocols. A wrong
// ServerName does not connect.
func TestTLS(t *testing.T) {
	m := testbroker.StartWith(t, testbroker.Options{TLS: true})
	b := mosquittoUnderTest(m)
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		config := func(id string) Config {
			c := cfgFor(b, proto, "tls-"+string(proto)+"-"+id)
			c.Brokers = []string{m.TLSAddr()}
			c.TLS = &TLSConfig{CAFile: m.CAFile()}
			return c
		}
		cfg := config("good")
		src, ch := startSource(t, cfg, 100)
		pub := testbroker.NewPublisher(t, m.HostPort())
		publishSeq(t, pub, "sensors/tls", 0, 50)
		expectSeqs(t, ch, seqRange(0, 50), func(int) bool { return false })
		closeSource(t, src)
		drained, ch := startSource(t, cfg, 1<<16)
		nothingWithin(t, ch, 300*time.Millisecond, "everything was acknowledged")
		closeSource(t, drained)

		bad := config("bad")
		bad.TLS.ServerName = "not-the-broker"
		bad.Logger, bad.ConnectRetryMin, bad.ConnectRetryMax = quietLogger(), 10*time.Millisecond, 20*time.Millisecond
		src, err := Start(t.Context(), bad, func(*Batch) {})
		if err != nil {
			t.Fatal(err)
		}
		defer closeSource(t, src)
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		if err := src.WaitConnected(ctx); err == nil {
			t.Fatal("connected although the certificate is not for ServerName")
		}
		if st := src.Stats(); st.ConnectFailures == 0 || st.Connects != 0 {
			t.Fatalf("Stats() = %+v", st)
		}
	})
}

// Close lets the handler call in progress finish (bounded by ctx), and an
// ack called after Close is a harmless no-op.
func TestCloseWaitsForHandler(t *testing.T) {
	b, _ := startEmbedded(t)
	entered, release := make(chan func()), make(chan struct{})
	cfg := cfgFor(b, ProtocolV5, "close")
	cfg.Logger = quietLogger()
	src, err := Start(t.Context(), cfg, Each(func(_ Message, ack func()) {
		entered <- ack
		<-release
	}))
	if err != nil {
		t.Fatal(err)
	}
	waitConnected(t, src)
	testbroker.NewPublisher(t, b.hostPort).MustPublish("sensors/c", []byte("1"), 1)
	ack := <-entered

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := src.Close(ctx); err == nil || !strings.Contains(err.Error(), "handler still running") {
		t.Fatalf("Close with a blocked handler = %v", err)
	}
	close(release)
	<-src.ran          // the connection loop disconnected (Close gave up waiting for it)
	src.readers.Wait() // the handler returned; the connection's reader ends
	ack()              // after Close: no-op, no panic
	if st := src.Stats(); st.Acked != 0 || st.StaleAcks != 1 {
		t.Fatalf("Stats() = %+v", st)
	}
	if src.Connected() {
		t.Fatal("Connected() after Close")
	}
}

// The embedded broker, one message in flight at a time (see
// brokerUnderTest): QoS 1 delivery and ack, redelivery of an unacked
// message to the next source with the ClientID, Duplicate flags.
func TestEmbeddedBroker(t *testing.T) {
	b, br := startEmbedded(t)
	cfg := cfgFor(b, ProtocolV5, "embedded")
	src, ch := startSource(t, cfg, 10)
	pub := testbroker.NewPublisher(t, b.hostPort)
	for i := range 5 {
		pub.MustPublish("sensors/e", []byte(strconv.Itoa(i)), 1)
		expectSeqs(t, ch, []int{i}, func(int) bool { return false })
	}
	pub.MustPublish("sensors/e", []byte("5"), 1)
	if g := next(t, ch); g.seq(t) != 5 || g.Duplicate {
		t.Fatalf("got seq %d dup %v, want 5", g.seq(t), g.Duplicate)
	} // not acked
	closeSource(t, src)

	src, ch = startSource(t, cfg, 10)
	expectSeqs(t, ch, []int{5}, func(int) bool { return true })
	pub.MustPublish("sensors/e", []byte("6"), 1)
	expectSeqs(t, ch, []int{6}, func(int) bool { return false })
	if st := src.Stats(); st.Received != 2 || st.Redelivered != 1 || st.AcksSent != 2 {
		t.Fatalf("Stats() = %+v", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for br.Stats().Inflight > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // mochi reads acks asynchronously
	}
	// mochi's Inflight gauge can go below zero (it decrements twice for a
	// redelivered message), hence <= 0.
	if st := br.Stats(); st.Inflight > 0 || st.InflightDropped != 0 {
		t.Fatalf("broker Stats() = %+v, want nothing held or dropped", st)
	}
}
