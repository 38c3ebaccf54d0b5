//go:build !runnel_ddsketch

package aggregate

import "errors"

// This build leaves DDSketch out: its packages import
// google.golang.org/protobuf, which go.sum does not list yet. NewSet rejects
// Quantile aggregates, so nothing below is ever reached. Build with
// -tags runnel_ddsketch (after adding the module) for quantile_ddsketch.go.

const quantileSupported = false

type quantiles struct{}

type qsketch struct{}

func newQuantiles(float64) (quantiles, error) {
	return quantiles{}, errors.New("DDSketch not built in")
}

const noQuantile = "aggregate: quantile aggregate in a build without DDSketch"

func (*quantiles) newSketch() *qsketch                  { panic(noQuantile) }
func (*qsketch) add(*quantiles, float64) bool           { panic(noQuantile) }
func (*qsketch) reset()                                 { panic(noQuantile) }
func (*qsketch) merge(*qsketch)                         { panic(noQuantile) }
func (*qsketch) quantile(float64) float64               { panic(noQuantile) }
func (*quantiles) appendEncode([]byte, *qsketch) []byte { panic(noQuantile) }
func (*quantiles) read(*reader, uint64, *qsketch) error { panic(noQuantile) }
