package edge

import (
	"fmt"
	"sync"
	"time"

	"github.com/runnel-io/runnel/internal/health"
)

// Health. Each check is ok, degraded (the node works, but something needs
// a look: data is being set aside, dropped or held at the broker, a peer
// is away) or failing (the node does not do its job: it cannot ingest,
// commit or send). The README and docs/edge-config.md list them; /healthz
// serves the report (internal/health) and runnel_edge_health exports it.

// Health thresholds.
const (
	stallAfter      = 30 * time.Second // durable records not processed for this long: ingestion stalled
	uplinkAwayAfter = time.Minute      // the uplink disconnected this long: degraded
	uplinkStall     = 2 * time.Minute  // entries unacked and no ack for this long: degraded
	recentWindow    = time.Hour        // quarantines and side output drops this recent: degraded
	epochWindow     = 10 * time.Minute // a new epoch this recent: degraded
	epochFight      = 3                // this many new epochs within epochWindow: failing
)

// pumpSeen is where a health check last saw the pump's position, and
// since when it has stood there: the pump does not read the clock per
// record for the sake of health.
type pumpSeen struct {
	mu  sync.Mutex
	pos uint64
	at  time.Time
}

// note records pos seen at now and returns since when the pump has been
// at it.
func (p *pumpSeen) note(pos uint64, now time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pos != p.pos {
		p.pos, p.at = pos, now
	}
	return p.at
}

// recentCount counts the times within d before now.
func recentCount(ts []time.Time, now time.Time, d time.Duration) int {
	n := 0
	for _, t := range ts {
		if now.Sub(t) < d {
			n++
		}
	}
	return n
}

// health returns the node's report at now.
func (n *node) health(now time.Time) health.Report {
	var checks []health.Check
	add := func(name string, st health.Status, format string, args ...any) {
		c := health.Check{Name: name, Status: st}
		if st != health.OK {
			c.Reason = fmt.Sprintf(format, args...)
		}
		checks = append(checks, c)
	}

	// ingest: the pump reads what the MQTT handler made durable.
	read := n.pumpPos.Load()
	moved := n.pumpSeen.note(read, now)
	switch durable := uint64(n.log.Durable()); {
	case !n.status.pumpAlive.Load():
		add("ingest", health.Failing, "the ingest pump is not running")
	case durable > read && now.Sub(moved) > stallAfter:
		add("ingest", health.Failing, "ingestion stalled: %d records durable in the ingest log have not been processed since %s",
			durable-read, moved.UTC().Format(time.RFC3339))
	case n.status.lagBlocked.Load():
		add("ingest", health.Degraded, "the pipelines are %d records behind the ingest log (ingest_log.max_lag %d): messages are held at the broker",
			n.ingestLag(), n.cfg.MaxLag)
	default:
		add("ingest", health.OK, "")
	}

	if s := n.status.src.Load(); s != nil && s.Stats().Held {
		add("broker", health.Degraded, "not connected while the disk cap holds messages: the broker keeps them until there is room")
	} else if s == nil || !s.Connected() {
		add("broker", health.Failing, "the MQTT source is not connected to the broker")
	} else {
		add("broker", health.OK, "")
	}

	if e, _ := n.status.checkpointErr.Load().(string); e != "" {
		add("checkpoint", health.Failing, "the last checkpoint failed: %s", e)
	} else {
		add("checkpoint", health.OK, "")
	}

	used := fmt.Sprintf("ingest log %d + state file %d (outbox %d, side outputs %d) of %d bytes",
		n.log.Size(), n.stateBytes(), n.status.outboxBytes.Load(), n.side.bytes.Load(), n.cfg.DiskCap)
	atCap := n.cfg.DiskCap > 0 && n.diskUsed() >= n.cfg.DiskCap
	switch {
	case atCap && n.cfg.DropAtCap:
		add("disk", health.Degraded, "disk cap reached (%s): incoming messages are dropped (disk_cap.policy drop_raw), %d so far",
			used, n.status.capDropped.Load())
	case atCap || n.status.capBlocked.Load():
		add("disk", health.Degraded, "disk cap reached (%s): messages are held at the broker until checkpoints and the uplink free space", used)
	default:
		add("disk", health.OK, "")
	}

	maxBytes, _ := n.sideLimits()
	if at := n.side.full.Load(); at > 0 && now.Sub(time.UnixMilli(at)) < recentWindow {
		var dropped uint64
		for i := range sides {
			dropped += n.side.dropped[i].Load()
		}
		add("side_outputs", health.Degraded, "the side outputs reached side_outputs.max_bytes (%d bytes) at %s: the oldest entries are dropped (%d so far)",
			maxBytes, time.UnixMilli(at).UTC().Format(time.RFC3339), dropped)
	} else {
		add("side_outputs", health.OK, "")
	}

	if n.status.clockImplausible.Load() {
		add("clock", health.Degraded, "the system clock is before 2020 (not synchronised?): event times are not bounded and idle pipelines do not advance")
	} else {
		add("clock", health.OK, "")
	}

	if n.cfg.Uplink != nil {
		n.uplinkChecks(now, add)
	}
	if n.cfg.Fleet != nil {
		n.agentCheck(now, add)
	}
	if n.cfg.Snapshots != nil {
		n.snapshotCheck(now, add)
	}
	if l := n.raw; l != nil {
		switch e, _ := l.lastErr.Load().(string); {
		case e != "":
			add("raw_archive", health.Degraded, "raw archive uploads fail (retried every %s): %s", l.cfg.Interval, e)
		case l.skippedAt.Load() > 0 && now.Sub(time.UnixMilli(l.skippedAt.Load())) < recentWindow:
			add("raw_archive", health.Degraded, "segments were deleted unarchived to keep the disk for aggregates (%d segments, %d bytes so far; the last at %s)",
				l.skipped.Load(), l.skippedBytes.Load(), time.UnixMilli(l.skippedAt.Load()).UTC().Format(time.RFC3339))
		default:
			add("raw_archive", health.OK, "")
		}
	}
	return health.NewReport(checks)
}

