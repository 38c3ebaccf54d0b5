package mqtt

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/runnel-io/runnel/internal/testbroker"
)

// counter counts messages and signals when a target is reached.
type counter struct {
	n, target atomic.Int64
	done      chan struct{}
}

func (c *counter) add() {
	if c.n.Add(1) == c.target.Load() {
		c.done <- struct{}{}
	}
}

// receiver subscribes to "bench/#" at QoS 1 with Receive Maximum 64 on the
// broker at hostPort, acks every message at once, counts it, and returns
// how to stop.
type receiver func(b *testing.B, hostPort string, c *counter) (stop func())

// BenchmarkReceive is end-to-end QoS 1 throughput through a real Mosquitto
// on loopback: a publisher sends batches of 1000 messages, each op is one
// batch received and acknowledged. Side by side, with the same publisher
// and broker settings:
//
//   - source: this package's Source, acking in the handler.
//   - paho: a bare paho.golang client in automatic-ack mode (the floor).
//   - paho-manual-ack: paho's own manual acknowledgement, which the source
//     does not use. Its 50 ms ack flush would cap it near 64 msgs per 50 ms
//     with a broker that honours Receive Maximum; Mosquitto 2.0.11 does not
//     after the first window (doc.go), which hides the cap here.
//
// Besides msgs/s it reports CPU per message of the broker process and of
// this process (which also runs the publisher), because on a small machine
// the broker's CPU is the bottleneck and rates alone hide the client's
// share.
func BenchmarkReceive(b *testing.B) {
	receivers := []struct {
		name  string
		start receiver
	}{
		{"source", startSourceReceiver},
		{"paho", startPahoReceiver(false)},
		{"paho-manual-ack", startPahoReceiver(true)},
	}
	const batch = 1000
	payload := []byte(`{"device":"d-042","t":1735689600123,"temp":21.53,"rh":48.2}`)
	for _, r := range receivers {
		b.Run(r.name, func(b *testing.B) {
			m := testbroker.Start(b)
			c := &counter{done: make(chan struct{}, 1)}
			stop := r.start(b, m.HostPort(), c)
			defer stop()
			pub := testbroker.NewPublisher(b, m.HostPort())
			ctx := context.Background()

			brokerCPU0, procCPU0 := m.CPUTime(), processCPU()
			var sent int64
			b.ReportAllocs()
			for b.Loop() {
				sent += batch
				c.target.Store(sent)
				for range batch {
					if err := pub.PublishAsync(ctx, "bench/x", payload, 1); err != nil {
						b.Fatal(err)
					}
				}
				select {
				case <-c.done:
				case <-time.After(30 * time.Second):
					b.Fatalf("received %d of %d after 30s", c.n.Load(), sent)
				}
			}
			msgs := float64(sent)
			b.ReportMetric(msgs/b.Elapsed().Seconds(), "msgs/s")
			b.ReportMetric(float64((m.CPUTime()-brokerCPU0).Microseconds())/msgs, "broker-µs/msg")
			b.ReportMetric(float64((processCPU()-procCPU0).Microseconds())/msgs, "proc-µs/msg")
		})
	}
}

func startSourceReceiver(b *testing.B, hostPort string, c *counter) func() {
	src, err := Start(context.Background(), Config{
		Brokers: []string{"mqtt://" + hostPort}, ClientID: "bench-source", CleanStart: true,
		Topics: []Subscription{{Filter: "bench/#", QoS: 1}}, ReceiveMaximum: 64, Logger: quietLogger(),
	}, Each(func(_ Message, ack func()) { ack(); c.add() }))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.WaitConnected(ctx); err != nil {
		b.Fatal(err)
	}
	return func() { _ = src.Close(context.Background()) }
}

func startPahoReceiver(manual bool) receiver {
	return func(b *testing.B, hostPort string, c *counter) func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rm := uint16(64)
		cc := paho.ClientConfig{ClientID: "bench-paho", EnableManualAcknowledgment: manual,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				if manual {
					_ = pr.Client.Ack(pr.Packet)
				}
				c.add()
				return true, nil
			}}}
		cli, err := testbroker.Dial(ctx, hostPort, cc, &paho.Connect{ClientID: "bench-paho", CleanStart: true, KeepAlive: 30,
			Properties: &paho.ConnectProperties{ReceiveMaximum: &rm}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cli.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "bench/#", QoS: 1}}}); err != nil {
			b.Fatal(err)
		}
		return func() { _ = cli.Disconnect(&paho.Disconnect{}); <-cli.Done() }
	}
}

// processCPU is this process's user + system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
