package server

import (
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// EdgeMetrics says when /metrics carries the per-edge fleet series
// (runnel_hub_fleet_edge_*{edge}): 15 for each registered edge with 4
// pipelines, so 150,000 series and 0.15 to 0.4 s a scrape at 10,000 edges
// (BenchmarkFleetGather).
// The aggregate series (edges registered and connected, each
// deployment's counts, step and phase) are always there.
type EdgeMetrics string

const (
	// EdgeMetricsAuto, the default (also ""): per-edge series while the
	// fleet has at most EdgeMetricsAutoMax registered edges, aggregates
	// only beyond.
	EdgeMetricsAuto EdgeMetrics = "auto"
	// EdgeMetricsAlways: per-edge series whatever the fleet's size.
	EdgeMetricsAlways EdgeMetrics = "always"
	// EdgeMetricsNever: aggregates only.
	EdgeMetricsNever EdgeMetrics = "never"
)

// EdgeMetricsAutoMax is the largest fleet EdgeMetricsAuto exports
// per-edge series for: 15,000 series, scraped in about 16 ms.
const EdgeMetricsAutoMax = 1000

func (m EdgeMetrics) check() error {
	switch m {
	case "", EdgeMetricsAuto, EdgeMetricsAlways, EdgeMetricsNever:
		return nil
	}
	return fmt.Errorf("server: fleet edge metrics %q: use auto, always or never", string(m))
}

// perEdge reports whether a fleet of n edges gets per-edge series.
func (m EdgeMetrics) perEdge(n int) bool {
	switch m {
	case EdgeMetricsAlways:
		return true
	case EdgeMetricsNever:
		return false
	}
	return n <= EdgeMetricsAutoMax
}

// fleetCollector exports the fleet's state, computed at scrape time from
// FleetCore.ListEdges("") and ListDeployments(): nothing is kept between
// scrapes, so a removed edge or deployment leaves no stale series. The
// per-edge series, when mode has them, are one set per registered edge;
// those from its status are absent until it has reported one.
type fleetCollector struct {
	fleet FleetCore
	mode  EdgeMetrics
	log   *slog.Logger
}

var (
	edgeL = []string{"edge"}
	depL  = []string{"deployment"}

	descFleetRegistered = prometheus.NewDesc("runnel_hub_fleet_edges_registered", "Edges registered with the control plane.", nil, nil)
	descFleetConnected  = prometheus.NewDesc("runnel_hub_fleet_edges_connected", "Registered edges with a control stream open.", nil, nil)
	descFleetPerEdge    = prometheus.NewDesc("runnel_hub_fleet_per_edge_metrics", "1 while the per-edge series (runnel_hub_fleet_edge_*) are exported, 0 while only aggregates are (fleet.edge_metrics).", nil, nil)

	descDepTargeted = prometheus.NewDesc("runnel_hub_fleet_deployment_targeted", "Edges the deployment's selector picks.", depL, nil)
	descDepPending  = prometheus.NewDesc("runnel_hub_fleet_deployment_pending", "Targeted edges that have not applied the deployment yet.", depL, nil)
	descDepApplied  = prometheus.NewDesc("runnel_hub_fleet_deployment_applied", "Targeted edges that run the deployment's revisions.", depL, nil)
	descDepFailed   = prometheus.NewDesc("runnel_hub_fleet_deployment_failed", "Targeted edges that failed to apply the deployment.", depL, nil)
	descDepStep     = prometheus.NewDesc("runnel_hub_fleet_deployment_step", "The rollout's current step (0: the canary when staged).", depL, nil)
	descDepSteps    = prometheus.NewDesc("runnel_hub_fleet_deployment_steps", "The rollout's steps.", depL, nil)
	descDepVersion  = prometheus.NewDesc("runnel_hub_fleet_deployment_version", "The deployment's current version.", depL, nil)
	descDepPhase    = prometheus.NewDesc("runnel_hub_fleet_deployment_phase", "1 for the rollout's phase (progressing, paused, succeeded, failed, aborted, superseded).", []string{"deployment", "phase"}, nil)

	descEdgeConnected = prometheus.NewDesc("runnel_hub_fleet_edge_connected", "1 while the edge's control stream is open.", edgeL, nil)
	descEdgeLastSeen  = prometheus.NewDesc("runnel_hub_fleet_edge_last_seen_seconds", "When the edge was last heard from on its control stream, Unix seconds.", edgeL, nil)
	descEdgeDesired   = prometheus.NewDesc("runnel_hub_fleet_edge_desired_generation", "Generation of the desired set the hub holds for the edge.", edgeL, nil)
	descEdgeApplied   = prometheus.NewDesc("runnel_hub_fleet_edge_applied_generation", "Generation of the last desired set the edge applied or refused.", edgeL, nil)
	descEdgeOutbox    = prometheus.NewDesc("runnel_hub_fleet_edge_outbox_entries", "Entries in the edge's outbox not yet acked by the hub.", edgeL, nil)
	descEdgeUnsent    = prometheus.NewDesc("runnel_hub_fleet_edge_oldest_unsent_seconds", "Age of the edge's oldest unsent outbox entry.", edgeL, nil)
	descEdgeDiskUsed  = prometheus.NewDesc("runnel_hub_fleet_edge_disk_used_bytes", "Bytes the edge's data dir uses.", edgeL, nil)
	descEdgeDiskCap   = prometheus.NewDesc("runnel_hub_fleet_edge_disk_cap_bytes", "Bytes the edge's data dir may use.", edgeL, nil)
	descEdgeRecords   = prometheus.NewDesc("runnel_hub_fleet_edge_records_per_minute", "Records the edge took in per minute.", edgeL, nil)
	descEdgeDead      = prometheus.NewDesc("runnel_hub_fleet_edge_dead_per_minute", "Records the edge dead-lettered per minute.", edgeL, nil)
	descEdgeLate      = prometheus.NewDesc("runnel_hub_fleet_edge_late_per_minute", "Records the edge found late per minute.", edgeL, nil)
	descEdgeWMLag     = prometheus.NewDesc("runnel_hub_fleet_edge_watermark_lag_seconds", "How far the pipeline's watermark at the edge is behind the edge's clock.", []string{"edge", "pipeline"}, nil)
)

func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descFleetRegistered, descFleetConnected, descFleetPerEdge,
		descDepTargeted, descDepPending, descDepApplied, descDepFailed, descDepStep, descDepSteps, descDepVersion, descDepPhase,
		descEdgeConnected, descEdgeLastSeen, descEdgeDesired, descEdgeApplied, descEdgeOutbox, descEdgeUnsent,
		descEdgeDiskUsed, descEdgeDiskCap, descEdgeRecords, descEdgeDead, descEdgeLate, descEdgeWMLag} {
		ch <- d
	}
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}

	// A series collected twice fails the whole scrape: a core that lists
	// an edge, a deployment or a pipeline twice gets its first.
	seenDep := map[string]bool{}
	for _, d := range c.fleet.ListDeployments() {
		name := d.GetSpec().GetName()
		if name == "" || seenDep[name] {
			continue
		}
		seenDep[name] = true
		r := d.GetRollout()
		gauge(descDepTargeted, float64(r.GetTargeted()), name)
		gauge(descDepPending, float64(r.GetPending()), name)
		gauge(descDepApplied, float64(r.GetApplied()), name)
		gauge(descDepFailed, float64(r.GetFailed()), name)
		gauge(descDepStep, float64(r.GetStep()), name)
		gauge(descDepSteps, float64(r.GetSteps()), name)
		gauge(descDepVersion, float64(d.GetVersion()), name)
		if p := r.GetPhase(); p != "" {
			gauge(descDepPhase, 1, name, p)
		}
	}

	edges, err := c.fleet.ListEdges("")
	if err != nil {
		c.log.Warn("hub: metrics: listing the fleet's edges", "err", err)
		return
	}
	perEdge := c.mode.perEdge(len(edges))
	seenEdge := make(map[string]bool, len(edges))
	connected := 0
	for _, e := range edges {
		id := e.GetEdgeId()
		if id == "" || seenEdge[id] {
			continue
		}
		seenEdge[id] = true
		if e.Connected {
			connected++
		}
		if perEdge {
			c.edge(gauge, b2f, e)
		}
	}
	gauge(descFleetRegistered, float64(len(seenEdge)))
	gauge(descFleetConnected, float64(connected))
	gauge(descFleetPerEdge, b2f(perEdge))
}

