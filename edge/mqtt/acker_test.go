package mqtt

import (
	"bytes"
	"slices"
	"testing"

	"github.com/eclipse/paho.golang/packets"
)

// connected returns an acker whose connection writes into a buffer.
func connected(t *testing.T, a *acker) *bytes.Buffer {
	t.Helper()
	var w bytes.Buffer
	if err := a.ConAckReceived(&w, &packets.Connect{}, &packets.Connack{SessionPresent: true}); err != nil {
		t.Fatal(err)
	}
	return &w
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
			w := connected(t, a)
			type msg struct{ gen, seq uint64 }
			var msgs []msg
			for i := range 5 {
				gen, seq, _ := a.track(uint16(10+i), 1)
				msgs = append(msgs, msg{gen, seq})
			}
			var ids []uint16
			for k, i := range tt.order {
				a.ack(msgs[i].gen, msgs[i].seq)
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
	w1 := connected(t, a)
	gen1, seq1, _ := a.track(7, 1)
	_, _, _ = a.track(8, 1)
	if err := a.ConnectionLost(nil); err != nil {
		t.Fatal(err)
	}
	if a.ack(gen1, seq1) {
		t.Fatal("ack while disconnected reported sent")
	}
	w2 := connected(t, a)
	gen2, seq2, _ := a.track(7, 1) // the broker reuses ID 7 for a new message
	if a.ack(gen1, seq1) {
		t.Fatal("ack of generation 1 on generation 2 reported sent")
	}
	if got := append(acksIn(t, w1), acksIn(t, w2)...); len(got) != 0 {
		t.Fatalf("stale acks wrote PUBACKs %v", got)
	}
	if !a.ack(gen2, seq2) {
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
	connected(t, a)
	var overs []bool
	for i := range 4 {
		_, _, over := a.track(uint16(i+1), 1)
		overs = append(overs, over)
	}
	if !slices.Equal(overs, []bool{false, false, true, true}) || a.overflow.Load() != 2 {
		t.Fatalf("over = %v, overflow = %d", overs, a.overflow.Load())
	}
}

func TestAckerQoS2SendsPubrec(t *testing.T) {
	a := newAcker(64)
	w := connected(t, a)
	gen, seq, _ := a.track(9, 2)
	a.ack(gen, seq)
	cp, err := packets.ReadPacket(w)
	if err != nil {
		t.Fatal(err)
	}
	if pr, ok := cp.Content.(*packets.Pubrec); !ok || pr.PacketID != 9 {
		t.Fatalf("wrote %#v, want PUBREC 9", cp.Content)
	}
}

// Steady state: tracking and acking allocate only what paho's PUBACK
// encoding does.
func BenchmarkAck(b *testing.B) {
	a := newAcker(64)
	var w discard
	if err := a.ConAckReceived(&w, &packets.Connect{}, &packets.Connack{SessionPresent: true}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var id uint16
	for b.Loop() {
		id++
		gen, seq, _ := a.track(id, 1)
		a.ack(gen, seq)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
