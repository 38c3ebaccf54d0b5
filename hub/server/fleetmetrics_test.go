package server_test

import (
	"cmp"
	"fmt"
	"strings"
	"testing"

	"github.com/runnel-io/runnel/hub/server"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// TestFleetMetrics: /metrics carries the fleet's state at scrape time:
// edges registered and connected, per deployment its counts, step and
// phase, per edge its status (none of it before the edge reported one);
// an edge the core lists twice is exported once.
func TestFleetMetrics(t *testing.T) {
	ff := newFakeFleet()
	ff.edges = []*runnelv1.FleetEdge{
		{EdgeId: "gw-1", Connected: true, LastSeenMs: 1700000000500, DesiredGeneration: 4, Status: &runnelv1.EdgeStatus{
			AppliedGeneration: 3, OutboxEntries: 120, OldestUnsentMs: 2500, DiskUsedBytes: 1 << 20, DiskCapBytes: 1 << 30,
			RecordsPerMin: 600, DeadPerMin: 1.5, LatePerMin: 0.25,
			Pipelines: []*runnelv1.PipelineStatus{{Name: "temps", Revision: 2, State: "running", WatermarkMs: 1700000000000, WatermarkLagMs: 1500},
				{Name: "new", Revision: 1, State: "applying"}}}},
		{EdgeId: "gw-2", DesiredGeneration: 1},
		{EdgeId: "gw-2", Connected: true}, // listed twice: the first counts
	}
	ff.deps = []*runnelv1.Deployment{{Spec: &runnelv1.DeploymentSpec{Name: "temps-all"}, Version: 2,
		Rollout: &runnelv1.RolloutStatus{Phase: "progressing", Step: 1, Steps: 3, Targeted: 10, Pending: 6, Applied: 3, Failed: 1}}}
	e := startFleet(t, ff, nil)
	connect(t, e, ff, testCtx(t), "token-1", "gw-1")

	code, body := e.get(t, "/metrics", "")
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	for _, want := range []string{
		"runnel_hub_fleet_edges_registered 2",
		"runnel_hub_fleet_edges_connected 1",
		"runnel_hub_fleet_control_streams 1",
		`runnel_hub_fleet_deployment_targeted{deployment="temps-all"} 10`,
		`runnel_hub_fleet_deployment_pending{deployment="temps-all"} 6`,
		`runnel_hub_fleet_deployment_applied{deployment="temps-all"} 3`,
		`runnel_hub_fleet_deployment_failed{deployment="temps-all"} 1`,
		`runnel_hub_fleet_deployment_step{deployment="temps-all"} 1`,
		`runnel_hub_fleet_deployment_steps{deployment="temps-all"} 3`,
		`runnel_hub_fleet_deployment_version{deployment="temps-all"} 2`,
		`runnel_hub_fleet_deployment_phase{deployment="temps-all",phase="progressing"} 1`,
		`runnel_hub_fleet_edge_connected{edge="gw-1"} 1`,
		`runnel_hub_fleet_edge_connected{edge="gw-2"} 0`,
		`runnel_hub_fleet_edge_last_seen_seconds{edge="gw-1"} 1.7000000005e+09`,
		`runnel_hub_fleet_edge_desired_generation{edge="gw-1"} 4`,
		`runnel_hub_fleet_edge_desired_generation{edge="gw-2"} 1`,
		`runnel_hub_fleet_edge_applied_generation{edge="gw-1"} 3`,
		`runnel_hub_fleet_edge_outbox_entries{edge="gw-1"} 120`,
		`runnel_hub_fleet_edge_oldest_unsent_seconds{edge="gw-1"} 2.5`,
		`runnel_hub_fleet_edge_disk_used_bytes{edge="gw-1"} 1.048576e+06`,
		`runnel_hub_fleet_edge_disk_cap_bytes{edge="gw-1"} 1.073741824e+09`,
		`runnel_hub_fleet_edge_records_per_minute{edge="gw-1"} 600`,
		`runnel_hub_fleet_edge_dead_per_minute{edge="gw-1"} 1.5`,
		`runnel_hub_fleet_edge_late_per_minute{edge="gw-1"} 0.25`,
		`runnel_hub_fleet_edge_watermark_lag_seconds{edge="gw-1",pipeline="temps"} 1.5`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("metrics miss %q", want)
		}
	}
	for _, absent := range []string{`runnel_hub_fleet_edge_applied_generation{edge="gw-2"}`, `runnel_hub_fleet_edge_outbox_entries{edge="gw-2"}`,
		`pipeline="new"`} {
		if strings.Contains(body, absent) {
			t.Errorf("metrics have %q", absent)
		}
	}
}

