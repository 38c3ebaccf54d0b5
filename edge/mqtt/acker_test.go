package mqtt

import (
	"bytes"
	"io"
	"net"
	"slices"
	"testing"

	"github.com/eclipse/paho.golang/packets"
)

// connected starts the acker's next connection generation, whose
// connection writes into a buffer.
func connected(t testing.TB, a *acker) (uint64, *bytes.Buffer) {
	t.Helper()
	w := &bytes.Buffer{}
	gen := a.gen + 1
	a.connected(gen, newBufConn(writeConn{w: w}))
	return gen, w
}

// writeConn is a net.Conn that only writes, into w.
type writeConn struct {
	net.Conn
	w io.Writer
}

func (c writeConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c writeConn) Close() error                { return nil }

// qos returns n messages of the given QoS with packet IDs from id on.
func qos(q byte, id uint16, n int) []Message {
	var ms []Message
	for i := range n {
		ms = append(ms, Message{QoS: q, PacketID: id + uint16(i)})
	}
	return ms
}

// acksIn decodes the PUBACKs written to w, in order.
func acksIn(t *testing.T, w *bytes.Buffer) []uint16 {
	t.Helper()
	var ids []uint16
	for w.Len() > 0 {
		cp, err := packets.ReadPacket(w)
		if err != nil {
			t.Fatal(err)
		}
		pa, ok := cp.Content.(*packets.Puback)
		if !ok {
			t.Fatalf("wrote %T, want PUBACK", cp.Content)
		}
		ids = append(ids, pa.PacketID)
	}
	return ids
}

func TestAckerOrder(t *testing.T) {
	tests := []struct {
		name  string
		order []int    // indexes of the five messages, in the order acked
		want  []uint16 // packet IDs on the wire
		after []int    // how many PUBACKs are out after each ack
	}{
		{"in order", []int{0, 1, 2, 3, 4}, []uint16{10, 11, 12, 13, 14}, []int{1, 2, 3, 4, 5}},
		{"reversed", []int{4, 3, 2, 1, 0}, []uint16{10, 11, 12, 13, 14}, []int{0, 0, 0, 0, 5}},
		{"gap", []int{0, 2, 3, 1, 4}, []uint16{10, 11, 12, 13, 14}, []int{1, 1, 1, 4, 5}},
		{"twice", []int{0, 0, 1, 1, 2, 3, 4}, []uint16{10, 11, 12, 13, 14}, []int{1, 1, 2, 2, 3, 4, 5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAcker(64)
			gen, w := connected(t, a)
			var seqs []uint64
			for i := range 5 {
				seq, _, _ := a.track(gen, qos(1, uint16(10+i), 1))
				seqs = append(seqs, seq)
			}
			var ids []uint16
			for k, i := range tt.order {
				a.ack(gen, seqs[i], seqs[i]+1)
				ids = append(ids, acksIn(t, w)...)
				if len(ids) != tt.after[k] {
					t.Fatalf("after acking #%d (step %d): %d PUBACKs out, want %d", i, k, len(ids), tt.after[k])
				}
			}
			if !slices.Equal(ids, tt.want) {
				t.Fatalf("PUBACKs %v, want %v", ids, tt.want)
			}
			if a.sent.Load() != 5 || len(a.window) != 0 {
				t.Fatalf("sent %d, window %d", a.sent.Load(), len(a.window))
			}
		})
	}
}

// The point of generations: an ack for a message of a dead connection must
// not reach the next connection, where the broker may have reused its
// packet ID for another message.
func TestAckerDropsAcksOfOldConnections(t *testing.T) {
	a := newAcker(64)
	gen1, w1 := connected(t, a)
	seq1, _, _ := a.track(gen1, qos(1, 7, 1))
	_, _, _ = a.track(gen1, qos(1, 8, 1))
	a.lost(gen1)
	if a.ack(gen1, seq1, seq1+1) {
		t.Fatal("ack while disconnected reported sent")
	}
	gen2, w2 := connected(t, a)
	seq2, _, _ := a.track(gen2, qos(1, 7, 1)) // the broker reuses ID 7 for a new message
	if a.ack(gen1, seq1, seq1+1) {
		t.Fatal("ack of generation 1 on generation 2 reported sent")
	}
	// A late batch of the old connection (its reader still finishing) is
	// not tracked at all.
	if first, end, _ := a.track(gen1, qos(1, 9, 3)); first != end {
		t.Fatalf("old generation's batch tracked as %d..%d", first, end)
	}
	if got := append(acksIn(t, w1), acksIn(t, w2)...); len(got) != 0 {
		t.Fatalf("stale acks wrote PUBACKs %v", got)
	}
	if !a.ack(gen2, seq2, seq2+1) {
		t.Fatal("live ack dropped")
	}
	if got := acksIn(t, w2); !slices.Equal(got, []uint16{7}) {
		t.Fatalf("PUBACKs %v, want [7]", got)
	}
	if a.stale.Load() != 2 {
		t.Fatalf("stale = %d, want 2", a.stale.Load())
	}
}

// A broker that sends more than Receive Maximum unacknowledged messages is
// noticed (and the messages still delivered: dropping them would lose
// them).
func TestAckerCountsReceiveMaximumOverflow(t *testing.T) {
	a := newAcker(2)
	gen, _ := connected(t, a)
	var overs []bool
	for i := range 4 {
		_, _, over := a.track(gen, qos(1, uint16(i+1), 1))
		overs = append(overs, over)
	}
	if !slices.Equal(overs, []bool{false, false, true, true}) || a.overflow.Load() != 2 {
		t.Fatalf("over = %v, overflow = %d", overs, a.overflow.Load())
	}
}

func TestAckerQoS2SendsPubrec(t *testing.T) {
	a := newAcker(64)
	gen, w := connected(t, a)
	seq, _, _ := a.track(gen, qos(2, 9, 1))
	a.ack(gen, seq, seq+1)
	cp, err := packets.ReadPacket(w)
	if err != nil {
		t.Fatal(err)
	}
	if pr, ok := cp.Content.(*packets.Pubrec); !ok || pr.PacketID != 9 {
		t.Fatalf("wrote %#v, want PUBREC 9", cp.Content)
	}
}

// A batch acked at once: its QoS 0 messages take no acknowledgement, the
// others go out in order, in one write when corked.
func TestAckerBatch(t *testing.T) {
	a := newAcker(64)
	gen, w := connected(t, a)
	msgs := append(append(qos(1, 1, 2), qos(0, 0, 2)...), qos(1, 3, 2)...)
	first, end, _ := a.track(gen, msgs)
	if end-first != 4 {
		t.Fatalf("tracked %d, want the 4 QoS 1 messages", end-first)
	}
	a.batch(func() { a.ack(gen, first, end) })
	if got := acksIn(t, w); !slices.Equal(got, []uint16{1, 2, 3, 4}) {
		t.Fatalf("PUBACKs %v", got)
	}
	if a.ack(gen, first, end) {
		t.Fatal("second ack reported sent")
	}
}

// Steady state: tracking and acking a batch allocate nothing.
func BenchmarkAck(b *testing.B) {
	a := newAcker(1024)
	gen, _ := connected(b, a)
	a.conn = newBufConn(writeConn{w: io.Discard})
	msgs := qos(1, 1, 64)
	b.ReportAllocs()
	for b.Loop() {
		first, end, _ := a.track(gen, msgs)
		a.batch(func() { a.ack(gen, first, end) })
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(msgs)), "ns/msg")
}