func (n *node) uplinkChecks(now time.Time, add func(string, health.Status, string, ...any)) {
	u := n.status.uplink.Load()
	if u == nil {
		add("uplink", health.OK, "")
		add("quarantine", health.OK, "")
		return
	}
	st := u.Stats()
	unacked := n.lastSeq.Load() - 1 - min(n.uplinkAck.Load(), n.lastSeq.Load()-1)
	lastAck := time.UnixMilli(n.uplinkAckAt.Load())
	switch {
	case st.Refusal != "":
		add("uplink", health.Failing, "%s", st.Refusal)
	case recentCount(st.RecentNewEpochs, now, epochWindow) >= epochFight:
		add("uplink", health.Failing, "%d new epochs in the last %v (now %d): the hub keeps fencing this edge; another edge probably runs with id %q — stop it",
			recentCount(st.RecentNewEpochs, now, epochWindow), epochWindow, st.Epoch, n.cfg.EdgeID)
	case !st.Connected && !st.Since.IsZero() && now.Sub(st.Since) > uplinkAwayAfter:
		add("uplink", health.Degraded, "not connected to the hub since %s (%d entries waiting): %s",
			st.Since.UTC().Format(time.RFC3339), unacked, st.LastError)
	case unacked > 0 && now.Sub(lastAck) > uplinkStall && now.Sub(n.started) > uplinkStall:
		add("uplink", health.Degraded, "the hub has acknowledged nothing since %s (%d entries waiting)", lastAck.UTC().Format(time.RFC3339), unacked)
	case !st.LastNewEpochAt.IsZero() && now.Sub(st.LastNewEpochAt) < epochWindow:
		add("uplink", health.Degraded, "started epoch %d at %s because the hub had fenced or seen more of this edge; if the epoch keeps changing, another edge runs with id %q",
			st.Epoch, st.LastNewEpochAt.UTC().Format(time.RFC3339), n.cfg.EdgeID)
	default:
		add("uplink", health.OK, "")
	}
	q := sideIndex(sideQuarantine)
	if at := st.LastQuarantineAt; !at.IsZero() && now.Sub(at) < recentWindow {
		add("quarantine", health.Degraded, "%d outbox entries quarantined since the start (%d held; runnel-edge outbox --side quarantine), the last at %s: %s",
			st.Quarantined, n.side.entries[q].Load(), at.UTC().Format(time.RFC3339), st.LastQuarantine)
	} else {
		add("quarantine", health.OK, "")
	}
}
