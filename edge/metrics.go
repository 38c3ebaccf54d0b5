package edge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/health"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/window"
)

// status is what the node reports on /metrics and /healthz. Counters are
// read from their owners at scrape time.
type status struct {
	checkpoints        atomic.Uint64
	checkpointsSkipped atomic.Uint64 // ticks with nothing to commit (an idle edge writes nothing)
	checkpointNanos    atomic.Int64  // duration of the last checkpoint commit
	checkpointBytes    atomic.Int64  // bytes of state changes in the last checkpoint
	checkpointErr      atomic.Value  // string: the last commit error, "" when fine
	pumpAlive          atomic.Bool
	capBlocked         atomic.Bool // the disk cap holds MQTT messages back
	capWaits           atomic.Uint64
	lagBlocked         atomic.Bool // the ingest lag bound holds MQTT messages back
	lagWaits           atomic.Uint64
	capDropped         atomic.Uint64 // messages dropped at the cap (drop_raw)
	published          atomic.Uint64 // results published to mqtt outputs
	publishErrs        atomic.Uint64
	capDropWarned      atomic.Int64  // when the last drop warning was logged (Unix ns)
	outboxBytes        atomic.Int64  // bytes committed to the outbox
	oversized          atomic.Uint64 // messages over the ingest log's record limit (acknowledged, dead-lettered)
	emptyTopic         atomic.Uint64 // messages with an empty topic (acknowledged, dropped)
	clockImplausible   atomic.Bool   // the system clock is before plausibleClock
	sidePublishDropped atomic.Uint64 // side output lines not published to their mqtt output
	src                atomic.Pointer[mqtt.Source]
	uplink             atomic.Pointer[uplink.Uplink]
	// What checkpoints stored, in bytes of values (before bbolt's pages):
	// operator state changes (op records), the bases compaction rewrote,
	// outbox entries, side output lines.
	stateWritten, baseWritten, outboxWritten, sideWritten atomic.Int64
}

