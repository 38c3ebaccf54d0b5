package edge_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
)

// TestBrokerRestartMidStream restarts Mosquitto three times (SIGTERM, which
// saves its database, then a start on the same port from it) while a
// publisher sends 1500 QoS 1 readings with an event id (dev, seq). The
// publisher is the at-least-once kind found in the field: when the broker
// goes away it reconnects and sends again every reading the broker had not
// acknowledged. The node's MQTT source reconnects to its persistent
// session, in which the broker kept what it had queued and what it had sent
// without a PUBACK. In the end the node's committed results equal the
// oracle: every reading counted once (nothing lost with the broker, nothing
// counted twice from a resend or a redelivery).
func TestBrokerRestartMidStream(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, sumSpec)
	cfg := edge.NodeConfig{EdgeID: "brk", DataDir: data, Pipelines: []*operators.Pipeline{p},
		Broker: fastBroker(mosq), CheckpointInterval: 50 * time.Millisecond, NoSync: true}
	nd := startNode(t, cfg)
	if nd.err != nil {
		t.Fatal(nd.err)
	}

	const n = 1500
	rng := rand.New(rand.NewPCG(3, 4))
	payloads := make([][]byte, n)
	type agg struct{ n, sum int64 }
	want := map[string]agg{}
	for i := range payloads {
		dev, ts, v := fmt.Sprintf("d%d", i%5), int64(10_000+i*3)-rng.Int64N(300), rng.Int64N(50)
		payloads[i] = fmt.Appendf(nil, `{"dev":%q,"seq":%d,"ts":%d,"v":%d}`, dev, i, ts, v)
		k := fmt.Sprintf("%s/%d", dev, ts/1000*1000)
		want[k] = agg{want[k].n + 1, want[k].sum + v}
	}

	// The publisher runs on its own goroutine; the test goroutine restarts
	// the broker (testbroker's Restart must run on it).
	var acked atomic.Int64
	var resends atomic.Int64
	pubDone := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { pubDone <- publishAtLeastOnce(ctx, mosq.HostPort(), payloads, &acked, &resends) }()

	for _, at := range []int64{n / 4, n / 2, 3 * n / 4} {
		for acked.Load() < at {
			select {
			case err := <-pubDone:
				t.Fatalf("publisher stopped at %d of %d: %v", acked.Load(), n, err)
			case <-time.After(time.Millisecond):
			}
		}
		mosq.Restart()
		nd.alive()
	}
	if err := <-pubDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("%d readings, %d resent by the publisher, 3 broker restarts", n, resends.Load())

	// A reading far ahead fires every window. Mosquitto delivers one
	// session's messages in order, so once the last windows it fires are
	// committed, every reading before it has been taken.
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	pub.MustPublish("f/z", []byte(`{"dev":"z","seq":0,"ts":99999999,"v":0}`), 1)
	nd.waitCheckpoint(n + 1)
	var got map[string][2]int64
	for attempt := 0; ; attempt++ {
		time.Sleep(200 * time.Millisecond)
		if err := nd.stop(); err != nil {
			t.Fatalf("node: %v", err)
		}
		got = readResults(t, p, data)
		if len(got) >= len(want) || attempt == 4 {
			break
		}
		nd = startNode(t, cfg)
		if nd.err != nil {
			t.Fatal(nd.err)
		}
	}
	bad := 0
	for k, w := range want {
		if g := got[k]; g != [2]int64{w.n, w.sum} {
			if bad++; bad <= 10 {
				t.Errorf("window %s: count,sum %v, want %d,%d", k, g, w.n, w.sum)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected window %s", k)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d windows wrong", bad, len(want))
	}
}

// publishAtLeastOnce sends every payload with QoS 1 to f/<dev>, in order.
// When a publish fails (the broker went away), it reconnects and sends the
// same payload again, so a payload whose PUBACK was lost reaches the broker
// twice. acked counts payloads the broker acknowledged; resends, payloads
// sent again.
func publishAtLeastOnce(ctx context.Context, hostPort string, payloads [][]byte, acked, resends *atomic.Int64) error {
	var cli *paho.Client
	// conn is cancelled when cli's connection drops: paho does not fail a
	// publish waiting for its PUBACK when the broker goes away.
	var conn context.Context
	defer func() {
		if cli != nil {
			cli.Disconnect(&paho.Disconnect{})
			<-cli.Done()
		}
	}()
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; i < len(payloads); {
		if time.Now().After(deadline) {
			return fmt.Errorf("publisher: stuck at %d", i)
		}
		if cli == nil {
			dctx, cancel := context.WithTimeout(ctx, time.Second)
			c, err := testbroker.Dial(dctx, hostPort, paho.ClientConfig{ClientID: "brk-pub"},
				&paho.Connect{ClientID: "brk-pub", CleanStart: true, KeepAlive: 30})
			cancel()
			if err != nil {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			cli = c
			var lost context.CancelFunc
			conn, lost = context.WithCancel(ctx)
			go func() { <-c.Done(); lost() }()
		}
		pctx, cancel := context.WithTimeout(conn, 2*time.Second)
		_, err := cli.Publish(pctx, &paho.Publish{Topic: fmt.Sprintf("f/d%d", i%5), Payload: payloads[i], QoS: 1})
		cancel()
		if err != nil {
			cli.Disconnect(&paho.Disconnect{})
			<-cli.Done()
			cli = nil
			resends.Add(1)
			continue
		}
		i++
		acked.Add(1)
	}
	return nil
}
