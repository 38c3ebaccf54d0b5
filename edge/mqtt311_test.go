package edge_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
)

// TestMQTT311NodeCountsEveryMessage runs the node against Mosquitto over
// MQTT v3.1.1 through graceful restarts: messages published while the
// node runs, while it is away (queued in the persistent v3.1.1 session)
// and after it is back are each counted once in the committed results,
// whatever the broker redelivers.
//
// The test does not scrape /metrics to see progress (the watermark gauge
// races with the pipeline under -race); instead it runs the node in short
// rounds until the committed count reaches the total. A lost message never
// gets there (the test times out), a double count overshoots at once.
func TestMQTT311NodeCountsEveryMessage(t *testing.T) {
	const during, away, after = 300, 200, 100
	const total = during + away + after
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	cfg := edge.NodeConfig{EdgeID: "v311", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker:             mqtt.Config{Brokers: []string{mosq.Addr()}, Protocol: mqtt.ProtocolV311},
		CheckpointInterval: 50 * time.Millisecond, NoSync: true}
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d}`, i, 1000+i), 1)
		}
	}

	// Round 1: the node stops mid-stream, with messages unacknowledged
	// (redelivered later) and others not yet sent to it (queued).
	stop := runNode(t, cfg)
	publish(0, during)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	publish(during, during+away) // queued in the session while the node is away

	stop = runNode(t, cfg)
	publish(during+away, total)
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1) // advances the watermark
	var got int64
	for round := 0; ; round++ {
		time.Sleep(500 * time.Millisecond)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		got = latestCount(t, p, data, `{"dev":"a"}`)
		if got > total {
			t.Fatalf("counted %d readings over MQTT v3.1.1, want %d: some were counted twice", got, total)
		}
		if got == total {
			break
		}
		if round == 20 {
			t.Fatalf("counted %d readings over MQTT v3.1.1 after %d rounds, want %d: some were lost", got, round+1, total)
		}
		stop = runNode(t, cfg)
	}
}

// TestIdleCommit: a broker that stops sending once its window of
// unacknowledged messages is full (Mosquitto's max_inflight_messages, 20,
// with MQTT v3.1.1; a receive maximum of 20 with v5) is not kept waiting
// for the group commit's delay: when the connection falls silent the
// reader commits at once and the acknowledgements go out. With a 60 s
// delay and nothing else, 400 messages would move only at each graceful
// stop (its drain commits what was appended), a window at a time: 20 in
// each 3-s round here, where they are all counted in the first round
// (and within five on a loaded machine).
func TestIdleCommit(t *testing.T) {
	for _, proto := range []mqtt.Protocol{mqtt.ProtocolV311, mqtt.ProtocolV5} {
		t.Run("v"+string(proto), func(t *testing.T) {
			const total, rounds = 400, 5
			mosq := testbroker.StartWith(t, testbroker.Options{MaxInflightMessages: 20})
			data := t.TempDir()
			p := compileSpec(t, countSpec)
			mc := mqtt.Config{Brokers: []string{mosq.Addr()}, Protocol: proto}
			if proto == mqtt.ProtocolV5 {
				mc.ReceiveMaximum = 20
			}
			cfg := edge.NodeConfig{EdgeID: "idle", DataDir: data, Pipelines: []*operators.Pipeline{p}, Broker: mc,
				IngestLog:          ingestlog.Options{GroupDelay: time.Minute},
				CheckpointInterval: 50 * time.Millisecond, NoSync: true}
			stop := runNode(t, cfg)
			pub := testbroker.NewPublisher(t, mosq.HostPort())
			for i := range total {
				pub.MustPublish("s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d}`, i, 1000+i), 1)
			}
			pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1) // advances the watermark
			for round := 1; ; round++ {
				time.Sleep(3 * time.Second)
				if err := stop(); err != nil {
					t.Fatal(err)
				}
				got := latestCount(t, p, data, `{"dev":"a"}`)
				if got == total {
					break
				}
				if got > total || round == rounds {
					t.Fatalf("counted %d of %d readings after %d rounds of 3 s: the broker waited for the group commit", got, total, round)
				}
				stop = runNode(t, cfg)
			}
		})
	}
}