func (n *node) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	labels := prometheus.Labels{"edge": n.cfg.EdgeID}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	counter := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	reg.MustRegister(pipeCollector{n})
	reg.MustRegister(health.Collector("runnel_edge_health", "The node's health checks: 0 ok, 1 degraded, 2 failing (check=\"node\": the worst).",
		labels, func() health.Report { return n.health(time.Now()) }))
	if l := n.raw; l != nil {
		counter("runnel_edge_raw_archived_segments_total", "Sealed ingest-log segments uploaded to the raw archive.", func() float64 { return float64(l.segments.Load()) })
		counter("runnel_edge_raw_archived_bytes_total", "Compressed bytes uploaded to the raw archive.", func() float64 { return float64(l.bytes.Load()) })
		counter("runnel_edge_raw_archive_failures_total", "Raw archive uploads that failed (retried).", func() float64 { return float64(l.failures.Load()) })
		counter("runnel_edge_raw_skipped_segments_total", "Segments deleted unarchived: the raw lane yielded to the disk cap or raw_archive.max_bytes.", func() float64 { return float64(l.skipped.Load()) })
		counter("runnel_edge_raw_skipped_bytes_total", "Bytes of the segments deleted unarchived.", func() float64 { return float64(l.skippedBytes.Load()) })
		gauge("runnel_edge_raw_yielding", "1 while the raw lane waits for the outbox to drain (aggregates first).", func() float64 {
			if l.yielding.Load() {
				return 1
			}
			return 0
		})
		gauge("runnel_edge_raw_pending_bytes", "Bytes of sealed segments not archived yet.", func() float64 {
			pending, _ := n.rawPending(time.Now())
			return float64(pending)
		})
		gauge("runnel_edge_raw_oldest_pending_age_seconds", "Age of the oldest sealed segment not archived yet (0: none).", func() float64 {
			_, age := n.rawPending(time.Now())
			return age.Seconds()
		})
	}
	counter("runnel_edge_checkpoints_total", "Checkpoints committed.", func() float64 { return float64(n.status.checkpoints.Load()) })
	counter("runnel_edge_checkpoints_skipped_total", "Checkpoint intervals with nothing to commit (no record since the last, no ack to store): an idle edge writes nothing.", func() float64 {
		return float64(n.status.checkpointsSkipped.Load())
	})
	gauge("runnel_edge_checkpoint_duration_seconds", "Duration of the last checkpoint commit.", func() float64 {
		return time.Duration(n.status.checkpointNanos.Load()).Seconds()
	})
	gauge("runnel_edge_checkpoint_bytes", "Bytes of state changes in the last checkpoint.", func() float64 {
		return float64(n.status.checkpointBytes.Load())
	})
	// Disk wear (wear.go): what the ingest log and the state file's
	// commits wrote, and what checkpoints stored in the state file.
	counter("runnel_edge_ingest_log_written_bytes_total", "Bytes the ingest log wrote (frames and segment headers).", func() float64 { return float64(n.logWear.written.Load()) })
	counter("runnel_edge_ingest_log_disk_bytes_total", "Bytes of 4 KiB pages the ingest log's writes dirtied, counted at each fsync: a group commit rewrites the partly filled page it appends to.", func() float64 {
		return float64(n.logWear.pages.Load() * wearPage)
	})
	counter("runnel_edge_ingest_log_fsyncs_total", "fsyncs of ingest log segments and of its directory.", func() float64 { return float64(n.logWear.syncs.Load()) })
	counter("runnel_edge_state_written_bytes_total", "Bytes the state file's commits wrote: every page a commit changed, the freelist and a meta page each.", func() float64 {
		return float64(n.store.WriteStats().Bytes)
	})
	counter("runnel_edge_state_freelist_written_bytes_total", "Of runnel_edge_state_written_bytes_total, the freelist's pages, which every commit rewrites whole (estimated).", func() float64 {
		return float64(n.store.WriteStats().FreelistBytes)
	})
	for _, c := range []struct {
		part string
		v    *atomic.Int64
	}{{"state", &n.status.stateWritten}, {"compaction", &n.status.baseWritten}, {"outbox", &n.status.outboxWritten}, {"side", &n.status.sideWritten}} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runnel_edge_checkpoint_stored_bytes_total",
			Help:        "Bytes of values checkpoints stored in the state file, by part (state: operator state changes; compaction: the bases compaction rewrote; outbox: results for the uplink and outputs; side: late records and dead letters).",
			ConstLabels: prometheus.Labels{"edge": n.cfg.EdgeID, "part": c.part}}, func() float64 { return float64(c.v.Load()) }))
	}
	for _, from := range []string{"memory", "file"} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runnel_edge_ingest_log_frames_read_total",
			Help:        "Ingest log frames (group commits) the pump and replays read: from memory (the block just committed, which a pump keeping up takes without reading the file back) or from the segment files (recovery, a replay, a pump behind).",
			ConstLabels: prometheus.Labels{"edge": n.cfg.EdgeID, "from": from}}, func() float64 {
			mem, file := n.log.FramesRead()
			if from == "memory" {
				return float64(mem)
			}
			return float64(file)
		}))
	}
	gauge("runnel_edge_ingest_log_bytes", "Bytes of ingest log segments on disk, spare segment files included.", func() float64 { return float64(n.log.Size()) })
	gauge("runnel_edge_ingest_log_spare_bytes", "Bytes of the ingest log's spare segment files (ingest_log.spare_segments) and of a spare's earlier contents in the segment written over it: disk held for the next segments, given back first near the disk cap.", func() float64 {
		return float64(n.log.SpareBytes())
	})
	gauge("runnel_edge_state_bytes", "Bytes the state file holds as of the last commit: its pages less the free ones, which later commits reuse (outbox, side outputs, operator state and bbolt's own pages).", func() float64 { return float64(n.stateBytes()) })
	gauge("runnel_edge_disk_used_bytes", "What counts toward disk_cap.bytes: the ingest log's segments and what the state file holds.", func() float64 { return float64(n.diskUsed()) })
	gauge("runnel_edge_outbox_next_seq", "Sequence number of the next outbox entry.", func() float64 {
		return float64(n.lastSeq.Load())
	})
	gauge("runnel_edge_outbox_depth", "Committed outbox entries the hub has not acknowledged yet.", func() float64 {
		return float64(n.lastSeq.Load() - 1 - min(n.uplinkAck.Load(), n.lastSeq.Load()-1))
	})
	upStat := func(f func(uplink.Stats) float64) func() float64 {
		return func() float64 {
			if u := n.status.uplink.Load(); u != nil {
				return f(u.Stats())
			}
			return 0
		}
	}
	gauge("runnel_edge_uplink_connected", "1 while the uplink has a stream to the hub.", upStat(func(s uplink.Stats) float64 {
		if s.Connected {
			return 1
		}
		return 0
	}))
	gauge("runnel_edge_uplink_epoch", "The uplink's epoch.", upStat(func(s uplink.Stats) float64 { return float64(s.Epoch) }))
	gauge("runnel_edge_uplink_acked_seq", "Highest outbox sequence the hub made durable.", upStat(func(s uplink.Stats) float64 { return float64(s.AckedSeq) }))
	gauge("runnel_edge_uplink_sent_seq", "Highest outbox sequence sent.", upStat(func(s uplink.Stats) float64 { return float64(s.SentSeq) }))
	counter("runnel_edge_uplink_batches_total", "Batches sent to the hub.", upStat(func(s uplink.Stats) float64 { return float64(s.Batches) }))
	counter("runnel_edge_uplink_reconnects_total", "Uplink streams that failed and were retried.", upStat(func(s uplink.Stats) float64 { return float64(s.Reconnects) }))
	counter("runnel_edge_uplink_new_epochs_total", "Epochs started because the hub knew more of this edge.", upStat(func(s uplink.Stats) float64 { return float64(s.NewEpochs) }))
	gauge("runnel_edge_outbox_bytes", "Bytes of window results in the outbox.", func() float64 {
		return float64(n.status.outboxBytes.Load())
	})
	counter("runnel_edge_disk_cap_waits_total", "Times the disk cap held MQTT messages back.", func() float64 {
		return float64(n.status.capWaits.Load())
	})
	counter("runnel_edge_mqtt_published_total", "Results published to the pipelines' mqtt outputs.", func() float64 {
		return float64(n.status.published.Load())
	})
	counter("runnel_edge_mqtt_publish_errors_total", "Failed publications to mqtt outputs (each is retried).", func() float64 {
		return float64(n.status.publishErrs.Load())
	})
	for i, sd := range sides {
		sl := prometheus.Labels{"edge": n.cfg.EdgeID, "side": sd.name}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "runnel_edge_side_output_entries",
			Help: "Entries the side output holds in the state file.", ConstLabels: sl}, func() float64 { return float64(n.side.entries[i].Load()) }))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runnel_edge_side_output_added_total",
			Help: "Entries added to the side output.", ConstLabels: sl}, func() float64 { return float64(n.side.added[i].Load()) }))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "runnel_edge_side_output_dropped_total",
			Help: "Side output entries deleted, oldest first, to stay within side_outputs.max_bytes or max_age.", ConstLabels: sl},
			func() float64 { return float64(n.side.dropped[i].Load()) }))
	}
	counter("runnel_edge_side_output_yielded_total", "Side output entries deleted, oldest first, to leave the disk cap's room to the aggregates (also counted in runnel_edge_side_output_dropped_total).", func() float64 {
		return float64(n.side.yielded.Load())
	})
	gauge("runnel_edge_side_output_bytes", "Bytes the side outputs (dead letters, late records, quarantined entries) take in the state file; they count toward the disk cap.", func() float64 {
		return float64(n.side.bytes.Load())
	})
	counter("runnel_edge_side_output_publish_dropped_total", "Side output lines not published to their mqtt output (queue full or broker refusing); the state file keeps them.", func() float64 {
		return float64(n.status.sidePublishDropped.Load())
	})
	counter("runnel_edge_oversized_messages_total", "MQTT messages longer than the ingest log's record limit: acknowledged, and their start kept as a dead letter.", func() float64 {
		return float64(n.status.oversized.Load())
	})
	counter("runnel_edge_empty_topic_messages_total", "MQTT messages with an empty topic: acknowledged and dropped.", func() float64 {
		return float64(n.status.emptyTopic.Load())
	})
	counter("runnel_edge_disk_cap_dropped_total", "Messages acknowledged and dropped at the disk cap (disk_cap.policy drop_raw).", func() float64 {
		return float64(n.status.capDropped.Load())
	})
	gauge("runnel_edge_disk_cap_blocked", "1 while the disk cap holds MQTT messages at the broker.", func() float64 {
		if n.status.capBlocked.Load() {
			return 1
		}
		return 0
	})
	gauge("runnel_edge_ingest_lag_records", "Records in the ingest log not yet fed to the pipelines.", func() float64 {
		return float64(n.ingestLag())
	})
	gauge("runnel_edge_ingest_lag_blocked", "1 while the ingest lag bound (ingest_log.max_lag) holds MQTT messages at the broker.", func() float64 {
		if n.status.lagBlocked.Load() {
			return 1
		}
		return 0
	})
	counter("runnel_edge_ingest_lag_waits_total", "Times the ingest lag bound held MQTT messages back.", func() float64 {
		return float64(n.status.lagWaits.Load())
	})
	gauge("runnel_edge_mqtt_connected", "1 while the MQTT source is connected.", func() float64 {
		if s := n.status.src.Load(); s != nil && s.Connected() {
			return 1
		}
		return 0
	})
	gauge("runnel_edge_mqtt_held", "1 while the MQTT source does not connect because the disk cap holds messages (the broker keeps them).", func() float64 {
		if s := n.status.src.Load(); s != nil && s.Stats().Held {
			return 1
		}
		return 0
	})
	counter("runnel_edge_mqtt_connects_total", "Connections the MQTT source made to a broker.", func() float64 {
		if s := n.status.src.Load(); s != nil {
			return float64(s.Stats().Connects)
		}
		return 0
	})
	if n.cfg.Snapshots != nil {
		n.snapshotMetrics(gauge, counter)
	}
	return reg
}

