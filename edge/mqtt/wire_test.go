package mqtt

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

	"github.com/runnel-io/runnel/internal/testbroker"
)

// encodePublish is a PUBLISH as paho.golang writes it (v5, with a
// property so the properties section is not empty).
func encodePublish(t testing.TB, topic string, payload []byte, qos byte, id uint16, dup bool) []byte {
	t.Helper()
	cp := packets.NewControlPacket(packets.PUBLISH)
	p := cp.Content.(*packets.Publish)
	p.Topic, p.Payload, p.QoS, p.PacketID, p.Duplicate = topic, payload, qos, id, dup
	p.Properties = &packets.Properties{ContentType: "application/json"}
	var b bytes.Buffer
	if _, err := cp.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestParsePublishRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		topic   string
		payload string
		qos     byte
		id      uint16
		dup     bool
	}{
		{"plant/north/temp", `{"t":21.5}`, 1, 7, false},
		{"a", "", 1, 65535, true},
		{"q0", "x", 0, 0, false},
		{"q2", strings.Repeat("y", 300), 2, 9, false},
	} {
		b := encodePublish(t, tc.topic, []byte(tc.payload), tc.qos, tc.id, tc.dup)
		typ, flags, hdr, rem, ok, err := frame(b)
		if err != nil || !ok || typ != typePublish || hdr+rem != len(b) {
			t.Fatalf("frame(%q) = %d %d %d %v %v", tc.topic, typ, hdr, rem, ok, err)
		}
		m, err := parsePublish(flags, b[hdr:], rem, true)
		if err != nil {
			t.Fatal(err)
		}
		if m.Topic != tc.topic || string(m.Payload) != tc.payload || m.Size != len(tc.payload) || m.QoS != tc.qos ||
			m.PacketID != tc.id || m.Duplicate != tc.dup {
			t.Fatalf("parsed %+v, want %+v", m, tc)
		}
		// Only the start of the packet: the payload is cut, its size kept.
		if len(tc.payload) > 10 {
			cut := b[hdr : len(b)-10]
			m, err := parsePublish(flags, cut, rem, true)
			if err != nil || m.Size != len(tc.payload) || len(m.Payload) != len(tc.payload)-10 {
				t.Fatalf("cut packet: %+v, %v", m, err)
			}
		}
	}
}

func TestParsePublishRefusesMalformed(t *testing.T) {
	for name, c := range map[string]struct {
		flags byte
		body  []byte
	}{
		"qos 3":            {0x6, []byte{0, 1, 'a', 0, 1, 0}},
		"short":            {0x2, []byte{0}},
		"topic past end":   {0x2, []byte{0, 9, 'a'}},
		"no packet id":     {0x2, []byte{0, 1, 'a', 0}},
		"packet id 0":      {0x2, []byte{0, 1, 'a', 0, 0, 0}},
		"bad props length": {0x2, []byte{0, 1, 'a', 0, 1, 0xff, 0xff, 0xff, 0xff, 0x7f}},
		"props past end":   {0x2, []byte{0, 1, 'a', 0, 1, 9, 1}},
	} {
		if _, err := parsePublish(c.flags, c.body, len(c.body), true); !errors.Is(err, errMalformed) {
			t.Errorf("%s: err = %v, want errMalformed", name, err)
		}
	}
	if _, _, _, _, _, err := frame([]byte{0x30, 0xff, 0xff, 0xff, 0xff, 1}); !errors.Is(err, errMalformed) {
		t.Errorf("5-byte remaining length: %v", err)
	}
	if _, _, _, _, ok, err := frame([]byte{0x30, 0xff}); ok || err != nil {
		t.Errorf("partial remaining length: ok %v err %v", ok, err)
	}
}

// FuzzParsePublish: no input panics the reader's decoders, and what
// parses is consistent with the bytes it came from.
func FuzzParsePublish(f *testing.F) {
	f.Add(encodePublish(f, "plant/a/temp", []byte(`{"t":1}`), 1, 3, false), true)
	f.Add(encodePublish(f, "x", nil, 0, 0, true), false)
	f.Add([]byte{0x30, 0x80, 0x80, 0x80, 0x80, 0x01}, true)
	f.Fuzz(func(t *testing.T, b []byte, v5 bool) {
		typ, flags, hdr, rem, ok, err := frame(b)
		if err != nil || !ok || typ != typePublish {
			return
		}
		body := b[hdr:min(len(b), hdr+rem)]
		m, err := parsePublish(flags, body, rem, v5)
		if err != nil {
			return
		}
		if len(m.Payload) > m.Size || len(m.Topic) > len(body) || (m.QoS > 0) != (m.PacketID != 0) {
			t.Fatalf("inconsistent %+v from %d bytes", m, len(body))
		}
	})
}

