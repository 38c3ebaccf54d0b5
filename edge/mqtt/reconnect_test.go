package mqtt

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/eclipse/paho.golang/packets"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// scriptedBroker plays an MQTT v5 broker over net.Pipe for tests that run
// in a synctest bubble, where time is fake and a real socket would not do.
// The first failFirst dials fail; later ones get a connection whose broker
// side answers CONNECT, SUBSCRIBE and PINGREQ and records every packet.
//
// One goroutine a connection writes the broker's side of the pipe, the
// replies and the test's publishes alike: a goroutine waiting for a write
// lock is not durably blocked, so a lock there could stop fake time while
// its holder waits for a reader that only fake time wakes.
type scriptedBroker struct {
	t         *testing.T
	failFirst int
	refuse    string // a filter whose subscription is refused (not authorized)

	mu    sync.Mutex
	dials []time.Time
	conns []*brokerConn // broker side, one per successful dial
	seen  []*packets.ControlPacket
	wg    sync.WaitGroup
}

func (b *scriptedBroker) dial(_ context.Context, _ *url.URL) (net.Conn, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dials = append(b.dials, time.Now())
	if len(b.dials) <= b.failFirst {
		return nil, errors.New("connection refused (scripted)")
	}
	client, server := net.Pipe()
	c := &brokerConn{Conn: server, out: make(chan *packets.ControlPacket), done: make(chan struct{})}
	b.conns = append(b.conns, c)
	b.wg.Add(2)
	go b.serve(c)
	go b.write(c)
	return client, nil
}

// brokerConn is the broker's side of one connection: out carries the
// packets to write, done closes when serve returns.
type brokerConn struct {
	net.Conn
	out  chan *packets.ControlPacket
	done chan struct{}
}

// write is the connection's only writer.
func (b *scriptedBroker) write(c *brokerConn) {
	defer b.wg.Done()
	for {
		select {
		case cp := <-c.out:
			if _, err := cp.WriteTo(c.Conn); err != nil && !errors.Is(err, io.ErrClosedPipe) {
				b.t.Errorf("write %v: %v", cp, err)
			}
		case <-c.done:
			return
		}
	}
}

// send hands a packet to the connection's writer; false once it is gone.
func (c *brokerConn) send(cp *packets.ControlPacket) bool {
	select {
	case c.out <- cp:
		return true
	case <-c.done:
		return false
	}
}

func (b *scriptedBroker) serve(c *brokerConn) {
	defer b.wg.Done()
	defer close(c.done)
	defer c.Close()
	for {
		cp, err := packets.ReadPacket(c)
		if err != nil {
			return // closed by either side
		}
		b.mu.Lock()
		b.seen = append(b.seen, cp)
		b.mu.Unlock()
		var reply *packets.ControlPacket
		switch p := cp.Content.(type) {
		case *packets.Connect:
			reply = packets.NewControlPacket(packets.CONNACK)
			ca := reply.Content.(*packets.Connack)
			ca.SessionPresent = !p.CleanStart
			if p.ClientID == "" {
				ca.Properties = &packets.Properties{AssignedClientID: "assigned-1"}
			}
		case *packets.Subscribe:
			reply = packets.NewControlPacket(packets.SUBACK)
			sa := reply.Content.(*packets.Suback)
			sa.PacketID = p.PacketID
			for _, s := range p.Subscriptions {
				if s.Topic == b.refuse {
					sa.Reasons = append(sa.Reasons, 0x87) // not authorized
					continue
				}
				sa.Reasons = append(sa.Reasons, s.QoS)
			}
		case *packets.Pingreq:
			reply = packets.NewControlPacket(packets.PINGRESP)
		case *packets.Disconnect:
			return
		}
		if reply != nil && !c.send(reply) {
			return
		}
	}
}

// publish sends a QoS 1 PUBLISH on the newest connection.
func (b *scriptedBroker) publish(id uint16, payload string) {
	b.mu.Lock()
	c := b.conns[len(b.conns)-1]
	b.mu.Unlock()
	cp := packets.NewControlPacket(packets.PUBLISH)
	p := cp.Content.(*packets.Publish)
	p.Topic, p.Payload, p.QoS, p.PacketID = "s/1", []byte(payload), 1, id
	c.send(cp)
}

