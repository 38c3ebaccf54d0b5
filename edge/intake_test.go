package edge_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
)

// TestEmbeddedBrokerIntake: with the embedded broker the pipelines'
// messages go from the broker to the ingest log in-process. Several
// publishers' QoS 1 streams (and a QoS 2 message) are each counted once
// (TestEmbeddedBrokerSurvivesKills has the acknowledgements after
// durability, and a crash); a subscriber of the same
// topics still gets every message, and a topic no pipeline reads is routed
// as before and not counted.
func TestEmbeddedBrokerIntake(t *testing.T) {
	brokerAddr, httpAddr := freeAddr(t), freeAddr(t)
	data := filepath.Join(t.TempDir(), "data")
	p := compileSpec(t, countSpec)
	nd := startNode(t, edge.NodeConfig{EdgeID: "intake", DataDir: data, Pipelines: []*operators.Pipeline{p},
		EmbeddedAddr: brokerAddr, CheckpointInterval: 20 * time.Millisecond, NoSync: true, HTTPAddr: httpAddr})
	if nd.err != nil {
		t.Fatal(nd.err)
	}

	var forwarded, other atomic.Int64
	sub, err := testbroker.Dial(t.Context(), brokerAddr, paho.ClientConfig{ClientID: "dashboard",
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			if pr.Packet.Topic == "x/y" {
				other.Add(1)
			} else {
				forwarded.Add(1)
			}
			return true, nil
		}}}, &paho.Connect{ClientID: "dashboard", CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Disconnect(&paho.Disconnect{}); <-sub.Done() }()
	if _, err := sub.Subscribe(t.Context(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "s/#", QoS: 1}, {Topic: "x/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}

	const pubs, each = 3, 400
	var wg sync.WaitGroup
	for i := range pubs {
		pub := testbroker.NewPublisher(t, brokerAddr)
		wg.Go(func() {
			for j := range each {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := pub.PublishAsync(ctx, fmt.Sprintf("s/%d", i), fmt.Appendf(nil, `{"dev":"p%d","seq":%d,"ts":1000}`, i, i*each+j), 1)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
			}
			// The last one synchronously: its PUBACK follows every other's.
			pub.MustPublish(fmt.Sprintf("s/%d", i), fmt.Appendf(nil, `{"dev":"p%d","seq":%d,"ts":1000}`, i, 100000+i), 1)
		})
	}
	wg.Wait()
	pub := testbroker.NewPublisher(t, brokerAddr)
	pub.MustPublish("s/q2", []byte(`{"dev":"q2","seq":200000,"ts":1000}`), 2)
	pub.MustPublish("x/y", []byte(`{"dev":"x","seq":300000,"ts":1000}`), 1)
	pub.MustPublish("s/z", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1) // closes the window
	total := pubs*(each+1) + 2
	waitMetric(t, httpAddr, "runnel_edge_records_in_total", func(v float64) bool { return v == float64(total) })
	deadline := time.Now().Add(10 * time.Second)
	for (forwarded.Load() < int64(total) || other.Load() < 1) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if forwarded.Load() != int64(total) || other.Load() != 1 {
		t.Fatalf("the subscriber got %d of the %d pipeline messages and %d of the other one", forwarded.Load(), total, other.Load())
	}
	if err := nd.stop(); err != nil {
		t.Fatal(err)
	}
	for i := range pubs {
		if got := latestCount(t, p, data, fmt.Sprintf(`{"dev":"p%d"}`, i)); got != each+1 {
			t.Errorf("publisher %d: counted %d, want %d", i, got, each+1)
		}
	}
	if got := latestCount(t, p, data, `{"dev":"q2"}`); got != 1 {
		t.Errorf("QoS 2 message counted %d times", got)
	}
	if got := latestCount(t, p, data, `{"dev":"x"}`); got != 0 {
		t.Errorf("a topic no pipeline reads was counted %d times", got)
	}
}
