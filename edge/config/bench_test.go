package config

import (
	"bytes"
	"testing"
)

// Loading the config is start-up work, once per process; the benchmark
// keeps it from becoming slow enough to notice on a small ARM gateway, and
// shows what a refused config costs (the problem list, the hints).
func BenchmarkLoad(b *testing.B) {
	for _, bc := range []struct {
		name    string
		data    string
		args    []string
		environ []string
	}{
		{name: "config=empty"},
		{name: "config=example", data: table.ExampleYAML(),
			args:    []string{"--edge-id", "gw-001", "--log-level=debug"},
			environ: []string{"HOME=/root", "RUNNEL_DEDUP_WINDOW=5m"}},
		{name: "config=invalid", data: docsBadFile, args: []string{"--broker-receive-maximum", "100000", "--nope"},
			environ: []string{docsBadEnv, "RUNNEL_CHECKPOINT_INTERVL=1s"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.data)))
			file := ""
			if bc.data != "" {
				file = "edge.yaml"
			}
			for b.Loop() {
				_, _ = loadData(file, bc.data, bc.args, bc.environ)
			}
		})
	}
}

func BenchmarkUsage(b *testing.B) {
	b.ReportAllocs()
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		Usage(&buf)
	}
}
