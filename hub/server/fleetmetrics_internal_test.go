package server

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// listFleet serves ListEdges and ListDeployments from fixed lists.
type listFleet struct {
	FleetCore // nil: only the lists are called
	edges     []*runnelv1.FleetEdge
	deps      []*runnelv1.Deployment
}

func (f listFleet) ListEdges(string) ([]*runnelv1.FleetEdge, error) { return f.edges, nil }
func (f listFleet) ListDeployments() []*runnelv1.Deployment         { return f.deps }

// BenchmarkFleetGather is one scrape of the fleet's metrics: edges with a
// status of 4 pipelines each, and 10 deployments; with the per-edge series
// (metrics=always) and as EdgeMetricsAuto has it for the fleet's size.
func BenchmarkFleetGather(b *testing.B) {
	for _, c := range []struct {
		n    int
		mode EdgeMetrics
	}{{1000, EdgeMetricsAlways}, {10000, EdgeMetricsAlways}, {10000, EdgeMetricsAuto}} {
		n := c.n
		b.Run(fmt.Sprintf("edges=%d/metrics=%s", n, c.mode), func(b *testing.B) {
			f := listFleet{}
			for i := range n {
				st := &runnelv1.EdgeStatus{AppliedGeneration: 3, OutboxEntries: 10, OldestUnsentMs: 1500, DiskUsedBytes: 1 << 20, DiskCapBytes: 1 << 30, RecordsPerMin: 600}
				for p := range 4 {
					st.Pipelines = append(st.Pipelines, &runnelv1.PipelineStatus{Name: fmt.Sprint("p", p), Revision: 2, State: "running", WatermarkMs: 1, WatermarkLagMs: 900})
				}
				f.edges = append(f.edges, &runnelv1.FleetEdge{EdgeId: fmt.Sprintf("gw-%05d", i), Connected: true, LastSeenMs: 1700000000000, DesiredGeneration: 3, Status: st})
			}
			for i := range 10 {
				f.deps = append(f.deps, &runnelv1.Deployment{Spec: &runnelv1.DeploymentSpec{Name: fmt.Sprint("d", i)}, Version: 1,
					Rollout: &runnelv1.RolloutStatus{Phase: "succeeded", Targeted: uint32(n)}})
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(fleetCollector{fleet: f, mode: c.mode, log: slog.New(slog.DiscardHandler)})
			b.ReportAllocs()
			series := 0
			for b.Loop() {
				mfs, err := reg.Gather()
				if err != nil {
					b.Fatal(err)
				}
				series = 0
				for _, mf := range mfs {
					series += len(mf.Metric)
				}
			}
			b.ReportMetric(float64(series), "series")
		})
	}
}