func (c fleetCollector) edge(gauge func(*prometheus.Desc, float64, ...string), b2f func(bool) float64, e *runnelv1.FleetEdge) {
	id := e.EdgeId
	gauge(descEdgeConnected, b2f(e.Connected), id)
	if e.LastSeenMs != 0 {
		gauge(descEdgeLastSeen, float64(e.LastSeenMs)/1e3, id)
	}
	gauge(descEdgeDesired, float64(e.DesiredGeneration), id)
	st := e.Status
	if st == nil {
		return
	}
	gauge(descEdgeApplied, float64(st.AppliedGeneration), id)
	gauge(descEdgeOutbox, float64(st.OutboxEntries), id)
	gauge(descEdgeUnsent, float64(st.OldestUnsentMs)/1e3, id)
	gauge(descEdgeDiskUsed, float64(st.DiskUsedBytes), id)
	gauge(descEdgeDiskCap, float64(st.DiskCapBytes), id)
	gauge(descEdgeRecords, st.RecordsPerMin, id)
	gauge(descEdgeDead, st.DeadPerMin, id)
	gauge(descEdgeLate, st.LatePerMin, id)
	seen := map[string]bool{}
	for _, p := range st.Pipelines {
		if p.GetName() == "" || seen[p.Name] || p.WatermarkMs == 0 {
			continue // no watermark yet: no lag to tell
		}
		seen[p.Name] = true
		gauge(descEdgeWMLag, float64(p.WatermarkLagMs)/1e3, id, p.Name)
	}
}
