package ingestlog_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/runnel-io/runnel/edge/ingestlog"
)

// The edge's use: append each MQTT message, ack it once durable, and after a
// restart replay from the position the last checkpoint recorded.
func Example() {
	dir, err := os.MkdirTemp("", "ingestlog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	l, rec, err := ingestlog.Open(ctx, dir, &ingestlog.Options{
		// Called after each group commit: send PUBACK for every message
		// whose position is below upTo.
		OnDurable: func(upTo ingestlog.Position) {},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("appends continue at", rec.End)

	var last ingestlog.Position
	for _, msg := range []string{
		`plant/press-03/temp {"ts":1767225600000,"temp":71.2}`,
		`plant/press-03/temp {"ts":1767225601000,"temp":71.4}`,
		`plant/press-07/temp {"ts":1767225601500,"temp":64.9}`,
	} {
		if last, err = l.Append(ctx, []byte(msg)); err != nil {
			log.Fatal(err)
		}
	}
	if err := l.WaitDurable(ctx, last); err != nil {
		log.Fatal(err)
	}

	// Replay from a checkpoint that covered position 0.
	r, err := l.NewReader(1)
	if err != nil {
		log.Fatal(err)
	}
	for {
		rec, pos, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(pos, string(rec))
	}
	r.Close()
	if err := l.Close(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// appends continue at 0
	// 1 plant/press-03/temp {"ts":1767225601000,"temp":71.4}
	// 2 plant/press-07/temp {"ts":1767225601500,"temp":64.9}
}
