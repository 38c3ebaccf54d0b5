package mqtt

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/internal/testbroker"
)

// The MQTT v3.1.1 path against a real Mosquitto, which speaks 3.1.1 to
// the source while the test publisher speaks v5: the guarantees are the
// v5 path's (source_test.go), only the back-pressure bound is the
// broker's max_inflight_messages instead of Receive Maximum.

func cfg311(b brokerUnderTest, clientID string) Config {
	c := cfgFor(b, clientID)
	c.Protocol = ProtocolV311
	return c
}

// assertDrained311 is assertDrained with a v3.1.1 source, so the session
// is only ever used by the protocol under test.
func assertDrained311(t *testing.T, b brokerUnderTest, clientID string) {
	t.Helper()
	src, ch := startSource(t, cfg311(b, clientID), 1<<16)
	nothingWithin(t, ch, 300*time.Millisecond, "everything was acknowledged")
	closeSource(t, src)
}

func TestV311InOrderAllAcked(t *testing.T) {
	const n = 5000
	b := startMosquitto(t)
	src, ch := startSource(t, cfg311(b, "v311-inorder"), n)
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
	if st := src.Stats(); st.Received != n || st.Acked != n || st.AcksSent != n || st.Redelivered != 0 ||
		st.StaleAcks != 0 || st.OverReceiveMaximum != 0 || st.Connects != 1 {
		t.Fatalf("Stats() = %+v", st)
	}
	closeSource(t, src)
	assertDrained311(t, b, "v311-inorder")
}

// Acks called out of order leave in arrival order (the broker would
// otherwise be free to treat a later PUBACK as acking nothing), and an
// AckBatch corks them into one write without losing any.
func TestV311AcksOutOfOrderAndBatched(t *testing.T) {
	const n = 20
	b := startMosquitto(t)
	src, ch := startSource(t, cfg311(b, "v311-order"), n)
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
	assertDrained311(t, b, "v311-order")
}

// v3.1.1 has no Receive Maximum: the bound is the broker's
// max_inflight_messages. With it at 5 the broker sends 5 messages and
// waits for acks before sending more; nothing is lost or reordered.
func TestV311BrokerInflightHoldsBroker(t *testing.T) {
	const inflight, n = 5, 23
	m := testbroker.StartWith(t, testbroker.Options{MaxInflightMessages: inflight})
	b := mosquittoUnderTest(m)
	src, ch := startSource(t, cfg311(b, "v311-bp"), n)
	pub := testbroker.NewPublisher(t, b.hostPort)
	publishSeq(t, pub, "sensors/bp", 0, n)
	var held []got
	for range inflight {
		held = append(held, next(t, ch))
	}
	nothingWithin(t, ch, 300*time.Millisecond, "max_inflight_messages messages are unacknowledged")
	for i, g := range held {
		if g.seq(t) != i {
			t.Fatalf("message %d: seq %d", i, g.seq(t))
		}
		g.ack()
	}
	expectSeqs(t, ch, seqRange(inflight, n), func(int) bool { return false })
	nothingWithin(t, ch, 200*time.Millisecond, "all messages were received once")
	if st := src.Stats(); st.OverReceiveMaximum != 0 {
		t.Fatalf("Stats() = %+v: OverReceiveMaximum means nothing with v3.1.1", st)
	}
}

// A source that received messages and did not acknowledge them goes away
// (Close); the next source with the ClientID gets them again, marked
// Duplicate, then later ones: the v3.1.1 session is persistent.
func TestV311RedeliveryToNextSource(t *testing.T) {
	const n, acked, later = 100, 50, 10
	b := startMosquitto(t)
	a, ch := startSource(t, cfg311(b, "v311-redeliver"), n)
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

	// Published while no source is connected: queued in the session.
	publishSeq(t, pub, "sensors/r", n, n+later)
	bsrc, ch := startSource(t, cfg311(b, "v311-redeliver"), n)
	expectSeqs(t, ch, seqRange(acked, n+later), func(s int) bool { return s < n })
	nothingWithin(t, ch, 200*time.Millisecond, "every message was received")
	if st := bsrc.Stats(); st.Redelivered != n-acked {
		t.Fatalf("Stats().Redelivered = %d, want %d", st.Redelivered, n-acked)
	}
	closeSource(t, bsrc)
	assertDrained311(t, b, "v311-redeliver")
}

// The connection dies while the handler holds acks: the source reconnects
// with back-off by itself, the late acks are no-ops (never sent on the new
// connection), the broker redelivers, nothing is lost. The reconnect finds
// the session, so it does not subscribe again (which would resend retained
// messages), yet messages keep coming.
func TestV311AckAfterConnectionLossIsNoop(t *testing.T) {
	const n = 10
	b := startMosquitto(t)
	k := &killableDial{}
	ch := make(chan got, 100)
	cfg := cfg311(b, "v311-killed")
	cfg.Logger, cfg.ConnectRetryMin, cfg.ConnectRetryMax = quietLogger(), 50*time.Millisecond, time.Second
	src, err := start(t.Context(), cfg, func(m Message, ack func()) { ch <- got{m, ack} }, testHooks{dial: k.dial})
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
	assertDrained311(t, b, "v311-killed")
}

