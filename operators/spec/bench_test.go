package spec

import "testing"

// Parsing is start-up work, not hot path; the benchmark keeps it from
// becoming slow enough to matter for an edge that reloads pipelines pushed
// by the hub.
func BenchmarkParse(b *testing.B) {
	for _, bc := range []struct {
		name string
		data []byte
	}{
		{"spec=example", []byte(example)},
		{"spec=invalid", []byte("name: Bad\nwindow: {tumbling: 1x}\naggregates: {a: mean(x)}\nfiltr: 1\n")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.data)))
			for b.Loop() {
				_, _ = Parse("bench.yaml", bc.data)
			}
		})
	}
}

func BenchmarkExprFields(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_, _ = ExprFields("temp > -40 && temp < 150 && meta.site != 'lab'")
	}
}