// TestNoFleetMetrics: a hub without a fleet exports no fleet series.
func TestNoFleetMetrics(t *testing.T) {
	e := start(t, newFakeCore(testPipeline(t)), nil)
	if _, body := e.get(t, "/metrics", ""); strings.Contains(body, "runnel_hub_fleet_") {
		t.Error("fleet metrics without a fleet")
	}
}

// TestFleetEdgeMetricsModes: FleetEdgeMetrics picks whether /metrics
// carries the per-edge fleet series: auto (the default) while the fleet
// has at most EdgeMetricsAutoMax edges, on always, off never; the
// aggregate series are there in every mode, and
// runnel_hub_fleet_per_edge_metrics says which it is.
func TestFleetEdgeMetricsModes(t *testing.T) {
	fleetOf := func(n int) *fakeFleet {
		ff := newFakeFleet()
		for i := range n {
			ff.edges = append(ff.edges, &runnelv1.FleetEdge{EdgeId: fmt.Sprintf("gw-%05d", i), Connected: i%2 == 0, DesiredGeneration: 1,
				Status: &runnelv1.EdgeStatus{AppliedGeneration: 1, RecordsPerMin: 60}})
		}
		ff.deps = []*runnelv1.Deployment{{Spec: &runnelv1.DeploymentSpec{Name: "temps"}, Version: 1,
			Rollout: &runnelv1.RolloutStatus{Phase: "succeeded", Targeted: uint32(n), Applied: uint32(n)}}}
		return ff
	}
	for _, tc := range []struct {
		mode    server.EdgeMetrics
		edges   int
		perEdge bool
	}{
		{"", 2, true},
		{server.EdgeMetricsAuto, server.EdgeMetricsAutoMax, true},
		{server.EdgeMetricsAuto, server.EdgeMetricsAutoMax + 1, false},
		{"", server.EdgeMetricsAutoMax + 1, false},
		{server.EdgeMetricsAlways, server.EdgeMetricsAutoMax + 1, true},
		{server.EdgeMetricsNever, 2, false},
	} {
		t.Run(fmt.Sprintf("%s/edges=%d", cmp.Or(tc.mode, "default"), tc.edges), func(t *testing.T) {
			e := startFleet(t, fleetOf(tc.edges), func(c *server.Config) { c.FleetEdgeMetrics = tc.mode })
			code, body := e.get(t, "/metrics", "")
			if code != 200 {
				t.Fatalf("metrics: %d", code)
			}
			for _, want := range []string{
				fmt.Sprintf("runnel_hub_fleet_edges_registered %d", tc.edges),
				fmt.Sprintf("runnel_hub_fleet_edges_connected %d", (tc.edges+1)/2),
				fmt.Sprintf(`runnel_hub_fleet_deployment_applied{deployment="temps"} %d`, tc.edges),
				fmt.Sprintf("runnel_hub_fleet_per_edge_metrics %d", map[bool]int{false: 0, true: 1}[tc.perEdge]),
			} {
				if !strings.Contains(body, want+"\n") {
					t.Errorf("metrics miss %q", want)
				}
			}
			want := 0
			if tc.perEdge {
				want = tc.edges
			}
			for _, series := range []string{"runnel_hub_fleet_edge_connected{", "runnel_hub_fleet_edge_applied_generation{", "runnel_hub_fleet_edge_records_per_minute{"} {
				if got := strings.Count(body, "\n"+series); got != want {
					t.Errorf("%d series %s…}, want %d", got, series, want)
				}
			}
		})
	}
}

// TestFleetEdgeMetricsRefused: an unknown FleetEdgeMetrics is refused by
// New, naming the value and the ones it takes.
func TestFleetEdgeMetricsRefused(t *testing.T) {
	_, err := server.New(newFakeCore(testPipeline(t)), server.Config{Insecure: true, Fleet: newFakeFleet(), FleetEdgeMetrics: "yes"})
	if err == nil || !strings.Contains(err.Error(), `fleet edge metrics "yes": use auto, always or never`) {
		t.Errorf("New with FleetEdgeMetrics yes: %v", err)
	}
}
