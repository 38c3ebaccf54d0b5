package fleet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-io/runnel/hub/fleet"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// typicalStatus is an edge's report of two running pipelines.
func typicalStatus(gen uint64) *runnelv1.EdgeStatus {
	return &runnelv1.EdgeStatus{
		AppliedGeneration: gen,
		Pipelines: []*runnelv1.PipelineStatus{
			{Name: "temps", Revision: 3, State: "running", WatermarkMs: 1_700_000_000_000, WatermarkLagMs: 1200},
			{Name: "humid", Revision: 1, State: "running", WatermarkMs: 1_700_000_000_000, WatermarkLagMs: 900},
		},
		OutboxEntries: 12, OldestUnsentMs: 1_699_999_990_000, DiskUsedBytes: 1 << 26, DiskCapBytes: 1 << 30,
		RecordsPerMin: 6000, DeadPerMin: 1, LatePerMin: 2, AtMs: 1_700_000_000_000,
	}
}

// registerFleet connects n edges, each with a status, and returns their
// ids and the cancel of their streams.
func registerFleet(b *testing.B, f *fleet.Fleet, n int) ([]string, context.CancelFunc) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ids := make([]string, n)
	sites := []string{"plant-1", "plant-2", "plant-3", "plant-4", "plant-5", "plant-6", "plant-7"}
	for i := range ids {
		ids[i] = fmt.Sprintf("edge-%05d", i)
		reg := &runnelv1.Register{
			EdgeId:  ids[i],
			Labels:  map[string]string{"site": sites[i%len(sites)], "hw": []string{"rpi4", "cm4"}[i%2], "ring": fmt.Sprint(i % 3)},
			Version: "v1.4.2", Os: "linux", Arch: "arm64",
			Status: typicalStatus(0),
		}
		if _, err := f.Connect(ctx, ids[i], reg, nil); err != nil {
			b.Fatal(err)
		}
	}
	return ids, cancel
}

func openBench(b *testing.B, noSync bool) *fleet.Fleet {
	b.Helper()
	f, err := fleet.Open(b.TempDir(), fleet.Options{Tick: -1, NoSync: noSync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkStatus: one Status call in a fleet of 10,000 edges, with a
// typical report whose gate fields did not change (the common case: every
// edge reports every 10 s). 10,000 edges every 10 s is 1,000 calls a
// second; under 5% of a core leaves 50 µs each.
func BenchmarkStatus(b *testing.B) {
	f := openBench(b, true)
	const n = 10_000
	ids, cancel := registerFleet(b, f, n)
	defer cancel()
	// Two copies per edge, alternated, so that each call compares a new
	// message with the one kept.
	reports := make([][2]*runnelv1.EdgeStatus, n)
	for i := range reports {
		reports[i] = [2]*runnelv1.EdgeStatus{typicalStatus(0), typicalStatus(0)}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % n
		if err := f.Status(ids[k], reports[k][(i/n)%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkFanout1k: a deployment change reaching 1,000 connected edges'
// channels: from ApplyDeployment (fsync included) until every edge's
// stream has received the new set. Reports the distribution per change.
func BenchmarkFanout1k(b *testing.B) {
	f := openBench(b, false)
	const n = 1000
	specs := []string{tempsV1, tempsV2}
	if _, err := f.ApplyPipeline("bench", &runnelv1.ApplyPipelineRequest{Spec: specs[0]}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var want atomic.Uint64 // the generation every edge is to reach
	var got atomic.Int64
	done := make(chan struct{}, 1)
	stopped := make(chan struct{})
	for i := range n {
		id := fmt.Sprintf("edge-%04d", i)
		ch, err := f.Connect(ctx, id, &runnelv1.Register{EdgeId: id, Labels: map[string]string{"site": "a"}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			defer func() { stopped <- struct{}{} }()
			for ds := range ch {
				if w := want.Load(); w > 0 && ds.Generation == w && got.Add(1) == n {
					done <- struct{}{}
				}
			}
		}()
	}
	var times []time.Duration
	b.ReportAllocs()
	gen := uint64(0)
	for b.Loop() {
		// A new revision, then the timed change: the deployment naming it.
		if _, err := f.ApplyPipeline("bench", &runnelv1.ApplyPipelineRequest{Spec: specs[(gen+1)%2]}); err != nil {
			b.Fatal(err)
		}
		gen++
		got.Store(0)
		want.Store(gen)
		start := time.Now()
		if _, err := f.ApplyDeployment("bench", &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "all", Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}}}}); err != nil {
			b.Fatal(err)
		}
		<-done
		times = append(times, time.Since(start))
	}
	cancel()
	f.Close()
	for range n {
		<-stopped
	}
	slices.Sort(times)
	q := func(p float64) float64 { return float64(times[int(p*float64(len(times)-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// BenchmarkEdgeMemory10k: the heap a registered edge costs, with its
// labels, status and open stream, at 10,000 edges (heap-B/edge), and the
// store's bytes per edge (file-B/edge). The loop times GetEdge.
func BenchmarkEdgeMemory10k(b *testing.B) {
	dir := b.TempDir()
	f, err := fleet.Open(dir, fleet.Options{Tick: -1, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const n = 10_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	ids, cancel := registerFleet(b, f, n)
	defer cancel()
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := float64(after.HeapAlloc-before.HeapAlloc) / n
	st, err := os.Stat(filepath.Join(dir, "fleet.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := f.GetEdge(ids[i%n]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	// After the loop: b.Loop's first call resets the metrics.
	b.ReportMetric(heap, "heap-B/edge")
	b.ReportMetric(float64(st.Size())/n, "file-B/edge")
}

// BenchmarkFlushStatus: writing the statuses that are due to the store,
// as the background goroutine does every Tick: 10,000 edges report every
// 10 s and each metric-only status is written once a StatusWriteEvery,
// so with the edges' reports staggered a tick writes about 1,000 of them
// (the edges that reported in the last second) when they fall due
// together, as they do after a start. An op is one Status call and its
// write (fsync included, shared by the tick's writes).
func BenchmarkFlushStatus(b *testing.B) {
	f, err := fleet.Open(b.TempDir(), fleet.Options{Tick: -1, StatusWriteEvery: time.Nanosecond})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	const n, perTick = 10_000, 1_000
	ids, cancel := registerFleet(b, f, n)
	defer cancel()
	if err := f.FlushStatus(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		st := typicalStatus(0)
		st.RecordsPerMin = float64(i)
		if err := f.Status(ids[i%n], st); err != nil {
			b.Fatal(err)
		}
		i++
		if i%perTick == 0 {
			if err := f.FlushStatus(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
