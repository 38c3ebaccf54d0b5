package mqtt_test

import (
	"context"
	"log"
	"time"

	"github.com/runnel-io/runnel/edge/mqtt"
)

// A source feeding an ingest log: each message is appended, and acked only
// once the log has synced it, so the broker keeps (and, after a crash,
// redelivers) everything the edge has not made durable.
func ExampleStart() {
	ctx := context.Background()
	synced := make(chan mqtt.Acks, 64) // stands in for the ingest log's group commit

	src, err := mqtt.Start(ctx, mqtt.Config{
		Brokers:  []string{"mqtt://127.0.0.1:1883"},
		ClientID: "edge-gw-17",
		Topics:   []mqtt.Subscription{{Filter: "plant/+/sensors/#", QoS: 1}},
	}, func(b *mqtt.Batch) {
		for _, m := range b.Messages {
			// Append m.Topic and m.Payload to the ingest log here (they
			// are valid until this call returns).
			_ = m
		}
		// Then hand the batch's acks to whatever runs after the fsync.
		// Blocking here when the log falls behind is the back-pressure
		// path.
		synced <- b.Acks
	})
	if err != nil {
		log.Fatal(err) // Validate lists every problem with the config
	}
	go func() {
		for acks := range synced {
			acks.Ack() // after the group commit, in arrival order
		}
	}()

	// ... run until shutdown ...
	closeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := src.Close(closeCtx); err != nil {
		log.Print(err)
	}
	close(synced)
}
