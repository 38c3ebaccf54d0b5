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

// acker is where the source's acknowledgements go. It wraps paho's session
// state (which survives reconnects, like the broker's session) and takes
// over the one job paho would otherwise do itself: sending PUBACK (or
// PUBREC) for received messages.
//
// paho is run with automatic acknowledgement, so it calls Ack once the
// message callback returns; acker ignores that call. The handler's ack
// func calls ack instead, and acker sends the acknowledgements of one
// connection in arrival order (MQTT 4.6), holding an early ack until every
// earlier message of the same connection is acknowledged.
//
// Why not paho's EnableManualAcknowledgment: it flushes acks from a
// 50 ms ticker (so a broker that honours Receive Maximum waits for it: 64
// messages per 50 ms is 1280 msg/s), it drops acks not yet flushed when
// the client disconnects (paho.golang issue #327), and it cannot tell an
// ack of a message from a dead connection from one of a live connection
// that reuses the packet ID (issue #160). acker numbers connections
// instead: an ack carries the generation of the connection its message
// came on, and an ack for another generation is dropped (the broker
// redelivers the message on the new connection).
//
// The MQTT v3.1.1 connection (conn311.go) has no paho.golang session:
// there acker writes the PUBACKs itself, through the ackWriter the
// connection registers with connected.
//
// Lock order: acker.mu, then paho's session state lock (inside inner) or
// the connection's write lock.
type acker struct {
	inner *state.State
	limit int // the Receive Maximum we asked the broker to respect

	// out writes the acknowledgements of generation gen: paho's session
	// state for v5 (stateAcks), the bare connection for v3.1.1.
	out ackWriter

	mu     sync.Mutex
	gen    uint64 // connection generation: incremented by each CONNACK
	up     bool   // a connection of generation gen is live
	base   uint64 // sequence number of window[0]
	window []pendingAck

	scratch packets.Publish // reused for each ack; paho's Ack does not keep it
	conn    *bufConn        // the connection of generation gen

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

// ackWriter writes one acknowledgement, PUBACK for QoS 1 or PUBREC for
// QoS 2, on the live connection. An error is a connection error: the
// connection's reader sees it too and the source reconnects.
type ackWriter interface {
	writeAck(id uint16, qos byte) error
}

// stateAcks sends the acks of MQTT v5 connections. A PUBACK is written
// straight to the connection: for QoS 1 paho.golang's session state keeps
// nothing (its Ack only encodes and writes the packet, allocating a few
// times per ack), so the 4-byte form MQTT v5 allows for success without
// properties (§3.4.2.1) is the same acknowledgement, written the way
// conn311 writes it. A PUBREC goes through the session state, which must
// remember it until the PUBREL.
type stateAcks struct{ a *acker }

func (s stateAcks) writeAck(id uint16, qos byte) error {
	if c := s.a.conn; qos == 1 && c != nil {
		b := [4]byte{packets.PUBACK << 4, 2, byte(id >> 8), byte(id)}
		c.Lock()
		defer c.Unlock() // flushes, unless corked
		_, err := c.Write(b[:])
		return err
	}
	s.a.scratch.PacketID, s.a.scratch.QoS = id, qos
	return s.a.inner.Ack(&s.a.scratch)
}

func newAcker(receiveMaximum uint16) *acker {
	return &acker{inner: state.NewInMemory(), limit: int(receiveMaximum)}
}

// track records a received QoS 1/2 message and returns the generation and
// sequence number its ack will name. over reports that the broker has
// now sent more unacknowledged messages than Receive Maximum allows, which
// a compliant broker never does (Mosquitto 2.0.11 does; see doc.go).
func (a *acker) track(id uint16, qos byte) (gen, seq uint64, over bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.window = append(a.window, pendingAck{id: id, qos: qos})
	if len(a.window) > a.limit {
		a.overflow.Add(1)
		over = true
	}
	return a.gen, a.base + uint64(len(a.window)) - 1, over
}

// ack acknowledges message seq of connection gen: it sends that ack and any
// later ones it was holding, in arrival order. It reports false when the
// ack was dropped because the connection is gone (or seq was acked
// before).
func (a *acker) ack(gen, seq uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if gen != a.gen || !a.up {
		a.stale.Add(1)
		return false
	}
	i := seq - a.base // wraps to a huge value when seq < base: already sent
	if i >= uint64(len(a.window)) || a.window[i].acked {
		return false
	}
	a.window[i].acked = true
	n := 0
	for n < len(a.window) && a.window[n].acked {
		p := a.window[n]
		// Errors are connection errors: paho's reader sees the same
		// broken connection and reconnects; the broker redelivers.
		_ = a.out.writeAck(p.id, p.qos)
		a.sent.Add(1)
		n++
	}
	if n > 0 {
		// Shift rather than reslice so the backing array is reused; the
		// window is at most Receive Maximum long.
		a.window = a.window[:copy(a.window, a.window[n:])]
		a.base += uint64(n)
	}
	return true
}

// ConAckReceived starts a new generation: acks of earlier connections are
// dropped from now on.
func (a *acker) ConAckReceived(conn io.Writer, cp *packets.Connect, ca *packets.Connack) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	bc, _ := conn.(*bufConn)
	a.newGeneration(stateAcks{a}, bc)
	return a.inner.ConAckReceived(conn, cp, ca)
}

// connected starts a new generation whose acks out writes (MQTT v3.1.1,
// which has no paho.golang session); c, if not nil, is corked by batch.
func (a *acker) connected(out ackWriter, c *bufConn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.newGeneration(out, c)
}

// newGeneration forgets the previous connection's unacknowledged messages
// (the broker redelivers them); a.mu must be held.
func (a *acker) newGeneration(out ackWriter, c *bufConn) {
	a.gen++
	a.up = true
	a.out, a.conn = out, c
	a.base += uint64(len(a.window))
	a.window = a.window[:0]
}

func (a *acker) ConnectionLost(dp *packets.Disconnect) error {
	a.lost()
	return a.inner.ConnectionLost(dp)
}

// lost marks the current generation dead: its acks are dropped from now on.
func (a *acker) lost() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.up = false
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

// Ack is paho's automatic acknowledgement, called when the message
// callback returns; the handler's ack func does the real one.
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
