package selector_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/runnel-io/runnel/hub/fleet/selector"
)

// fleetLabels returns n edges' label maps as a fleet might have them:
// site, hardware, region, a ring, and a legacy flag on some.
func fleetLabels(n int) []map[string]string {
	r := rand.New(rand.NewPCG(7, 7))
	hw := []string{"rpi4", "cm4", "x86", "jetson"}
	regions := []string{"eu", "us", "ap"}
	out := make([]map[string]string, n)
	for i := range out {
		l := map[string]string{
			"site":   fmt.Sprintf("plant-%d", r.IntN(50)),
			"hw":     hw[r.IntN(len(hw))],
			"region": regions[r.IntN(len(regions))],
			"ring":   fmt.Sprint(r.IntN(3)),
			"edge":   fmt.Sprintf("e-%05d", i),
		}
		if r.IntN(10) == 0 {
			l["legacy"] = "true"
		}
		out[i] = l
	}
	return out
}

// BenchmarkSelect10k evaluates a typical selector over 10,000 edges'
// labels; one op is the whole fleet (target: < 1 ms).
func BenchmarkSelect10k(b *testing.B) {
	edges := fleetLabels(10_000)
	s, err := selector.Parse("hw in (rpi4,cm4),!legacy,region=eu,ring!=0")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		n = 0
		for _, l := range edges {
			if s.Matches(l) {
				n++
			}
		}
	}
	b.ReportMetric(float64(n), "selected")
}

func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := selector.Parse("site=plant-7,hw in (rpi4,cm4),!legacy"); err != nil {
			b.Fatal(err)
		}
	}
}
