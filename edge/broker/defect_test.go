package broker

import (
	"context"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/testbroker"
)

type delivery struct {
	m   mqtt.Message
	ack func()
}

func source(t *testing.T, b *Broker, rm uint16) (*mqtt.Source, <-chan delivery) {
	t.Helper()
	ch := make(chan delivery, 100)
	src, err := mqtt.Start(t.Context(), mqtt.Config{
		Brokers: []string{b.URL()}, ClientID: "pinned", ReceiveMaximum: rm,
		Topics: []mqtt.Subscription{{Filter: "d/#", QoS: 1}}, Logger: quiet(),
	}, mqtt.Each(func(m mqtt.Message, ack func()) { ch <- delivery{m, ack} }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := src.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	return src, ch
}

func drain(ch <-chan delivery, quiet time.Duration) []delivery {
	var out []delivery
	for {
		select {
		case d := <-ch:
			out = append(out, d)
		case <-time.After(quiet):
			return out
		}
	}
}

// TestPinnedMochiDefectLosesQuotaHeldMessage pins a defect of mochi v2.7.9
// that the package Caveats describe: a QoS 1 message held back by the
// subscriber's Receive Maximum is removed from the broker's store as soon
// as it is sent, not when it is acknowledged, so a subscriber that goes
// away before acking it never gets it again. (It also leaks the send quota,
// which stalls the subscription for good once Receive Maximum messages
// have taken that path.)
//
// The test passes while the defect exists. If it fails, mochi has changed:
// re-check the Caveats, DefaultMaxInflight, and this test.
func TestPinnedMochiDefectLosesQuotaHeldMessage(t *testing.T) {
	b := startBroker(t)
	src, ch := source(t, b, 1)
	pub := testbroker.NewPublisher(t, b.Addr())
	for _, p := range []string{"m0", "m1", "m2"} {
		pub.MustPublish("d/x", []byte(p), 1)
	}
	first := drain(ch, 300*time.Millisecond) // m0 only: Receive Maximum 1
	if len(first) != 1 || string(first[0].m.Payload) != "m0" {
		t.Fatalf("first window: %d messages", len(first))
	}
	first[0].ack()
	held := drain(ch, 300*time.Millisecond) // one of m1, m2: sent from the quota-held path
	if len(held) != 1 {
		t.Fatalf("after one ack: %d messages, want 1", len(held))
	}
	lost := string(held[0].m.Payload)
	if err := src.Close(t.Context()); err != nil { // without acking it
		t.Fatal(err)
	}

	src, ch = source(t, b, 1)
	defer src.Close(context.Background())
	for _, d := range drain(ch, 500*time.Millisecond) {
		if string(d.m.Payload) == lost {
			t.Fatalf("mochi redelivered %s: the defect is fixed; update the Caveats in doc.go, DefaultMaxInflight and this test", lost)
		}
		d.ack()
	}
}
