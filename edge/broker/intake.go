package broker

import (
	"sync/atomic"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// Message is a PUBLISH a client sent, as the intake sees it. Topic and
// Payload are the broker's: the intake copies what it keeps.
type Message struct {
	Client  string // the publisher's client ID
	Topic   string
	Payload []byte
	QoS     byte
	Retain  bool
}

// IntakeFunc takes messages in-process, as the broker receives them: the
// edge appends them to its ingest log here, instead of subscribing to the
// broker over TCP. It is called on the publishing client's connection
// goroutine, for each message in the order that client sent them; calls
// for different clients may run at once.
//
// It returns false to leave the message to the broker, which routes it to
// its subscribers as usual. It returns true when it took the message: it
// then calls ack.Ack once the message is safe (durable), from any
// goroutine, and only then does the publisher get its acknowledgement
// (PUBACK for QoS 1; for QoS 2 the PUBREC, which waits for the ack on the
// connection goroutine). Acks of one client must be called in the order
// its messages were taken. It may block, which holds that publisher: its
// connection is not read meanwhile, so back-pressure reaches the device.
//
// A message it took still reaches the broker's other subscribers (a
// dashboard, say) and is retained if it asks to be, as if the broker had
// routed it.
type IntakeFunc func(m Message, ack Ack) bool

// Ack acknowledges one message the intake took. The zero Ack does
// nothing; so does an Ack of a QoS 0 message, and one whose publisher has
// gone (it sends the message again, with its Duplicate flag, when it
// reconnects).
type Ack struct {
	cl   *mochi.Client
	id   uint16
	qos  byte
	done chan struct{} // QoS 2: the connection goroutine waits for it
}

// Ack sends the acknowledgement.
func (a Ack) Ack() {
	switch a.qos {
	case 1:
		_ = a.cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: a.id})
	case 2:
		close(a.done)
	}
}

// intakeHook calls the IntakeFunc from mochi's OnPublish, which runs
// before mochi acknowledges or routes a message.
type intakeHook struct {
	mochi.HookBase
	srv     *mochi.Server
	fn      IntakeFunc
	closing chan struct{}
	// subscribed is set once any client has subscribed: until then a
	// taken message has no subscriber to reach, and the lookup is skipped.
	subscribed atomic.Bool
	taken      atomic.Int64
}

func (*intakeHook) ID() string { return "runnel-intake" }

func (*intakeHook) Provides(b byte) bool { return b == mochi.OnPublish || b == mochi.OnSubscribed }

func (h *intakeHook) OnSubscribed(*mochi.Client, packets.Packet, []byte) { h.subscribed.Store(true) }

func (h *intakeHook) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil // forwarded below: route it as usual
	}
	qos := pk.FixedHeader.Qos
	a := Ack{cl: cl, id: pk.PacketID, qos: qos}
	if qos == 2 {
		a.done = make(chan struct{})
	}
	m := Message{Client: cl.ID, Topic: pk.TopicName, Payload: pk.Payload, QoS: qos, Retain: pk.FixedHeader.Retain}
	if !h.fn(m, a) {
		return pk, nil
	}
	h.taken.Add(1)
	if qos == 2 {
		// mochi's own QoS 2 exchange (PUBREC, PUBREL, PUBCOMP) and
		// routing, once the message is safe.
		select {
		case <-a.done:
			return pk, nil
		case <-h.closing:
			return pk, packets.ErrRejectPacket // not acknowledged: sent again
		}
	}
	h.forward(pk)
	// mochi neither acknowledges nor routes a rejected packet: the ack is
	// the intake's, and forward routed it.
	return pk, packets.ErrRejectPacket
}

// forward routes a taken message to the broker's subscribers, and retains
// it, through the inline client (which the intake lets through).
func (h *intakeHook) forward(pk packets.Packet) {
	if !pk.FixedHeader.Retain {
		if !h.subscribed.Load() {
			return
		}
		s := h.srv.Topics.Subscribers(pk.TopicName)
		if len(s.Subscriptions) == 0 && len(s.Shared) == 0 && len(s.InlineSubscriptions) == 0 {
			return
		}
	}
	_ = h.srv.Publish(pk.TopicName, pk.Payload, pk.FixedHeader.Retain, pk.FixedHeader.Qos)
}
