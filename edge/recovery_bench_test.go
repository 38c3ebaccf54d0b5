package edge

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/operators"
)

// BenchmarkRecovery measures what a restart costs: open the state store and
// the ingest log, restore the pipeline, replay 10^6 logged readings of 10^5
// devices through it and commit the checkpoint that covers them.
func BenchmarkRecovery(b *testing.B) {
	p, err := operators.CompileYAML("bench.yaml", []byte(`name: rec
source: {mqtt: {topic: "plant/+/temp", qos: 1}}
event_time: {field: ts, unit: ms}
key: [device]
watermark: {max_out_of_order: 5s}
window: {tumbling: 1m}
aggregates: {readings: count(), avg_temp: avg(temp), max_temp: max(temp)}
`))
	if err != nil {
		b.Fatal(err)
	}
	const records = 1_000_000
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		ctx := context.Background()
		l, _, err := ingestlog.Open(ctx, filepath.Join(dir, "log"), &ingestlog.Options{Sync: ingestlog.SyncNever})
		if err != nil {
			b.Fatal(err)
		}
		var rec []byte
		for i := range records {
			rec = encodeRecord(rec[:0], "plant/north/temp",
				fmt.Appendf(nil, `{"device":"sensor-%06d","ts":%d,"temp":21.5}`, i%100_000, 1_767_225_600_000+int64(i)))
			if _, err := l.Append(ctx, rec); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.Close(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()

		cfg := &NodeConfig{EdgeID: "rec", DataDir: dir, Pipelines: []*operators.Pipeline{p}}
		n, err := open(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- n.writer(ctx) }()
		drain := make(chan struct{})
		close(drain)
		if err := n.pump(ctx, drain); err != nil {
			b.Fatal(err)
		}
		if _, err := n.pipes[0].rt.Close(false); err != nil {
			b.Fatal(err)
		}
		close(n.parts)
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		if got := n.last.LogPos; got != records {
			b.Fatalf("checkpoint covers %d records, want %d", got, records)
		}
		n.log.Close(ctx)
		n.store.Close()
	}
	b.ReportMetric(float64(records)/(b.Elapsed().Seconds()/float64(b.N)), "records/s")
}