// snapshotMetrics registers the snapshots' series.
func (n *node) snapshotMetrics(gauge, counter func(name, help string, f func() float64)) {
	st := &n.snap
	counter("runnel_edge_snapshots_total", "Snapshots uploaded complete (data object and manifest).", func() float64 { return float64(st.taken.Load()) })
	counter("runnel_edge_snapshot_failures_total", "Snapshots that failed (the state copy, or the upload).", func() float64 { return float64(st.failed.Load()) })
	gauge("runnel_edge_snapshot_age_seconds", "Age of the last complete snapshot (before the first: the time since the node started).", func() float64 {
		return n.snapshotAge(time.Now()).Seconds()
	})
	gauge("runnel_edge_snapshot_checkpoint", "Checkpoint id of the last complete snapshot.", func() float64 { return float64(st.lastID.Load()) })
	gauge("runnel_edge_snapshot_bytes", "Bytes of the last complete snapshot's data object (compressed).", func() float64 { return float64(st.lastDataBytes.Load()) })
	gauge("runnel_edge_snapshot_state_bytes", "Bytes of the state file in the last complete snapshot (uncompressed).", func() float64 { return float64(st.lastStateBytes.Load()) })
	counter("runnel_edge_snapshot_uploaded_bytes_total", "Bytes of complete snapshots' data objects uploaded.", func() float64 { return float64(st.uploadedBytes.Load()) })
	gauge("runnel_edge_snapshot_duration_seconds", "How long the last complete snapshot took (checkpoint on demand, copy, upload).", func() float64 {
		return time.Duration(st.lastNanos.Load()).Seconds()
	})
}

