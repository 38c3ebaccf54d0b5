package server

import (
	"log/slog"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/runnel-io/runnel/internal/health"
)

// metrics are the hub's Prometheus metrics. The core's counters are read
// from Status and Pipelines at scrape time; the server's own are kept
// here.
type metrics struct {
	reg     *prometheus.Registry
	streams prometheus.Gauge   // uplink streams open
	sse     prometheus.Gauge   // SSE clients
	refused prometheus.Counter // batches or hellos under another edge's id
	control prometheus.Gauge   // control streams open

	authRefused  *prometheus.CounterVec // edge-service calls the interceptor refused, by reason
	handshakes   prometheus.Counter     // failed TLS handshakes of the gRPC listener
	tokenReloads *prometheus.CounterVec // reloads of the edge tokens, by result
}

// newMetrics registers the server's metrics, the core's (read from
// core.Status at scrape time), the fleet's when there is one (read from
// its edges and deployments at scrape time, per edge as edges says) and
// the health report's gauge.
func newMetrics(core Core, fleet FleetCore, edges EdgeMetrics, report func() health.Report, log *slog.Logger) *metrics {
	m := &metrics{
		reg:     prometheus.NewRegistry(),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "runnel_hub_uplink_streams", Help: "Uplink Sync streams open."}),
		sse:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "runnel_hub_sse_clients", Help: "Server-Sent Events subscribers connected."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "runnel_hub_uplink_permission_denied_total", Help: "Hellos, batches and Registers refused because they named another edge than their stream's (its token or client certificate)."}),
		control: prometheus.NewGauge(prometheus.GaugeOpts{Name: "runnel_hub_fleet_control_streams", Help: "Control streams open (edges connected to the control plane through this server)."}),
		authRefused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runnel_hub_edge_auth_refused_total",
			Help: "Uplink and control streams refused before their first message, by reason: no_credentials, token (unknown, or an API token), certificate_required (tls.client_auth: require), certificate_not_an_edge (a verified certificate whose CN is no edge id), certificate_token_mismatch (a certificate and a token of two edges)."}, []string{"reason"}),
		handshakes: prometheus.NewCounter(prometheus.CounterOpts{Name: "runnel_hub_tls_handshake_failures_total",
			Help: "TLS handshakes of the gRPC listener that failed: a client certificate not signed by tls.client_ca_file, expired or not for client authentication (logged as warnings), or a client that did not speak TLS or hung up."}),
		tokenReloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "runnel_hub_edge_tokens_reloads_total",
			Help: "Reloads of auth.edge_tokens_file (SIGHUP), by result: ok, or failed (the file unreadable or refused; the tokens before it stay)."}, []string{"result"}),
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.streams, m.sse, m.refused, m.authRefused, m.handshakes, m.tokenReloads, coreCollector{core},
		health.Collector("runnel_hub_health", "The hub's health per check (commit, refusals, parked, clock, epochs; node: the worst): 0 ok, 1 degraded, 2 failing.", nil, report))
	if fleet != nil {
		m.reg.MustRegister(m.control, fleetCollector{fleet: fleet, mode: edges, log: log})
	}
	return m
}

// coreCollector exports the core's Status and per-pipeline watermarks.
type coreCollector struct{ core Core }

