package mqtt

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/eclipse/paho.golang/packets"
	paholog "github.com/eclipse/paho.golang/paho/log"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/eclipse/paho.golang/paho/session/state"
)

// acker is where the source's acknowledgements go. It holds the
// acknowledgements of the current connection's QoS 1/2 messages until the
// handler acks them, and writes them in arrival order (MQTT 4.6): an early
// ack waits until every earlier message of the same connection is
// acknowledged. It numbers connections: an ack carries the generation of
// the connection its message came on, and an ack for another generation is
// dropped (the broker redelivers the message on the new connection), so
// an ack can never hit a packet ID the broker reused on a new connection.
//
// The source's reader (wire.go) takes every PUBLISH itself, so neither
// client library ever sees one to acknowledge. For MQTT v5, acker also
// wraps paho.golang's session state, which keeps the packet IDs of our own
// publishes.
//
// Why not paho's EnableManualAcknowledgment: it flushes acks from a
// 50 ms ticker (so a broker that honours Receive Maximum waits for it: 64
// messages per 50 ms is 1280 msg/s), it drops acks not yet flushed when
// the client disconnects (paho.golang issue #327), and it cannot tell an
// ack of a message from a dead connection from one of a live connection
// that reuses the packet ID (issue #160).
//
// Lock order: acker.mu, then the connection's write lock.
type acker struct {
	inner *state.State
	limit int // the Receive Maximum we asked the broker to respect

	mu     sync.Mutex
	gen    uint64   // connection generation of conn
	up     bool     // a connection of generation gen is live
	conn   *bufConn // the connection of generation gen
	base   uint64   // sequence number of window[0]
	window []pendingAck

	acked    atomic.Uint64 // messages acked by the handler on a live connection
	sent     atomic.Uint64 // acknowledgements written to a connection
	stale    atomic.Uint64 // acks dropped: their connection was gone
	overflow atomic.Uint64 // messages received beyond Receive Maximum
}

// pendingAck is one QoS 1/2 message of the current connection that has not
// been acknowledged to the broker yet.
type pendingAck struct {
	id    uint16
	qos   byte
	acked bool // the handler acked it; waiting for earlier ones
}

var _ session.SessionManager = (*acker)(nil)

func newAcker(receiveMaximum uint16) *acker {
	return &acker{inner: state.NewInMemory(), limit: int(receiveMaximum)}
}

// track records the QoS 1/2 messages among msgs, received on connection
// gen, and returns the sequence numbers their acks name, first to end
// (exclusive). over reports that the broker has now sent more
// unacknowledged messages than Receive Maximum allows, which a compliant
// broker never does (Mosquitto 2.0.11 does; see doc.go). Messages of a
// connection that is no longer the current one get an empty range: their
// acks would be dropped anyway.
func (a *acker) track(gen uint64, msgs []Message) (first, end uint64, over bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	first = a.base + uint64(len(a.window))
	if gen != a.gen || !a.up {
		return first, first, false
	}
	for i := range msgs {
		if m := &msgs[i]; m.QoS > 0 {
			a.window = append(a.window, pendingAck{id: m.PacketID, qos: m.QoS})
			if len(a.window) > a.limit {
				a.overflow.Add(1)
				over = true
			}
		}
	}
	return first, a.base + uint64(len(a.window)), over
}

// ack acknowledges messages first to end (exclusive) of connection gen:
// it sends their acks and any later ones it was holding, in arrival order.
// It reports false when the acks were dropped because the connection is
// gone (or they were acked before).
func (a *acker) ack(gen, first, end uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if gen != a.gen || !a.up {
		a.stale.Add(end - first)
		return false
	}
	i := first - a.base // wraps to a huge value when first < base: already sent
	j := end - a.base
	if i >= uint64(len(a.window)) || j > uint64(len(a.window)) || a.window[i].acked {
		return false
	}
	for k := i; k < j; k++ {
		a.window[k].acked = true
	}
	a.acked.Add(end - first)
	n := 0
	for n < len(a.window) && a.window[n].acked {
		p := a.window[n]
		typ := byte(typePuback)
		if p.qos == 2 {
			typ = typePubrec
		}
		// Errors are connection errors: the reader sees the same broken
		// connection and the source reconnects; the broker redelivers.
		_ = a.conn.writeShort(typ, p.id)
		a.sent.Add(1)
		n++
	}
	if n > 0 {
		// Shift rather than reslice so the backing array is reused.
		a.window = a.window[:copy(a.window, a.window[n:])]
		a.base += uint64(n)
	}
	return true
}

// connected starts generation gen, the connection c, whose CONNACK the
// reader has just read: acks of earlier connections are dropped from now
// on, and their unacknowledged messages forgotten (the broker redelivers
// them).
func (a *acker) connected(gen uint64, c *bufConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen, a.up, a.conn = gen, true, c
	a.base += uint64(len(a.window))
	a.window = a.window[:0]
}

// lost marks generation gen dead: its acks are dropped from now on.
func (a *acker) lost(gen uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen == gen {
		a.up = false
	}
}

// batch runs fn (which acks) with the current connection corked, so the
// acks it sends leave in one write.
func (a *acker) batch(fn func()) {
	a.mu.Lock()
	c := a.conn
	a.mu.Unlock()
	if c == nil {
		fn()
		return
	}
	c.cork()
	defer c.uncork()
	fn()
}

// The rest is paho.golang's session: our own publishes' packet IDs.

func (a *acker) ConAckReceived(conn io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	return a.inner.ConAckReceived(conn, cp, ca)
}

func (a *acker) ConnectionLost(dp *packets.Disconnect) error { return a.inner.ConnectionLost(dp) }

// Ack is paho's acknowledgement of a received message; paho never
// receives one (the reader takes them).
func (a *acker) Ack(*packets.Publish) error { return nil }

func (a *acker) AddToSession(ctx context.Context, p session.Packet, resp chan<- packets.ControlPacket) error {
	return a.inner.AddToSession(ctx, p, resp)
}

func (a *acker) PacketReceived(p *packets.ControlPacket, pubChan chan<- *packets.Publish) error {
	return a.inner.PacketReceived(p, pubChan)
}

func (a *acker) Close() error                    { return a.inner.Close() }
func (a *acker) SetErrorLogger(l paholog.Logger) { a.inner.SetErrorLogger(l) }
func (a *acker) SetDebugLogger(l paholog.Logger) { a.inner.SetDebugLogger(l) }