// serveHTTP serves /metrics, /healthz and POST /admin/snapshot on addr
// until ctx is done.
func (n *node) serveHTTP(ctx context.Context, addr string) (func(), error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(n.registry(), promhttp.HandlerOpts{}))
	// Profiles for the operator of a gateway; the server binds to loopback
	// by default.
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/healthz", health.Handler(func() health.Report { return n.health(time.Now()) }))
	mux.HandleFunc("/admin/snapshot", n.serveSnapshot)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("edge: http: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.lg.Error("edge: http", "err", err)
		}
	}()
	n.lg.Info("edge: serving /metrics and /healthz", "addr", ln.Addr().String())
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		<-done
	}, nil
}

// pipeCollector exports each running pipeline's counters at scrape time,
// so that pipelines the hub deploys later appear, and replaced ones go.
type pipeCollector struct{ n *node }

var pipeMetrics = []struct {
	name, help string
	counter    bool
	f          func(ps *pipe, now time.Time) (float64, bool)
}{
	{"runnel_edge_records_in_total", "Payloads read from the ingest log into the pipeline.", true, func(ps *pipe, _ time.Time) (float64, bool) { return float64(ps.rt.Stats().In), true }},
	{"runnel_edge_dead_letters_total", "Payloads that could not become records.", true, func(ps *pipe, _ time.Time) (float64, bool) { return float64(ps.rt.Stats().Dead), true }},
	{"runnel_edge_filtered_total", "Records the filter dropped.", true, func(ps *pipe, _ time.Time) (float64, bool) { return float64(ps.rt.Stats().Filtered), true }},
	{"runnel_edge_duplicates_total", "MQTT redeliveries dropped by event id.", true, func(ps *pipe, _ time.Time) (float64, bool) { return float64(ps.rt.Stats().Dupes), true }},
	{"runnel_edge_late_total", "Records too late for every window.", true, func(ps *pipe, _ time.Time) (float64, bool) { return float64(ps.rt.Stats().Late), true }},
	{"runnel_edge_results_total", "Window results emitted, all versions.", true, func(ps *pipe, _ time.Time) (float64, bool) { return float64(ps.rt.Stats().Results), true }},
	{"runnel_edge_window_resident_keys", "Window keys the pipeline holds in memory (state.max_resident_keys bounds the evictable ones).", false, func(ps *pipe, _ time.Time) (float64, bool) {
		return float64(ps.rt.Stats().Resident), true
	}},
	{"runnel_edge_window_evictions_total", "Window keys evicted from memory: clean, their windows all fired, their state in the state file (state.max_resident_keys).", true, func(ps *pipe, _ time.Time) (float64, bool) {
		return float64(ps.rt.Stats().Evicted), true
	}},
	{"runnel_edge_window_reloads_total", "Evicted window keys read back from the state file for a record.", true, func(ps *pipe, _ time.Time) (float64, bool) {
		return float64(ps.rt.Stats().Reloaded), true
	}},
	{"runnel_edge_window_key_lookups_total", "Reads of the state file for a record's key not in memory, found (a reload) or not (a new key).", true, func(ps *pipe, _ time.Time) (float64, bool) {
		return float64(ps.rt.Stats().Lookups), true
	}},
	{"runnel_edge_watermark_lag_seconds", "Wall clock minus the pipeline's watermark.", false, func(ps *pipe, now time.Time) (float64, bool) {
		wm := ps.rt.Watermark()
		if wm == window.MinTime {
			return 0, true
		}
		return now.Sub(time.UnixMilli(wm)).Seconds(), true
	}},
	{"runnel_edge_pipeline_revision", "The revision of the pipeline the hub deployed (0: a local file's).", false, func(ps *pipe, _ time.Time) (float64, bool) { return float64(ps.def.rev), true }},
}

func (c pipeCollector) desc(i int) *prometheus.Desc {
	m := pipeMetrics[i]
	return prometheus.NewDesc(m.name, m.help, []string{"pipeline"}, prometheus.Labels{"edge": c.n.cfg.EdgeID})
}

func (c pipeCollector) Describe(ch chan<- *prometheus.Desc) {
	for i := range pipeMetrics {
		ch <- c.desc(i)
	}
}

func (c pipeCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, ps := range *c.n.pipeView.Load() {
		for i, m := range pipeMetrics {
			v, ok := m.f(ps, now)
			if !ok {
				continue
			}
			kind := prometheus.GaugeValue
			if m.counter {
				kind = prometheus.CounterValue
			}
			ch <- prometheus.MustNewConstMetric(c.desc(i), kind, v, ps.p.Name)
		}
	}
}
