package hub

import (
	"cmp"
	"slices"
	"time"
)

// Incidents: what the hub set aside or corrected for an edge (a refused
// batch, a clamped watermark, a refused epoch), kept per edge and kind for
// Status and for rate-limited logging. Everything here is guarded by
// Hub.mu and runs on the hub's clock (Config.Now).

// IncidentWindow is how long Status reports an edge's refused batches,
// clamped watermarks or refused epochs after the last one.
const IncidentWindow = 10 * time.Minute

// logEvery bounds the log lines of one kind of incident to one per edge
// per period; the next line says how many went unlogged.
const logEvery = time.Minute

// Incident is one edge's trouble of one kind, as Status reports it while
// the last one is within IncidentWindow of the hub's clock.
type Incident struct {
	Edge string
	// Count: batches refused, watermarks clamped or epochs refused since
	// First.
	Count uint64
	// Partials: for refused batches, the partials they refused (0 for a
	// batch refused as a whole).
	Partials uint64
	// First is the first incident of this run: none before it within
	// IncidentWindow.
	First, Last time.Time
	Reason      string // the last incident's
}

type incidents struct {
	byEdge map[string]*incidentLog
	pruned time.Time
}

type incidentLog struct {
	Incident
	logged     time.Time // when its last log line was written
	suppressed uint64    // incidents since that line
}

// note records an incident of edge at now. It reports whether the caller
// should log it and how many incidents went unlogged since the last line.
func (in *incidents) note(now time.Time, edge string, partials uint64, reason string) (logIt bool, suppressed uint64) {
	if in.byEdge == nil {
		in.byEdge = map[string]*incidentLog{}
	}
	if now.Sub(in.pruned) >= IncidentWindow {
		for id, l := range in.byEdge {
			if now.Sub(l.Last) > IncidentWindow {
				delete(in.byEdge, id)
			}
		}
		in.pruned = now
	}
	l := in.byEdge[edge]
	if l == nil || now.Sub(l.Last) > IncidentWindow {
		l = &incidentLog{Incident: Incident{Edge: edge, First: now}}
		in.byEdge[edge] = l
	}
	l.Count++
	l.Partials += partials
	l.Last = now
	l.Reason = reason
	if l.Count > 1 && now.Sub(l.logged) < logEvery {
		l.suppressed++
		return false, 0
	}
	suppressed = l.suppressed
	l.logged, l.suppressed = now, 0
	return true, suppressed
}

// recent returns the edges' incidents whose last one is within
// IncidentWindow of now, by edge id.
func (in *incidents) recent(now time.Time) []Incident {
	var out []Incident
	for _, l := range in.byEdge {
		if now.Sub(l.Last) <= IncidentWindow {
			out = append(out, l.Incident)
		}
	}
	slices.SortFunc(out, func(a, b Incident) int { return cmp.Compare(a.Edge, b.Edge) })
	return out
}
