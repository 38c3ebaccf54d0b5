// Package examples holds the sample pipeline the binaries run when no
// pipeline is configured, so that there is one copy of it.
package examples

import _ "embed"

// LineTemps is line-temps.yaml: per device, one-minute temperature
// statistics. runnel-edge runs it and runnel-hub merges it by default.
//
//go:embed line-temps.yaml
var LineTemps []byte
