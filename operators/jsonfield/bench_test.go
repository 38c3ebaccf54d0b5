package jsonfield

import (
	"fmt"
	"strings"
	"testing"
)

// largeDoc is a ~2 KB gateway payload where the four wanted fields hide
// among many skipped ones: nested diagnostics, arrays of readings, long
// strings, escapes and non-ASCII text.
func largeDoc() []byte {
	var b strings.Builder
	b.WriteString(`{"schema":"runnel.sensor/v3","device":"gw-07/d-0042","seq":918273645,`)
	b.WriteString(`"diag":{"uptime_s":8640012,"rssi":-71,"snr":9.25,"reboots":3,"fw":{"version":"1.2.3-rc.4+build.77","sha":"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08","signed":true},"errors":[]},`)
	b.WriteString(`"readings":[`)
	for i := range 12 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"ch":%d,"v":%d.%03d,"unit":"°C","ok":%t,"q":null}`, i, 20+i, 137*i%1000, i%5 != 0)
	}
	b.WriteString(`],`)
	b.WriteString(`"notes":"calibrated 2023-11-14 by \"field team\"\nnext due: 2024-05; Grüße aus dem Norden ✓",`)
	b.WriteString(`"labels":{"building":"B12","floor":"3","room":"3.114","zone":"north-east","owner":"facilities","cost_center":"CC-4471"},`)
	b.WriteString(`"history":[21.4,21.45,21.5,21.52,21.55,21.57,21.6,21.58,21.57,21.55,21.5,21.49,21.47,21.45,21.44,21.43],`)
	b.WriteString(`"ts":1700000000123,"temp":21.57,`)
	b.WriteString(`"meta":{"site":"north","fw":"1.2.3","hw":"rev-c","geo":{"lat":59.3293,"lon":18.0686,"alt":28.0}},`)
	b.WriteString(`"tags":["a","b","indoor","hvac","critical-path","owner:facilities"],`)
	b.WriteString(`"padding":"` + strings.Repeat("0123456789abcdef", 28) + `"}`)
	return []byte(b.String())
}

func BenchmarkExtract(b *testing.B) {
	payloads := []struct {
		name string
		doc  []byte
	}{
		{"sensor", []byte(sensorDoc)},
		{"escaped", []byte(`{"device":"d-\u00e9\"42\"","ts":1700000000123,"temp":21.57,"meta":{"site":"nor\th","fw":"1.2.3"},"tags":["a","b"]}`)},
		{"large", largeDoc()},
	}
	e, err := New([]string{"device", "ts", "temp", "meta.site"})
	if err != nil {
		b.Fatal(err)
	}
	out := make([]Value, 4)
	for _, p := range payloads {
		b.Run("payload="+p.name, func(b *testing.B) {
			if err := e.Extract(p.doc, out); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(p.doc)))
			b.ReportAllocs()
			for b.Loop() {
				if err := e.Extract(p.doc, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkFloat(b *testing.B) {
	for _, raw := range []string{"21.57", "1700000000123", "-0.000123", "3.141592653589793238", "1e300"} {
		v := Value{Kind: Number, Raw: []byte(raw)}
		b.Run("n="+raw, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Float(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkInt(b *testing.B) {
	v := Value{Kind: Number, Raw: []byte("1700000000123")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Int(); err != nil {
			b.Fatal(err)
		}
	}
}
