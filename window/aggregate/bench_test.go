package aggregate

import (
	"math/rand/v2"
	"testing"
)

// benchSets are the Sets the benchmarks run, by the name in the benchmark.
func benchSpecs(name string) []Spec {
	switch name {
	case "count,avg,max":
		return []Spec{
			{Name: "readings", Func: Count, Input: -1},
			{Name: "avg_temp", Func: Avg, Input: 0},
			{Name: "max_temp", Func: Max, Input: 0},
		}
	case "scalars":
		return scalarSpecs
	case "count,avg,max,distinct":
		return append(benchSpecs("count,avg,max"), Spec{Name: "devices", Func: Distinct, Input: 0})
	case "count,avg,max,quantile,distinct":
		return append(benchSpecs("count,avg,max"),
			Spec{Name: "p99_temp", Func: Quantile, Input: 0, Param: 0.99},
			Spec{Name: "devices", Func: Distinct, Input: 0})
	}
	panic(name)
}

func benchNames() []string {
	return []string{"count,avg,max", "scalars", "count,avg,max,distinct", "count,avg,max,quantile,distinct"}
}

// benchInputs are sensor-like records: temperatures around 20, a few nulls,
// 50 devices.
func benchInputs(s *Set, n int) []Input {
	r := rand.New(rand.NewPCG(1, 2))
	ins := make([]Input, n)
	for i := range ins {
		nums := make([]float64, max(s.NumInputs(), 2))
		for j := range nums {
			nums[j] = 20 + r.NormFloat64()*3
			if r.IntN(50) == 0 {
				nums[j] = null
			}
		}
		ins[i] = Input{Time: int64(i) * 100, Nums: nums, Hashes: []uint64{hashOf(uint64(r.IntN(50)))}}
	}
	return ins
}

// BenchmarkAdd is the window operator's per-record cost.
func BenchmarkAdd(b *testing.B) {
	for _, name := range benchNames() {
		b.Run("aggs="+name, func(b *testing.B) {
			s := mustSet(b, Options{}, benchSpecs(name)...)
			ins := benchInputs(s, 1024)
			st := s.New()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Add(st, &ins[i&1023])
				i++
			}
		})
	}
}

// partials returns encoded partials of 100 records each, as edges send them.
func partials(s *Set, n int) [][]byte {
	ins := benchInputs(s, 100*n)
	out := make([][]byte, n)
	st := s.New()
	for i := range out {
		s.Reset(st)
		for j := range 100 {
			s.Add(st, &ins[i*100+j])
		}
		out[i] = s.AppendEncode(nil, st)
	}
	return out
}

func BenchmarkMerge(b *testing.B) {
	for _, name := range benchNames() {
		b.Run("aggs="+name, func(b *testing.B) {
			s := mustSet(b, Options{}, benchSpecs(name)...)
			srcs := make([]*State, 64)
			for i, p := range partials(s, len(srcs)) {
				srcs[i] = s.New()
				if err := s.Decode(srcs[i], p); err != nil {
					b.Fatal(err)
				}
			}
			dst := s.New()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.Merge(dst, srcs[i&63])
				i++
			}
		})
	}
}

func BenchmarkAppendEncode(b *testing.B) {
	for _, name := range benchNames() {
		b.Run("aggs="+name, func(b *testing.B) {
			s := mustSet(b, Options{}, benchSpecs(name)...)
			st := s.New()
			if err := s.Decode(st, partials(s, 1)[0]); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 0, 4096)
			b.ReportAllocs()
			for b.Loop() {
				buf = s.AppendEncode(buf[:0], st)
			}
			b.ReportMetric(float64(len(buf)), "bytes/partial")
		})
	}
}

// BenchmarkMergeEncoded is the hub's per-partial cost.
func BenchmarkMergeEncoded(b *testing.B) {
	for _, name := range benchNames() {
		b.Run("aggs="+name, func(b *testing.B) {
			s := mustSet(b, Options{}, benchSpecs(name)...)
			ps := partials(s, 64)
			dst := s.New()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := s.MergeEncoded(dst, ps[i&63]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, name := range benchNames() {
		b.Run("aggs="+name, func(b *testing.B) {
			s := mustSet(b, Options{}, benchSpecs(name)...)
			ps := partials(s, 64)
			st := s.New()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := s.Decode(st, ps[i&63]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