// drop closes the newest connection from the broker side.
func (b *scriptedBroker) drop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.conns[len(b.conns)-1].Close()
}

// packetsOf returns the recorded packets of one type, in order.
func packetsOf[T any](b *scriptedBroker) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []T
	for _, cp := range b.seen {
		if p, ok := cp.Content.(T); ok {
			out = append(out, p)
		}
	}
	return out
}

func (b *scriptedBroker) dialTimes() []time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]time.Time(nil), b.dials...)
}

// TestReconnect runs the connection loop on fake time: back-off between
// failed dials, CONNECT properties, resubscription after a drop, the
// back-off reset after a stable connection, acks dropped across
// connections, keep-alive pings, and a clean DISCONNECT on Close.
func TestReconnect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBroker{t: t, failFirst: 2}
		type delivered struct {
			m   Message
			ack func()
		}
		got := make(chan delivered, 10)
		cfg := Config{
			Brokers:    []string{"mqtt://broker.invalid:1883"},
			ClientID:   "edge-7",
			CleanStart: true, // first connection only
			Topics:     []Subscription{{Filter: "s/#", QoS: 1}, {Filter: "t", QoS: 0}},
			Logger:     quietLogger(),
		}
		src, err := start(t.Context(), cfg, Each(func(m Message, ack func()) { got <- delivered{m, ack} }),
			testHooks{dial: b.dial, rand: func() float64 { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if err := src.WaitConnected(t.Context()); err != nil {
			t.Fatal(err)
		}

		// Back-off with rand = 0: the floor of each step, 250ms then 500ms.
		dials := b.dialTimes()
		if len(dials) != 3 || dials[1].Sub(t0) != 250*time.Millisecond || dials[2].Sub(dials[1]) != 500*time.Millisecond {
			t.Fatalf("dial times since start: %v", since(t0, dials))
		}
		c := packetsOf[*packets.Connect](b)[0]
		if c.ClientID != "edge-7" || !c.CleanStart || c.KeepAlive != 30 ||
			*c.Properties.SessionExpiryInterval != 86400 || *c.Properties.ReceiveMaximum != DefaultReceiveMaximum {
			t.Fatalf("CONNECT %v", c)
		}

		// A message acked while connected is PUBACKed.
		b.publish(1, "one")
		d := <-got
		d.ack()
		synctest.Wait()
		if pa := packetsOf[*packets.Puback](b); len(pa) != 1 || pa[0].PacketID != 1 {
			t.Fatalf("PUBACKs %v, want one for packet 1", pa)
		}

		// Hold the ack of a second message across a drop that comes after a
		// stable minute (keep-alive pings included).
		b.publish(2, "two")
		held := <-got
		time.Sleep(time.Minute)
		if n := len(packetsOf[*packets.Pingreq](b)); n < 1 {
			t.Fatalf("%d PINGREQs in a minute with keep-alive 30s", n)
		}
		tDrop := time.Now()
		b.drop()
		synctest.Wait()
		if src.Connected() {
			t.Fatal("Connected() after the drop")
		}
		if err := src.WaitConnected(t.Context()); err != nil {
			t.Fatal(err)
		}
		dials = b.dialTimes()
		if len(dials) != 4 || dials[3].Sub(tDrop) != 250*time.Millisecond {
			t.Fatalf("after a stable connection the back-off restarts at 250ms; dials since drop: %v", since(tDrop, dials))
		}
		conns := packetsOf[*packets.Connect](b)
		if len(conns) != 2 || conns[1].CleanStart {
			t.Fatalf("reconnect CONNECT has CleanStart=%v, want false (CleanStart is for the first connection only)", conns[1].CleanStart)
		}
		if subs := packetsOf[*packets.Subscribe](b); len(subs) != 2 || len(subs[1].Subscriptions) != 2 ||
			subs[1].Subscriptions[0].RetainHandling != 1 {
			t.Fatalf("SUBSCRIBEs %v, want the same two filters on each connection, retain handling 1", subs)
		}

		// The held ack belongs to the dead connection: dropped, not sent
		// on the new one (where the broker may reuse packet ID 2).
		held.ack()
		synctest.Wait()
		if pa := packetsOf[*packets.Puback](b); len(pa) != 1 {
			t.Fatalf("PUBACKs %v after a stale ack, want still one", pa)
		}
		st := src.Stats()
		if st.StaleAcks != 1 || st.Acked != 1 || st.AcksSent != 1 || st.Connects != 2 || st.Reconnects != 1 ||
			st.ConnectFailures != 2 || st.Received != 2 {
			t.Fatalf("Stats() = %+v", st)
		}

		if err := src.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		b.wg.Wait()
		if ds := packetsOf[*packets.Disconnect](b); len(ds) != 1 || ds[0].ReasonCode != 0 {
			t.Fatalf("DISCONNECTs %v, want one normal disconnect", ds)
		}
		if err := src.Close(t.Context()); !errors.Is(err, ErrClosed) {
			t.Fatalf("second Close = %v, want ErrClosed", err)
		}
	})
}

