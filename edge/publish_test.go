package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
)

const publishSpec = countSpec + `outputs:
  - mqtt: {topic: results/count, qos: 1}
`

// TestMQTTOutput: a pipeline's mqtt output publishes each committed
// result on the broker, with a result_id user property; across a restart
// the cursor resumes, so every result is published, and a result published
// twice (at-least-once) carries the same id and payload.
func TestMQTTOutput(t *testing.T) {
	mosq := testbroker.Start(t)
	p := compileSpec(t, publishSpec)
	type msg struct{ id, payload string }
	var mu sync.Mutex
	var got []msg
	sub, err := testbroker.Dial(context.Background(), mosq.HostPort(), paho.ClientConfig{ClientID: "results-reader",
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			id := ""
			if pr.Packet.Properties != nil {
				id = pr.Packet.Properties.User.Get("result_id")
			}
			mu.Lock()
			got = append(got, msg{id, string(pr.Packet.Payload)})
			mu.Unlock()
			return true, nil
		}}}, &paho.Connect{ClientID: "results-reader", CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { sub.Disconnect(&paho.Disconnect{}); <-sub.Done() }()
	if _, err := sub.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "results/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}

	data := t.TempDir()
	cfg := edge.NodeConfig{EdgeID: "pub", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 50 * time.Millisecond, NoSync: true}
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	seq := 0
	send := func(from, n int) { // n readings of device a in second `from` on, then one of z far ahead
		for i := range n {
			seq++
			pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d}`, seq, (from+i/10)*1000+i%10), 1)
		}
		seq++
		pub.MustPublish("s/z", fmt.Appendf(nil, `{"dev":"z","seq":%d,"ts":%d}`, seq, (from+100)*1000), 1)
	}
	stop := runNode(t, cfg)
	send(0, 30) // windows 0, 1, 2 of device a: 10 readings each
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	stop = runNode(t, cfg)
	send(200, 20) // windows 200, 201
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 6 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	byID := map[string]string{}
	counts := map[int64]int64{}
	for _, m := range got {
		if m.id == "" {
			t.Fatalf("result without result_id: %s", m.payload)
		}
		if prev, ok := byID[m.id]; ok && prev != m.payload {
			t.Fatalf("result_id %s published with two payloads:\n%s\n%s", m.id, prev, m.payload)
		}
		byID[m.id] = m.payload
		var r struct {
			Key         map[string]string `json:"key"`
			WindowStart int64             `json:"window_start"`
			Values      map[string]int64  `json:"values"`
		}
		if err := json.Unmarshal([]byte(m.payload), &r); err != nil {
			t.Fatal(err)
		}
		if r.Key["dev"] == "a" {
			counts[r.WindowStart] = r.Values["n"]
		}
	}
	// Graceful stops store the cursor: nothing is published twice.
	if len(got) != len(byID) {
		t.Errorf("%d messages for %d results: the cursor did not survive the restart", len(got), len(byID))
	}
	want := map[int64]int64{0: 10, 1000: 10, 2000: 10, 200_000: 10, 201_000: 10}
	for w, n := range want {
		if counts[w] != n {
			t.Errorf("window %d: published count %d, want %d (all: %v)", w, counts[w], n, counts)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
