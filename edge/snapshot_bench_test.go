package edge

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/tests3"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/sync/objstore"
)

const snapBenchSpec = `name: snapbench
source: {mqtt: {topic: "plant/+/temp", qos: 1}}
event_time: {field: ts, unit: ms}
key: [device]
watermark: {max_out_of_order: 5s}
window: {tumbling: 1m}
aggregates: {readings: count(), avg_temp: avg(temp), max_temp: max(temp)}
`

// quiet is the benchmarks' logger: their output is the figures.
var quiet = slog.New(slog.DiscardHandler)

// snapBenchBase is the event time of every reading: one open window, so
// the state holds a partial per device.
const snapBenchBase = 1_767_225_600_000

// prefill makes a data directory whose last checkpoint holds keys
// devices' state (one reading each, in one open 1-minute window): the
// readings are written to the ingest log and a node replays them and
// commits, as after a restart.
func prefill(b *testing.B, keys int) string {
	b.Helper()
	dir := b.TempDir()
	ctx := context.Background()
	l, _, err := ingestlog.Open(ctx, filepath.Join(dir, "log"), &ingestlog.Options{Sync: ingestlog.SyncNever})
	if err != nil {
		b.Fatal(err)
	}
	var rec []byte
	for i := range keys {
		rec = encodeRecord(rec[:0], "plant/north/temp",
			fmt.Appendf(nil, `{"device":"sensor-%07d","ts":%d,"temp":%d.5}`, i, snapBenchBase+int64(i%1000), i%40))
		if _, err := l.Append(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Close(ctx); err != nil {
		b.Fatal(err)
	}
	p := snapBenchPipeline(b)
	n, err := open(ctx, &NodeConfig{EdgeID: "bench", DataDir: dir, Pipelines: []*operators.Pipeline{p}, Logger: quiet})
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
	n.log.Close(ctx)
	n.store.Close()
	return dir
}

func snapBenchPipeline(b *testing.B) *operators.Pipeline {
	p, err := operators.CompileYAML("bench.yaml", []byte(snapBenchSpec))
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkSnapshot measures one snapshot of a node whose state holds
// 10^6 keys: the copy in the read transaction (state file to a zstd data
// object in the data directory, paced as the node does it) and the upload,
// to a directory store on the same disk (fsynced) or to a bucket of a local
// versitygw server (sync/objstore, multipart), in MB/s of the state file;
// then the restore of that snapshot into a new data directory (fetch,
// verify, decompress, open with full verification, new epoch, empty log),
// in seconds.
func BenchmarkSnapshot(b *testing.B) {
	ctx := context.Background()
	for _, keys := range []int{1_000_000} {
		for _, kind := range []string{"dir", "s3"} {
			b.Run(fmt.Sprintf("keys=%.0e/store=%s", float64(keys), kind), func(b *testing.B) {
				var srv *tests3.Server
				if kind == "s3" {
					srv = tests3.Start(b)
				}
				data := prefill(b, keys)
				n, err := open(ctx, &NodeConfig{EdgeID: "bench", DataDir: data, Pipelines: []*operators.Pipeline{snapBenchPipeline(b)}, Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				defer n.closeAll(ctx)
				var m checkpoint.Manifest
				var copyTime, uploadTime, restoreTime time.Duration
				iter := 0
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					iter++
					var st checkpoint.Store
					if kind == "s3" {
						bk, err := objstore.New(objstore.Config{URL: fmt.Sprintf("s3://runnel-test/bench%d", iter), Endpoint: srv.Endpoint(),
							Region: "us-east-1", AccessKeyID: srv.AccessKey(), SecretAccessKey: srv.SecretKey()})
						if err != nil {
							b.Fatal(err)
						}
						defer bk.Close()
						st = bk
					} else {
						st, _ = checkpoint.NewDirStore(b.TempDir())
					}
					b.StartTimer()
					began := time.Now()
					cfg := &SnapshotConfig{Store: &timedStore{Store: st, began: &began, copied: &copyTime}, Version: "bench"}
					if m, err = n.uploadSnapshot(ctx, cfg, true); err != nil {
						b.Fatal(err)
					}
					uploadTime += time.Since(began)
					b.StopTimer()
					target := filepath.Join(b.TempDir(), "restored")
					began = time.Now()
					if _, err := Restore(ctx, RestoreConfig{Store: st, EdgeID: "bench", DataDir: target, Logger: quiet}); err != nil {
						b.Fatal(err)
					}
					restoreTime += time.Since(began)
					os.RemoveAll(target)
					b.StartTimer()
				}
				uploadTime -= copyTime
				mb := float64(m.StateSize) / 1e6 * float64(b.N)
				b.ReportMetric(mb/b.Elapsed().Seconds(), "state-MB/s")
				b.ReportMetric(mb/copyTime.Seconds(), "copy-MB/s")
				b.ReportMetric(float64(m.DataSize)/1e6*float64(b.N)/uploadTime.Seconds(), "upload-data-MB/s")
				b.ReportMetric(float64(m.StateSize)/(1<<20), "state-MiB")
				b.ReportMetric(float64(m.DataSize)/(1<<20), "data-MiB")
				b.ReportMetric(restoreTime.Seconds()/float64(b.N), "restore-s")
			})
		}
	}
}

// timedStore notes when the copy ended: the data object's upload begins.
type timedStore struct {
	checkpoint.Store
	began  *time.Time
	copied *time.Duration
	once   sync.Once
}

func (t *timedStore) PutFile(ctx context.Context, key, path string) error {
	t.once.Do(func() { *t.copied += time.Since(*t.began) })
	return t.Store.(checkpoint.FilePutter).PutFile(ctx, key, path)
}

// BenchmarkSnapshotStall measures what a snapshot costs the ingest path:
// a node whose state holds 10^6 keys takes a steady 2,000 readings/s
// through Mosquitto (QoS 1, the ingest log fsynced) for 30 s, while it
// alternately takes snapshots back to back for 2 s (of that state, on
// demand, to a directory store on the same disk) and none for 2 s. The
// latency of a reading is from its publication to the pump handing it to
// the pipeline: broker, ingest log and its fsync, pump, which stops for
// nothing but checkpoints' barriers. Readings published while a snapshot
// ran are "during", those published at least 500 ms from any snapshot
// "between": compared in one run, the two see the same load from the rest
// of the machine. pace=on is the node's copy (it pauses as long as it
// works), pace=off copies flat out.
func BenchmarkSnapshotStall(b *testing.B) {
	const (
		keys  = 1_000_000
		rate  = 2000 // readings a second
		dur   = 30 * time.Second
		phase = 2 * time.Second
		guard = 500 * time.Millisecond
	)
	for _, pace := range []float64{defaultSnapIdle, 0} {
		b.Run(fmt.Sprintf("pace=%s", map[bool]string{true: "on", false: "off"}[pace > 0]), func(b *testing.B) {
			data := prefill(b, keys)
			mosq := testbroker.Start(b)
			for b.Loop() {
				st, _ := checkpoint.NewDirStore(b.TempDir())
				ctx, cancel := context.WithCancel(context.Background())
				started := make(chan struct{})
				cfg := &NodeConfig{EdgeID: "bench", DataDir: data, Pipelines: []*operators.Pipeline{snapBenchPipeline(b)},
					Snapshots: &SnapshotConfig{Store: st}, Started: func(string) { close(started) }, Logger: quiet}
				cfg.Broker.Brokers = []string{mosq.Addr()}
				n, err := open(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				n.snapIdle = pace
				type sample struct{ sent, lat time.Duration }
				t0 := time.Now()
				var mu sync.Mutex
				var samples []sample
				n.onFeed = func(payload []byte) {
					i := bytes.Index(payload, []byte(`"sent":`))
					if i < 0 {
						return
					}
					sent, err := strconv.ParseInt(string(bytes.TrimRight(payload[i+7:], "}")), 10, 64)
					if err != nil {
						return
					}
					at := time.Unix(0, sent)
					mu.Lock()
					samples = append(samples, sample{at.Sub(t0), time.Since(at)})
					mu.Unlock()
				}
				done := make(chan error, 1)
				go func() { done <- n.run(ctx) }()
				<-started
				// The snapshotter's busy intervals, since t0.
				var busy [][2]time.Duration // read once snapDone is closed
				var snapping atomic.Bool
				var snaps int
				var ckptDuring, ckptBetween time.Duration
				snapDone := make(chan struct{})
				go func() {
					defer close(snapDone)
					for time.Since(t0) < dur {
						from := time.Since(t0)
						snapping.Store(true)
						for time.Since(t0)-from < phase {
							if _, err := n.Snapshot(ctx); err != nil {
								b.Error(err)
								return
							}
							snaps++
						}
						busy = append(busy, [2]time.Duration{from, time.Since(t0)})
						snapping.Store(false)
						time.Sleep(phase)
					}
				}()
				pub := testbroker.NewPublisher(b, mosq.HostPort())
				tick := time.NewTicker(time.Millisecond)
				sent := 0
				for now := range tick.C {
					el := now.Sub(t0)
					if el > dur {
						break
					}
					for want := int(float64(rate) * el.Seconds()); sent < want; sent++ {
						payload := fmt.Appendf(nil, `{"device":"live-%04d","ts":%d,"temp":20.5,"sent":%d}`, sent%1000, int64(snapBenchBase+1000), time.Now().UnixNano())
						if err := pub.PublishAsync(ctx, "plant/live/temp", payload, 1); err != nil {
							b.Fatal(err)
						}
					}
					if d := time.Duration(n.status.checkpointNanos.Load()); snapping.Load() {
						ckptDuring = max(ckptDuring, d)
					} else {
						ckptBetween = max(ckptBetween, d)
					}
				}
				tick.Stop()
				<-snapDone
				deadline := time.Now().Add(20 * time.Second)
				for {
					mu.Lock()
					got := len(samples)
					mu.Unlock()
					if got >= sent || time.Now().After(deadline) {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				pub.Close()
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				mu.Lock()
				var during, between []time.Duration
				for _, s := range samples {
					in, near := false, false
					for _, iv := range busy {
						in = in || s.sent >= iv[0] && s.sent <= iv[1]
						near = near || s.sent >= iv[0]-guard && s.sent <= iv[1]+guard
					}
					switch {
					case in:
						during = append(during, s.lat)
					case !near:
						between = append(between, s.lat)
					}
				}
				mu.Unlock()
				q := func(lat []time.Duration, f float64) float64 {
					slices.Sort(lat)
					return float64(lat[int(f*float64(len(lat)-1))].Microseconds()) / 1000
				}
				b.ReportMetric(q(during, 0.5), "p50-during-ms")
				b.ReportMetric(q(during, 0.99), "p99-during-ms")
				b.ReportMetric(q(during, 1), "max-during-ms")
				b.ReportMetric(q(between, 0.5), "p50-between-ms")
				b.ReportMetric(q(between, 0.99), "p99-between-ms")
				b.ReportMetric(q(between, 1), "max-between-ms")
				b.ReportMetric(q(during, 0.99)-q(between, 0.99), "p99-stall-ms")
				b.ReportMetric(float64(snaps), "snapshots")
				b.ReportMetric(float64(ckptDuring.Microseconds())/1000, "max-ckpt-during-ms")
				b.ReportMetric(float64(ckptBetween.Microseconds())/1000, "max-ckpt-between-ms")
			}
		})
	}
}
