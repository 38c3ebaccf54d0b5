package health

import (
	"encoding/json"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/runnel-io/runnel/internal/buildinfo"
)

// Status is a check's state, ordered from best to worst.
type Status int

const (
	OK Status = iota
	Degraded
	Failing
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Degraded:
		return "degraded"
	}
	return "failing"
}

// MarshalText writes the status as ok, degraded or failing.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Check is the state of one part of a node.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// Report is a node's health: its checks and the worst of their states,
// and the version of the binary that runs it (internal/buildinfo).
type Report struct {
	Status  Status  `json:"status"`
	Version string  `json:"version"`
	Commit  string  `json:"commit,omitempty"`
	Checks  []Check `json:"checks"`
}

// NewReport returns the report of checks, in their order, with the
// running binary's version and commit.
func NewReport(checks []Check) Report {
	bi := buildinfo.Get()
	r := Report{Checks: checks, Version: bi.Version, Commit: bi.Commit}
	for _, c := range checks {
		r.Status = max(r.Status, c.Status)
	}
	return r
}

// Reasons returns the reasons of the checks that are not ok, one per
// check, as "name: reason".
func (r Report) Reasons() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status != OK {
			out = append(out, c.Name+": "+c.Reason)
		}
	}
	return out
}

// Handler serves the report that check returns at each request: 200 for
// ok and degraded, 503 for failing, the report as JSON.
func Handler(check func() Report) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r := check()
		w.Header().Set("Content-Type", "application/json")
		if r.Status == Failing {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(r)
	})
}

// Collector exports a report as the gauge name{check="..."}: 0 ok, 1
// degraded, 2 failing, one series per check, plus check="node" for the
// node's status. The checks are read at scrape time.
func Collector(name, help string, labels prometheus.Labels, check func() Report) prometheus.Collector {
	return &collector{desc: prometheus.NewDesc(name, help, []string{"check"}, labels), check: check}
}

type collector struct {
	desc  *prometheus.Desc
	check func() Report
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	r := c.check()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(r.Status), "node")
	for _, chk := range r.Checks {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(chk.Status), chk.Name)
	}
}
