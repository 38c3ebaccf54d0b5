package mqtt

import (
	"testing"
	"time"

	"github.com/runnel-io/runnel/internal/testbroker"
)

// What MQTT v3.1.1 does differently from v5. What both protocols promise
// is tested once per protocol (forEachProtocol in source_test.go).

// v3.1.1 has no Receive Maximum: the bound is the broker's
// max_inflight_messages. With it at 5 the broker sends 5 messages and
// waits for acks before sending more; nothing is lost or reordered.
// (TestReceiveMaximumHoldsBroker is the v5 bound, the source's own.)
func TestV311BrokerInflightHoldsBroker(t *testing.T) {
	const inflight, n = 5, 23
	m := testbroker.StartWith(t, testbroker.Options{MaxInflightMessages: inflight})
	b := mosquittoUnderTest(m)
	src, ch := startSource(t, cfgFor(b, ProtocolV311, "v311-bp"), n)
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
