package ingestlog_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge/ingestlog"
)

// countingFS counts fsyncs of the files it opens for writing.
type countingFS struct {
	ingestlog.FS
	syncs atomic.Int64
}

type countingFile struct {
	ingestlog.File
	syncs *atomic.Int64
}

func (f countingFile) Sync() error { f.syncs.Add(1); return f.File.Sync() }

func (c *countingFS) Create(name string) (ingestlog.File, error) {
	f, err := c.FS.Create(name)
	if err != nil {
		return nil, err
	}
	return countingFile{f, &c.syncs}, nil
}

func (c *countingFS) OpenReadWrite(name string) (ingestlog.File, error) {
	f, err := c.FS.OpenReadWrite(name)
	if err != nil {
		return nil, err
	}
	return countingFile{f, &c.syncs}, nil
}

// benchRecords are n sensor readings in JSON, each exactly size bytes, as
// the MQTT handler would append them (topic and payload).
func benchRecords(n, size int) [][]byte {
	rng := rand.New(rand.NewPCG(5, 5))
	out := make([][]byte, n)
	for i := range out {
		b := fmt.Appendf(nil, `plant/line-%d/temp {"device":"sensor-%04d","site":"north","ts":%d,"temp":%.2f,"hum":%.1f,"fw":"1.4.2","rssi":%d`,
			rng.IntN(8), rng.IntN(1000), 1767225600000+int64(i)*10, 15+rng.Float64()*20, 30+rng.Float64()*40, -40-rng.IntN(50))
		for k := 0; len(b) < size; k++ {
			b = fmt.Appendf(b, `,"ch%d":%.4f`, k, rng.Float64()*1000)
		}
		out[i] = append(b[:size-1], '}')
	}
	return out
}

// BenchmarkAppend appends 200-byte records from one goroutine, as the MQTT
// handler does, to a log on the real filesystem, and waits at the end until
// the last is durable. MB/s and records/s are of durable throughput under
// back-pressure; fsyncs/s shows how well group commit batches.
func BenchmarkAppend(b *testing.B) {
	cases := []struct {
		name string
		sync ingestlog.SyncPolicy
		comp ingestlog.Compression
	}{
		{"record=200B/sync=group", ingestlog.SyncGroup, ingestlog.CompressionNone},
		{"record=200B/sync=never", ingestlog.SyncNever, ingestlog.CompressionNone},
		{"record=200B/sync=always", ingestlog.SyncAlways, ingestlog.CompressionNone},
		{"record=200B/sync=group/compression=zstd", ingestlog.SyncGroup, ingestlog.CompressionZstd},
		{"record=200B/sync=never/compression=zstd", ingestlog.SyncNever, ingestlog.CompressionZstd},
	}
	// Distinct readings, so that zstd meets realistic redundancy rather than
	// a short cycle it can copy whole.
	recs := benchRecords(1<<16, 200)
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			fsys := &countingFS{FS: ingestlog.OSFS()}
			l, _ := mustOpen(b, b.TempDir(), ingestlog.Options{FS: fsys, Sync: bc.sync, Compression: bc.comp})
			defer mustClose(b, l)
			b.SetBytes(200)
			b.ReportAllocs()
			start, syncs0 := time.Now(), fsys.syncs.Load()
			var last ingestlog.Position
			i := 0
			for b.Loop() {
				p, err := l.Append(ctx, recs[i%len(recs)])
				if err != nil {
					b.Fatal(err)
				}
				last = p
				i++
			}
			if err := l.WaitDurable(ctx, last); err != nil {
				b.Fatal(err)
			}
			secs := time.Since(start).Seconds()
			b.ReportMetric(float64(i)/secs, "records/s")
			b.ReportMetric(float64(fsys.syncs.Load()-syncs0)/secs, "fsyncs/s")
			b.ReportMetric(float64(l.Size())/float64(i), "disk-B/record")
		})
	}
}

// BenchmarkRead reads 200-byte records back, as replay after a crash does.
func BenchmarkRead(b *testing.B) {
	for _, comp := range []ingestlog.Compression{ingestlog.CompressionNone, ingestlog.CompressionZstd} {
		b.Run("record=200B/compression="+comp.String(), func(b *testing.B) {
			recs := benchRecords(1<<16, 200)
			l, _ := mustOpen(b, b.TempDir(), ingestlog.Options{Sync: ingestlog.SyncNever, Compression: comp})
			defer mustClose(b, l)
			const n = 200_000
			ctx := context.Background()
			for i := range n {
				if _, err := l.Append(ctx, recs[i%len(recs)]); err != nil {
					b.Fatal(err)
				}
			}
			if err := l.WaitDurable(ctx, n-1); err != nil {
				b.Fatal(err)
			}
			r, err := l.NewReader(0)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			b.SetBytes(200)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := r.Next(); err == io.EOF {
					r.Close()
					if r, err = l.NewReader(0); err != nil {
						b.Fatal(err)
					}
				} else if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