// QoS 2 through the reader: PUBREC when acked, PUBCOMP for the broker's
// PUBREL, and the broker considers the message delivered: more messages
// than the in-flight bound (Receive Maximum 10 with v5, Mosquitto's
// max_inflight_messages 20 with v3.1.1) all arrive, which they would not
// if the flows were left incomplete, and a new source with the session
// gets nothing again.
func TestQoS2Handshake(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		b := startMosquitto(t)
		id := "qos2-" + string(proto)
		cfg := cfgFor(b, proto, id)
		cfg.Topics = []Subscription{{Filter: "sensors/#", QoS: 2}}
		if proto == ProtocolV5 {
			cfg.ReceiveMaximum = 10
		}
		src, ch := startSource(t, cfg, 100)
		pub := testbroker.NewPublisher(t, b.hostPort)
		for i := range 60 {
			pub.MustPublish("sensors/q2", []byte{byte('a' + i)}, 2)
		}
		for i := range 60 {
			g := next(t, ch)
			if g.QoS != 2 || g.Payload[0] != byte('a'+i) {
				t.Fatalf("message %d: qos %d payload %q", i, g.QoS, g.Payload)
			}
			g.ack()
		}
		time.Sleep(300 * time.Millisecond) // the PUBREL/PUBCOMP exchange
		closeSource(t, src)
		_, ch = startSource(t, cfg, 100)
		nothingWithin(t, ch, time.Second, "every QoS 2 message was completed")
	})
}

// A message longer than MaxMessage is delivered with the start of its
// payload and its size, and acknowledged in its turn; the messages around
// it arrive whole.
func TestOverlongMessage(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto Protocol) {
		b := startMosquitto(t)
		cfg := cfgFor(b, proto, "long-"+string(proto))
		cfg.MaxMessage = 64 << 10
		src, ch := startSource(t, cfg, 10)
		pub := testbroker.NewPublisher(t, b.hostPort)
		big := bytes.Repeat([]byte("z"), 3<<20)
		pub.MustPublish("sensors/a", []byte("1"), 1)
		pub.MustPublish("sensors/a", big, 1)
		pub.MustPublish("sensors/a", []byte("2"), 1)
		if g := next(t, ch); string(g.Payload) != "1" {
			t.Fatalf("first: %q", g.Payload)
		} else {
			g.ack()
		}
		g := next(t, ch)
		if g.Size != len(big) || len(g.Payload) == 0 || len(g.Payload) > cfg.MaxMessage+headerSlack || !bytes.Equal(g.Payload, big[:len(g.Payload)]) {
			t.Fatalf("long message: size %d, %d bytes kept", g.Size, len(g.Payload))
		}
		g.ack()
		if g := next(t, ch); string(g.Payload) != "2" || g.Size != 1 {
			t.Fatalf("after: %q", g.Payload)
		} else {
			g.ack()
		}
		closeSource(t, src)
		assertDrained(t, b, proto, "long-"+string(proto))
	})
}

// The reader decodes a buffer of PUBLISHes in place: topics and payloads
// alias the buffer, so a batch allocates nothing once its slice has grown.
func TestDecodeInPlaceAllocatesNothing(t *testing.T) {
	var buf []byte
	for i := range 100 {
		buf = append(buf, encodePublish(t, "plant/north/temp", []byte(`{"device":"d-042","seq":`+strings.Repeat("7", i%5+1)+`}`), 1, uint16(i+1), false)...)
	}
	msgs := make([]Message, 0, 128)
	decode := func() {
		msgs = msgs[:0]
		for b := buf; len(b) > 0; {
			_, flags, hdr, rem, ok, err := frame(b)
			if err != nil || !ok {
				t.Fatalf("frame: %v %v", ok, err)
			}
			m, err := parsePublish(flags, b[hdr:hdr+rem], rem, true)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
			b = b[hdr+rem:]
		}
	}
	if a := testing.AllocsPerRun(200, decode); a != 0 {
		t.Fatalf("%v allocations per batch of 100 messages, want 0", a)
	}
	if len(msgs) != 100 || msgs[99].PacketID != 100 || msgs[0].Topic != "plant/north/temp" {
		t.Fatalf("decoded %d messages, last %+v", len(msgs), msgs[len(msgs)-1])
	}
}

// BenchmarkDecode: frame and parse, per message.
func BenchmarkDecode(b *testing.B) {
	var buf []byte
	for i := range 100 {
		buf = append(buf, encodePublish(b, "plant/north/temp", []byte(`{"device":"d-042","t":1735689600123,"temp":21.53}`), 1, uint16(i+1), false)...)
	}
	msgs := make([]Message, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		msgs = msgs[:0]
		for p := buf; len(p) > 0; {
			_, flags, hdr, rem, _, _ := frame(p)
			m, _ := parsePublish(flags, p[hdr:hdr+rem], rem, true)
			msgs = append(msgs, m)
			p = p[hdr+rem:]
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*100), "ns/msg")
}
