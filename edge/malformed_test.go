package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
)

// sumSpec counts and sums readings per device in 1 s windows, with
// redelivery dedup by device and sequence number.
const sumSpec = `name: faults
source: {mqtt: {topic: "f/#", qos: 1}}
event_time: {field: ts, unit: ms}
event_id: [dev, seq]
key: [dev]
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: {n: count(), sum: sum(v)}
`

// TestMalformedPayloadsAreDeadLetters sends good readings through a real
// Mosquitto with bad payloads between them: broken JSON, a JSON array, an
// empty payload, invalid UTF-8, a missing or mistyped event time, a missing
// or mistyped key, a value of the wrong type. The node must not stop (a bad
// payload that made the runtime fail would stop the pump, and with it the
// node); every good reading is counted exactly once in the committed
// outbox; every bad payload is in the committed dead-letter output exactly
// once, with a reason and its topic.
//
// It waits for the node by its checkpoint log records, not /metrics:
// scraping /metrics while the pump ingests is a data race (found by this
// test under -race): operators.Runtime.Watermark, behind the
// runnel_edge_watermark_lag_seconds gauge, reads window.Watermarks.combined
// without synchronization while Runtime.Ingest writes it.
func TestMalformedPayloadsAreDeadLetters(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, sumSpec)
	nd := startNode(t, edge.NodeConfig{EdgeID: "mal", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: fastBroker(mosq), CheckpointInterval: 50 * time.Millisecond, NoSync: true})
	if nd.err != nil {
		t.Fatalf("node did not start: %v", nd.err)
	}

	bad := []string{
		`not json`,
		``,
		`[1,2,3]`,
		`{"dev":"a","seq":9001,"ts":1500,"v":1`, // unterminated
		`{"dev":"a","seq":9002,"v":1}`,          // no event time
		`{"dev":"a","seq":9003,"ts":"yesterday","v":1}`,
		`{"dev":"a","seq":9004,"ts":null,"v":1}`,
		`{"seq":9005,"ts":1500,"v":1}`, // no key
		`{"dev":{"x":1},"seq":9006,"ts":1500,"v":1}`,
		`{"dev":"a","seq":9007,"ts":1500,"v":"hot"}`,
		`{"dev":"a","seq":9008,"ts":1500,"v":[1]}`,
		"\xff\xfe{\"dev\":\"a\"}",
		`{"dev":"a","seq":9009,"ts":1500,"v":1}}`, // trailing garbage
	}
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	type agg struct{ n, sum int64 }
	want := map[string]agg{} // dev/window start
	const good = 300
	sent, nbad := 0, 0
	for i := range good {
		dev, ts, v := fmt.Sprintf("d%d", i%3), int64(1000+i*7), int64(i%11)
		pub.MustPublish("f/"+dev, fmt.Appendf(nil, `{"dev":%q,"seq":%d,"ts":%d,"v":%d}`, dev, i, ts, v), 1)
		k := fmt.Sprintf("%s/%d", dev, ts/1000*1000)
		want[k] = agg{want[k].n + 1, want[k].sum + v}
		sent++
		if i%17 == 0 && nbad < len(bad)-2 {
			pub.MustPublish("f/bad", []byte(bad[nbad]), 1)
			sent++
			nbad++
		}
	}
	for _, b := range bad[nbad:] {
		pub.MustPublish("f/bad", []byte(b), 1)
		sent++
	}
	pub.MustPublish("f/z", []byte(`{"dev":"z","seq":0,"ts":999999,"v":0}`), 1)
	sent++
	nd.waitCheckpoint(uint64(sent)) // one log record per message
	if err := nd.stop(); err != nil {
		t.Fatalf("node stopped with %v", err)
	}

	got := readResults(t, p, data)
	delete(got, "z/999000")
	for k, w := range want {
		if g := got[k]; g != [2]int64{w.n, w.sum} {
			t.Errorf("window %s: count,sum %v, want %d,%d", k, g, w.n, w.sum)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected window %s %v", k, got[k])
		}
	}

	seen := map[string]int{}
	err := edge.ReadSideOutput(data, "dead", func(line []byte) error {
		var d struct {
			Topic   string `json:"topic"`
			Reason  string `json:"reason"`
			Payload string `json:"payload"`
		}
		if err := json.Unmarshal(line, &d); err != nil {
			return fmt.Errorf("dead letter %q: %v", line, err)
		}
		if d.Reason == "" || d.Topic != "f/bad" {
			t.Errorf("dead letter without reason or topic: %s", line)
		}
		seen[d.Payload]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		if n := seen[asJSONText(b)]; n != 1 {
			t.Errorf("bad payload %q: %d dead letters, want 1", b, n)
		}
		delete(seen, asJSONText(b))
	}
	for pl, n := range seen {
		t.Errorf("dead letter for a payload that was not bad: %q (%d)", pl, n)
	}
}

// asJSONText is s as the dead-letter output renders it: each byte of an
// invalid UTF-8 sequence becomes U+FFFD.
func asJSONText(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		b.WriteRune(r)
		s = s[n:]
	}
	return b.String()
}

// readResults returns the latest version of every window result in a
// stopped node's outbox as dev/window_start -> (count, sum), and fails the
// test if a (key, window, version) is in it twice: the checkpoint commits
// each output once.
func readResults(t *testing.T, p *operators.Pipeline, data string) map[string][2]int64 {
	t.Helper()
	got := map[string][2]int64{}
	ver := map[string]uint32{}
	err := edge.ReadOutbox(context.Background(), data, func(e edge.OutboxEntry) error {
		if e.Marker {
			return nil
		}
		kj, err := p.AppendKeyJSON(nil, e.Result.Key)
		if err != nil {
			return err
		}
		var key struct{ Dev string }
		if err := json.Unmarshal(kj, &key); err != nil {
			return err
		}
		st := p.Aggregates.New()
		if err := p.Aggregates.Decode(st, e.Result.State); err != nil {
			return err
		}
		var vals struct {
			N   int64   `json:"n"`
			Sum float64 `json:"sum"`
		}
		if err := json.Unmarshal(p.Aggregates.AppendJSON(nil, st), &vals); err != nil {
			return err
		}
		k := fmt.Sprintf("%s/%d", key.Dev, e.Result.Start)
		switch v := e.Result.Version; {
		case v > ver[k]:
			ver[k] = v
			got[k] = [2]int64{vals.N, int64(vals.Sum)}
		case v == ver[k]:
			t.Errorf("window %s version %d twice in the outbox", k, v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read outbox: %v", err)
	}
	return got
}
