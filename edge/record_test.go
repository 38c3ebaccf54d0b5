package edge

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
)

// FuzzRecord: decodeRecord never panics on arbitrary bytes; a message
// record re-encoded decodes to its topic and payload again, whatever topic it is told came
// last, and sharing that topic's string does not change what it says.
func FuzzRecord(f *testing.F) {
	f.Add(encodeRecord(nil, "plant/north/temp", []byte(`{"t":1}`)), "plant/north/temp")
	f.Add(encodeRecord(nil, "a", nil), "b")
	f.Add(encodeClock(nil, 1_767_225_600_000), "")
	f.Add(encodeOversized(nil, "big", make([]byte, 100), 1<<20), "big")
	f.Add([]byte{0}, "")
	f.Add([]byte{0xff, 0xff, 0xff}, "x")
	f.Fuzz(func(t *testing.T, rec []byte, last string) {
		r, err := decodeRecord(rec, last)
		if err != nil {
			return
		}
		if r.kind == 0 {
			back, err := decodeRecord(encodeRecord(nil, r.topic, r.payload), last)
			if err != nil || back.topic != r.topic || !bytes.Equal(back.payload, r.payload) {
				t.Fatalf("message record %x decodes to topic %q payload %x, which encodes to a record of topic %q payload %x (%v)",
					rec, r.topic, r.payload, back.topic, back.payload, err)
			}
			if r2, _ := decodeRecord(rec, ""); r2.topic != r.topic {
				t.Fatalf("topic %q with last %q, %q without", r.topic, last, r2.topic)
			}
		}
	})
}

// TestTopicMatchCache: a pipeline's topic filter with its one-topic cache
// answers as mqtt.Match does over runs of repeated and changing topics.
func TestTopicMatchCache(t *testing.T) {
	topics := []string{"plant/north/temp", "plant/south/temp", "plant/north/hum", "plant/temp", "", "plant/north/temp/x"}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, filter := range []string{"plant/+/temp", "plant/#", "#", "plant/north/temp"} {
		m := newTopicMatch(&operators.Pipeline{Spec: &spec.Pipeline{Source: spec.Source{MQTT: &spec.MQTTSource{Topic: filter}}}})
		for i := range 2000 {
			topic := topics[rng.IntN(len(topics))]
			if got, want := m.matches(topic), mqtt.Match(filter, topic); got != want {
				t.Fatalf("filter %q, call %d, topic %q: %v, want %v", filter, i, topic, got, want)
			}
		}
	}
	if m := newTopicMatch(&operators.Pipeline{Spec: &spec.Pipeline{}}); !m.matches("any/topic") {
		t.Fatal("a pipeline without an MQTT source does not match every topic")
	}
}
