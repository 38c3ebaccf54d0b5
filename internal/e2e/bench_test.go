package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/internal/testcert"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/grpczstd"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/sync/uplink/uplinktest"
	"github.com/runnel-io/runnel/window/aggregate"
)

// The pipelines of the uplink benchmarks: the README's example (scalars
// and both sketches) and scalars only.
var benchSpecs = map[string]string{
	"line-temps": `name: line-temps
source: {mqtt: {topic: "plant/+/temp"}}
event_time: {field: ts, unit: ms}
key: [device]
window: {tumbling: 1m}
aggregates:
  readings: count()
  avg_temp: avg(temp)
  max_temp: max(temp)
  p95_temp: quantile(temp, 0.95)
  devices_seen: distinct(device)
`,
	"scalars": `name: scalars
source: {mqtt: {topic: "plant/+/temp"}}
event_time: {field: ts, unit: ms}
key: [device]
window: {tumbling: 1m}
aggregates: {readings: count(), avg_temp: avg(temp), max_temp: max(temp)}
`,
}

func compileBench(b testing.TB, name string) *operators.Pipeline {
	p, err := operators.CompileYAML(name+".yaml", []byte(benchSpecs[name]))
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// partials makes n realistic outbox entries of p: one-minute windows of
// devices that each sent 60 readings (one a second) around 21 °C.
func partials(p *operators.Pipeline, n int, seed uint64) []uplink.Entry {
	r := rand.New(rand.NewPCG(seed, 1))
	set := p.Aggregates
	st := set.New()
	nums := make([]float64, set.NumInputs())
	hashes := make([]uint64, set.HashInputs())
	var es []uplink.Entry
	for i := range n {
		set.Reset(st)
		dev := fmt.Sprintf("dev-%05d", i%5000)
		for j := range 60 {
			for k := range nums {
				nums[k] = 21 + r.NormFloat64()*2
			}
			for k := range hashes {
				hashes[k] = uint64(i%5000) * 0x9e3779b97f4a7c15
			}
			set.Add(st, &aggregate.Input{Time: int64(j) * 1000, Nums: nums, Hashes: hashes})
		}
		key := append([]byte{'s', byte(len(dev))}, dev...)
		start := int64(1_767_225_600_000) + int64(i/5000)*60_000
		es = append(es, uplink.Entry{Seq: uint64(i + 1), Pipeline: p.Name, Key: key, Start: start, End: start + 60_000,
			Version: 1, State: set.AppendEncode(nil, st)})
	}
	return es
}

// BenchmarkUplinkBytes reports the bytes per partial of a realistic batch
// (500 partials) as protobuf, and compressed with the uplink's zstd.
func BenchmarkUplinkBytes(b *testing.B) {
	for _, name := range []string{"line-temps", "scalars"} {
		b.Run("pipeline="+name, func(b *testing.B) {
			es := partials(compileBench(b, name), 500, 1)
			batch := &runnelv1.Batch{EdgeId: "gw-0001", Epoch: 1, FirstSeq: 1, LastSeq: uint64(len(es))}
			for i := range es {
				e := &es[i]
				batch.Partials = append(batch.Partials, &runnelv1.Partial{Seq: e.Seq, Pipeline: e.Pipeline, Key: e.Key,
					WindowStart: e.Start, WindowEnd: e.End, Version: e.Version, State: e.State})
			}
			c := encoding.GetCompressor(grpczstd.Name)
			b.ReportAllocs()
			var raw, packed int
			for b.Loop() {
				msg, err := proto.Marshal(&runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Batch{Batch: batch}})
				if err != nil {
					b.Fatal(err)
				}
				var buf bytes.Buffer
				w, _ := c.Compress(&buf)
				w.Write(msg)
				w.Close()
				raw, packed = len(msg), buf.Len()
			}
			b.ReportMetric(float64(raw)/float64(len(es)), "proto-B/partial")
			b.ReportMetric(float64(packed)/float64(len(es)), "zstd-B/partial")
		})
	}
}

// BenchmarkUplinkToHub measures partials/s from edges' outboxes to a hub
// over loopback gRPC (zstd, tokens; plaintext, or TLS with tls=true, the
// hub's certificate from internal/testcert), until the hub has made every
// partial durable (bbolt with fsync) and acked it. Each op is one partial.
func BenchmarkUplinkToHub(b *testing.B) {
	ca, err := testcert.Write(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		edges int
		tls   bool
	}{{1, false}, {4, false}, {1, true}} {
		name := fmt.Sprintf("edges=%d", c.edges)
		if c.tls {
			name += ",tls"
		}
		edges := c.edges
		b.Run(name, func(b *testing.B) {
			p := compileBench(b, "scalars")
			quiet := slog.New(slog.DiscardHandler)
			core, err := hub.Open(hub.Config{Dir: filepath.Join(b.TempDir(), "hub"), Pipelines: []*operators.Pipeline{p}, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer core.Close()
			tokens := map[string]string{}
			for e := range edges {
				tokens[fmt.Sprintf("gw-%d", e)] = fmt.Sprintf("bench-token-%d-0123456789", e)
			}
			scfg := server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", EdgeTokens: tokens, Insecure: true, Logger: quiet}
			var clientTLS *tls.Config
			if c.tls {
				scfg.CertFile, scfg.KeyFile, scfg.Insecure = ca.Cert, ca.Key, false
				pem, err := os.ReadFile(ca.CA)
				if err != nil {
					b.Fatal(err)
				}
				roots := x509.NewCertPool()
				roots.AppendCertsFromPEM(pem)
				clientTLS = &tls.Config{RootCAs: roots}
			}
			srv, err := server.New(core, scfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				b.Fatal(err)
			}
			defer srv.Shutdown(context.Background())
			per := max(b.N/edges, 1)
			obs := make([]*uplinktest.Outbox, edges)
			for e := range edges {
				obs[e] = uplinktest.New()
				obs[e].Add(partials(p, per, uint64(e))...)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			began := time.Now()
			for e := range edges {
				u, err := uplink.New(uplink.Config{EdgeID: fmt.Sprintf("gw-%d", e), Hub: srv.GRPCAddr().String(),
					Token: tokens[fmt.Sprintf("gw-%d", e)], TLS: clientTLS, Insecure: clientTLS == nil, Logger: quiet}, obs[e])
				if err != nil {
					b.Fatal(err)
				}
				wg.Go(func() { u.Run(ctx) })
			}
			for _, o := range obs {
				<-o.Done()
			}
			elapsed := time.Since(began)
			b.StopTimer()
			cancel()
			wg.Wait()
			b.ReportMetric(float64(per*edges)/elapsed.Seconds(), "partials/s")
		})
	}
}