// A Mosquitto restart with messages unacknowledged and queued: the source
// reconnects by itself and everything arrives, in order, the unacked ones
// marked Duplicate.
func TestV311BrokerRestart(t *testing.T) {
	const inflight, before, held, after = 8, 50, 30, 40
	m := testbroker.StartWith(t, testbroker.Options{MaxInflightMessages: inflight})
	b := mosquittoUnderTest(m)
	cfg := cfg311(b, "v311-restart")
	cfg.ConnectRetryMin, cfg.ConnectRetryMax = 50*time.Millisecond, 500*time.Millisecond
	src, ch := startSource(t, cfg, 1000)
	pub := testbroker.NewPublisher(t, b.hostPort)

	publishSeq(t, pub, "sensors/x", 0, before)
	expectSeqs(t, ch, seqRange(0, before), func(int) bool { return false })

	publishSeq(t, pub, "sensors/x", before, before+held)
	stalled := map[int]got{}
	for _, g := range drainFor(ch, 300*time.Millisecond) {
		stalled[g.seq(t)] = g
	}
	// At least max_inflight_messages; Mosquitto 2.0.11 overshoots its
	// quota by a few after acks (TestReceiveMaximumHoldsBroker).
	if len(stalled) < inflight || len(stalled) == held {
		t.Fatalf("stalled with %d of %d messages delivered, want at least max_inflight_messages = %d and some queued", len(stalled), held, inflight)
	}
	pub.Close()

	m.Restart()
	waitConnected(t, src)
	for _, g := range stalled {
		g.ack() // too late: their connection died with the broker
	}
	if st := src.Stats(); st.Reconnects < 1 || st.StaleAcks != uint64(len(stalled)) {
		t.Fatalf("Stats() = %+v, want a reconnect and %d stale acks", st, len(stalled))
	}
	pub = testbroker.NewPublisher(t, b.hostPort)
	publishInBackground(t, pub, "sensors/x", before+held, before+held+after)
	expectSeqs(t, ch, seqRange(before, before+held+after), func(s int) bool { _, ok := stalled[s]; return ok })
	nothingWithin(t, ch, 200*time.Millisecond, "every message was received")
	closeSource(t, src)
	assertDrained311(t, b, "v311-restart")
}

func TestV311QoS0(t *testing.T) {
	b := startMosquitto(t)
	cfg := cfg311(b, "v311-qos0")
	cfg.Topics[0].QoS = 0
	src, ch := startSource(t, cfg, 10)
	testbroker.NewPublisher(t, b.hostPort).MustPublish("sensors/q0", []byte("7"), 1) // downgraded to the subscription's QoS
	g := next(t, ch)
	if g.QoS != 0 || g.PacketID != 0 || g.seq(t) != 7 {
		t.Fatalf("got qos %d packet id %d payload %q", g.QoS, g.PacketID, g.Payload)
	}
	g.ack() // allowed, does nothing
	if st := src.Stats(); st.Received != 1 || st.Acked != 0 || st.AcksSent != 0 || st.StaleAcks != 0 {
		t.Fatalf("Stats() = %+v", st)
	}
}

// CleanStart discards what the broker queued for the ClientID, and the
// session is persistent afterwards: messages published while the source
// is away after that are kept for it.
func TestV311CleanStart(t *testing.T) {
	b := startMosquitto(t)
	pub := testbroker.NewPublisher(t, b.hostPort)
	a, _ := startSource(t, cfg311(b, "v311-clean"), 10)
	closeSource(t, a)
	pub.MustPublish("sensors/c", []byte("1"), 1) // queued for the session

	cfg := cfg311(b, "v311-clean")
	cfg.CleanStart = true
	src, ch := startSource(t, cfg, 10)
	nothingWithin(t, ch, 300*time.Millisecond, "CleanStart discarded the queued message")
	closeSource(t, src)

	pub.MustPublish("sensors/c", []byte("2"), 1) // queued: the session is persistent
	src, ch = startSource(t, cfg311(b, "v311-clean"), 10)
	expectSeqs(t, ch, []int{2}, func(int) bool { return false })
	closeSource(t, src)
}

// Publish sends on the source's own connection; user properties are not
// sent (v3.1.1 has none). A refused connection is reported, and so is a
// wrong password.
func TestV311Publish(t *testing.T) {
	b := startMosquitto(t)
	rcv, ch := startSource(t, cfg311(b, "v311-rcv"), 10)
	src, _ := startSource(t, cfg311(b, "v311-pub"), 10)
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
}

// A broker that refuses the CONNECT (here Mosquitto, for a ClientID
// without the prefix its config demands) is a connect failure, retried
// with back-off.
func TestV311ConnectRefused(t *testing.T) {
	m := testbroker.StartWith(t, testbroker.Options{Extra: []string{"clientid_prefixes allowed-"}})
	b := mosquittoUnderTest(m)
	cfg := cfg311(b, "not-allowed")
	cfg.Logger, cfg.ConnectRetryMin, cfg.ConnectRetryMax = quietLogger(), 10*time.Millisecond, 20*time.Millisecond
	src, err := Start(t.Context(), cfg, func(Message, func()) {})
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
}

func TestV311Validate(t *testing.T) {
	cfg := validConfig()
	cfg.Protocol = ProtocolV311
	cfg.ReceiveMaximum, cfg.SessionExpiry = 5, time.Hour // ignored, not refused: v5 only
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid v3.1.1 config: %v", err)
	}
	cfg.ClientID, cfg.CleanStart = "", true
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "client_id: required with protocol 3.1.1") {
		t.Fatalf("v3.1.1 without a client id: %v", err)
	}
	cfg = validConfig()
	cfg.Protocol = "4"
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `protocol "4"`) {
		t.Fatalf("protocol 4: %v", err)
	}
}
