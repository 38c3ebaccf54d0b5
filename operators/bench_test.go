package operators_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/window"
)

const benchSpec = `name: bench
source: {mqtt: {topic: "plant/+/temp"}}
event_time: {field: ts, unit: ms}
key: [device]
watermark: {max_out_of_order: 5s}
%s
window: {tumbling: 1m}
allowed_lateness: 5s
aggregates:
  readings: count()
  avg_temp: avg(temp)
  max_temp: max(temp)
`

// payloads is a fleet of 10^5 sensors, each reporting every 10 s in
// shuffled order: realistic JSON documents whose ts digits are rewritten in
// place for every record.
type payloads struct {
	docs  [][]byte
	tsAt  []int // offset of the 13 ts digits in each doc
	jit   []int64
	nkeys int
}

func newPayloads(nkeys int) *payloads {
	rng := rand.New(rand.NewPCG(3, 3))
	p := &payloads{nkeys: nkeys}
	for _, k := range rng.Perm(nkeys) {
		doc := fmt.Appendf(nil, `{"device":"sensor-%06d","site":"north","ts":1700000000000,"temp":%.2f,"meta":{"fw":"1.4.2","rssi":-61}}`, k, 15+rng.Float64()*20)
		at := 0
		for i := range doc {
			if string(doc[i:i+4]) == `"ts"` {
				at = i + 5
				break
			}
		}
		p.docs = append(p.docs, doc)
		p.tsAt = append(p.tsAt, at)
		p.jit = append(p.jit, rng.Int64N(2000))
	}
	return p
}

func (p *payloads) at(i int) []byte {
	k := i % p.nkeys
	t := 1_700_000_000_000 + int64(i/p.nkeys)*10_000 + int64(k)*10_000/int64(p.nkeys) - p.jit[k]
	doc := p.docs[k]
	for j := p.tsAt[k] + 12; j >= p.tsAt[k]; j-- {
		doc[j] = byte('0' + t%10)
		t /= 10
	}
	return doc
}

// BenchmarkDecodeAggregate is the per-record work of one worker core: JSON
// decode with projection, watermark, window aggregation (count/avg/max,
// tumbling 1 m, 10^5 keys) and result encoding, without goroutine hand-offs.
func BenchmarkDecodeAggregate(b *testing.B) {
	for _, bc := range []struct{ name, filter string }{
		{"filter=none", ""},
		{"filter=expr", `filter: "temp > -40 && temp < 150"`},
	} {
		b.Run(bc.name+"/keys=1e5", func(b *testing.B) {
			p := compile(b, fmt.Sprintf(benchSpec, bc.filter))
			dec := p.NewDecoder()
			rec := p.NewRecord()
			wms := window.NewWatermarks(1, p.MaxOOO, 0)
			var out []byte
			op, err := window.NewOperator(window.Config{Assigner: p.Assigner, Lateness: p.Lateness, Aggregates: p.Aggregates,
				Emit: func(r *window.Result) { out = p.Aggregates.AppendEncode(out[:0], r.State) }})
			if err != nil {
				b.Fatal(err)
			}
			src := newPayloads(100_000)
			// As a worker does: a run of decoded records in columns, then
			// added with AddRecords.
			const run = 512 // a full batch
			var r window.Records
			i := 0
			step := func() {
				r = window.Records{Keys: r.Keys[:0], KeyEnds: r.KeyEnds[:0], Hashes: r.Hashes[:0], Times: r.Times[:0],
					Marks: r.Marks[:0], Nums: r.Nums[:0]}
				for j := range run {
					if err := dec.Decode(src.at(i+j), "plant/north/temp", rec); err != nil {
						b.Fatal(err)
					}
					r.Keys = append(r.Keys, rec.Key...)
					r.KeyEnds = append(r.KeyEnds, len(r.Keys))
					r.Hashes = append(r.Hashes, rec.Hash)
					r.Times = append(r.Times, rec.Time)
					r.Marks = append(r.Marks, wms.Observe(0, rec.Time))
					r.Nums = append(r.Nums, rec.Nums...)
				}
				op.AddRecords(&r, func(int, int64) {})
				i += run
			}
			for range 100_000 * 8 / run { // fill a window first
				step()
			}
			var bytes int64
			n := 0
			for b.Loop() {
				bytes += int64(len(src.docs[i%src.nkeys]))
				n++
				if n%run == 1 {
					step()
				}
			}
			b.SetBytes(bytes / int64(b.N))
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkRuntime is the same stream through the whole Runtime: ingest
// goroutine, one window worker, output goroutine and a Sink that discards.
func BenchmarkRuntime(b *testing.B) {
	p := compile(b, fmt.Sprintf(benchSpec, ""))
	src := newPayloads(100_000)
	r, err := operators.Start(context.Background(), p, discard{}, operators.Options{Workers: 1})
	if err != nil {
		b.Fatal(err)
	}
	// The clock an edge logs: every record's event time is checked
	// against max_future (10 min; the stream spans 5 min per 3·10^6).
	r.Clock(1_700_000_000_000)
	i := 0
	for b.Loop() {
		if err := r.Ingest(src.at(i), "plant/north/temp", int64(i)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if _, err := r.Close(true); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

type discard struct{}

func (discard) Result(*operators.Result) error   { return nil }
func (discard) Late(*operators.Late) error       { return nil }
func (discard) Dead(*operators.DeadLetter) error { return nil }