// A connection that drops right after it comes up does not reset the
// back-off: a broker that keeps kicking us is not hammered.
func TestFlappingConnectionBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBroker{t: t}
		cfg := Config{Brokers: []string{"mqtt://x"}, ClientID: "c", Topics: []Subscription{{Filter: "#", QoS: 1}}, Logger: quietLogger()}
		src, err := start(t.Context(), cfg, func(*Batch) {}, testHooks{dial: b.dial, rand: func() float64 { return 0 }})
		if err != nil {
			t.Fatal(err)
		}
		var drops []time.Time
		for range 4 {
			if err := src.WaitConnected(t.Context()); err != nil {
				t.Fatal(err)
			}
			drops = append(drops, time.Now())
			b.drop()
			synctest.Wait()
		}
		if err := src.WaitConnected(t.Context()); err != nil {
			t.Fatal(err)
		}
		dials := b.dialTimes()
		want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second}
		for i, w := range want {
			if got := dials[i+1].Sub(drops[i]); got != w {
				t.Errorf("reconnect %d came %v after the drop, want %v", i+1, got, w)
			}
		}
		if err := src.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		b.wg.Wait()
	})
}

// Close while the broker is unreachable returns promptly, mid back-off.
func TestCloseWhileRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBroker{t: t, failFirst: 1 << 30}
		cfg := Config{Brokers: []string{"mqtt://x"}, ClientID: "c", Topics: []Subscription{{Filter: "#"}}, Logger: quietLogger()}
		src, err := start(t.Context(), cfg, func(*Batch) {}, testHooks{dial: b.dial})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if n := src.Stats().ConnectFailures; n < 3 || n > 12 {
			t.Fatalf("%d attempts in a minute with back-off 250ms..30s", n)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := src.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if err := src.WaitConnected(t.Context()); !errors.Is(err, ErrClosed) {
			t.Fatalf("WaitConnected after Close = %v, want ErrClosed", err)
		}
	})
}

func since(t0 time.Time, ts []time.Time) []time.Duration {
	var out []time.Duration
	for _, t := range ts {
		out = append(out, t.Sub(t0))
	}
	return out
}

// With no ClientID (CleanStart) the broker assigns one; reconnects reuse it
// so that the session survives them. A refused filter is counted and the
// others stay subscribed.
func TestAssignedClientIDAndRefusedFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &scriptedBroker{t: t, refuse: "secret/#"}
		cfg := Config{Brokers: []string{"mqtt://x"}, CleanStart: true, Logger: quietLogger(),
			Topics: []Subscription{{Filter: "s/#", QoS: 1}, {Filter: "secret/#", QoS: 1}}}
		src, err := start(t.Context(), cfg, func(*Batch) {}, testHooks{dial: b.dial})
		if err != nil {
			t.Fatal(err)
		}
		if err := src.WaitConnected(t.Context()); err != nil {
			t.Fatal(err)
		}
		b.drop()
		synctest.Wait()
		if err := src.WaitConnected(t.Context()); err != nil {
			t.Fatal(err)
		}
		cs := packetsOf[*packets.Connect](b)
		if len(cs) != 2 || cs[0].ClientID != "" || !cs[0].CleanStart || cs[1].ClientID != "assigned-1" || cs[1].CleanStart {
			t.Fatalf("CONNECTs: %v", cs)
		}
		if st := src.Stats(); st.SubscribeErrors != 2 { // refused on each of the two connections
			t.Fatalf("Stats() = %+v, want 2 subscribe errors", st)
		}
		if err := src.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		b.wg.Wait()
	})
}