var (
	descBatches     = prometheus.NewDesc("runnel_hub_batches_total", "Uplink batches applied.", nil, nil)
	descBatchesDup  = prometheus.NewDesc("runnel_hub_batches_duplicate_total", "Uplink batches dropped as already applied.", nil, nil)
	descPartials    = prometheus.NewDesc("runnel_hub_partials_total", "Edge partials merged.", nil, nil)
	descPartialsDup = prometheus.NewDesc("runnel_hub_partials_duplicate_total", "Edge partials dropped: already applied, or older than the edge's stored version.", nil, nil)
	descResults     = prometheus.NewDesc("runnel_hub_results_total", "Result versions emitted.", nil, nil)
	descCommits     = prometheus.NewDesc("runnel_hub_commits_total", "Store commits.", nil, nil)
	descCommitSecs  = prometheus.NewDesc("runnel_hub_commit_duration_seconds", "Duration of the last store commit.", nil, nil)
	descCommitOK    = prometheus.NewDesc("runnel_hub_commit_healthy", "1 while commits succeed, 0 after a failed one.", nil, nil)
	descEdgesLive   = prometheus.NewDesc("runnel_hub_edges_live", "Edges heard from within the edge timeout.", nil, nil)
	descEdgesKnown  = prometheus.NewDesc("runnel_hub_edges_known", "Edges the hub has state for.", nil, nil)
	descOpenWindows = prometheus.NewDesc("runnel_hub_open_windows", "Windows held in memory (not emitted yet, or within merge.resident of the hub watermark).", nil, nil)
	descEvicted     = prometheus.NewDesc("runnel_hub_windows_evicted_total", "Emitted windows dropped from memory (they stay in the store).", nil, nil)
	descReloaded    = prometheus.NewDesc("runnel_hub_windows_reloaded_total", "Windows read back from the store for a late partial.", nil, nil)
	descExpired     = prometheus.NewDesc("runnel_hub_partials_expired_total", "Partials dropped because their window is past retention.", nil, nil)
	descBRefused    = prometheus.NewDesc("runnel_hub_batches_refused_total", "Uplink batches refused (InvalidArgument), nothing of them applied: malformed, or with partials the hub will never accept.", nil, nil)
	descPRefused    = prometheus.NewDesc("runnel_hub_partials_refused_total", "Partials refused by name (the edge sets them aside and resends the batch without them).", nil, nil)
	descEpochs      = prometheus.NewDesc("runnel_hub_epochs_refused_total", "Hellos and batches refused for an epoch the hub will not adopt (too far past the held one, or beyond any an edge reaches).", nil, nil)
	descClamped     = prometheus.NewDesc("runnel_hub_watermarks_clamped_total", "Edge watermarks more than merge.max_future ahead of the hub's clock, held at that bound.", nil, nil)
	descParked      = prometheus.NewDesc("runnel_hub_partials_parked_total", "Partials of pipelines or revisions the hub does not know, parked until it does.", nil, nil)
	descUnparked    = prometheus.NewDesc("runnel_hub_partials_unparked_total", "Parked partials applied once the hub knew their pipeline: configured at open, or a managed revision created.", nil, nil)
	descArchRefused = prometheus.NewDesc("runnel_hub_archive_refused_total", "Uplink batches refused (Unavailable) because archive.max_pending results waited for the archive; the edges resend them.", nil, nil)
	descParkedExp   = prometheus.NewDesc("runnel_hub_parked_expired_total", "Parked partials deleted after merge.retention.", nil, nil)
	descPParked     = prometheus.NewDesc("runnel_hub_parked_partials", "Partials parked now, per pipeline the hub does not know.", []string{"pipeline"}, nil)
	descPParkedB    = prometheus.NewDesc("runnel_hub_parked_bytes", "Bytes parked now (partials and watermarks), per pipeline the hub does not know.", []string{"pipeline"}, nil)
	descWatermark   = prometheus.NewDesc("runnel_hub_watermark_seconds", "Hub watermark (min over live edges), Unix seconds, per pipeline and compatibility class (class 0: the hub's own pipeline files); absent before any edge reported one.", []string{"pipeline", "class"}, nil)
	descPResults    = prometheus.NewDesc("runnel_hub_pipeline_results", "Result versions stored, per pipeline and compatibility class (class 0: the hub's own pipeline files).", []string{"pipeline", "class"}, nil)
)

func (c coreCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descBatches, descBatchesDup, descPartials, descPartialsDup, descResults, descCommits,
		descCommitSecs, descCommitOK, descEdgesLive, descEdgesKnown, descOpenWindows, descEvicted, descReloaded, descExpired,
		descBRefused, descPRefused, descEpochs, descClamped, descParked, descUnparked, descParkedExp, descArchRefused, descPParked, descPParkedB, descWatermark, descPResults} {
		ch <- d
	}
}

func (c coreCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.core.Status()
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(descBatches, st.Batches)
	counter(descBatchesDup, st.BatchesDup)
	counter(descPartials, st.Partials)
	counter(descPartialsDup, st.PartialsDup)
	counter(descResults, st.Results)
	counter(descCommits, st.Commits)
	gauge(descCommitSecs, float64(st.CommitNanos)/1e9)
	ok := 1.0
	if st.CommitErr != "" {
		ok = 0
	}
	gauge(descCommitOK, ok)
	gauge(descEdgesLive, float64(st.EdgesLive))
	gauge(descEdgesKnown, float64(st.EdgesKnown))
	gauge(descOpenWindows, float64(st.OpenWindows))
	counter(descEvicted, st.WindowsEvicted)
	counter(descReloaded, st.WindowsReloaded)
	counter(descExpired, st.PartialsExpired)
	counter(descBRefused, st.BatchesRefused)
	counter(descPRefused, st.PartialsRefused)
	counter(descClamped, st.WatermarksClamped)
	counter(descEpochs, st.EpochsRefused)
	counter(descParked, st.PartialsParked)
	counter(descUnparked, st.PartialsUnparked)
	counter(descParkedExp, st.ParkedExpired)
	counter(descArchRefused, st.ArchiveRefused)
	for _, p := range st.Parked {
		gauge(descPParked, float64(p.Partials), p.Pipeline)
		gauge(descPParkedB, float64(p.Bytes), p.Pipeline)
	}
	for _, p := range c.core.Pipelines() {
		class := strconv.FormatUint(uint64(p.Class), 10)
		if p.HasWatermark {
			gauge(descWatermark, float64(p.Watermark)/1e3, p.Pipeline.Name, class)
		}
		gauge(descPResults, float64(p.Results), p.Pipeline.Name, class)
	}
}
