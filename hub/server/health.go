package server

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/internal/health"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// The hub's health: /healthz (health.Handler), the runnel_hub_health
// gauge and the Health service all serve report, so they always agree.
// Its checks, each ok, degraded or failing with a reason:
//
//   - commit: failing while the last store commit failed (its error), and
//     while the server shuts down or the core closes.
//   - refusals: degraded while an edge had a batch refused within
//     hub.IncidentWindow: which edges, how many, the last reason.
//   - parked: degraded while partials of pipelines the hub does not know
//     are parked: which pipelines, how many, from which edges.
//   - clock: degraded while an edge's watermark was held at the hub's
//     clock + max_future within hub.IncidentWindow.
//   - epochs: degraded while an edge's epoch was refused within
//     hub.IncidentWindow.
//
// The windows are the core's, on its clock (hub.Status). Both answers
// carry the hub's version (Config.Version: the binary's, internal/buildinfo).

// maxListed bounds the edges or pipelines one reason names.
const maxListed = 5

// report is the hub's health now.
func (s *Server) report() health.Report {
	st := s.core.Status()
	shutting := false
	select {
	case <-s.quit:
		shutting = true
	default:
	}
	r := health.NewReport([]health.Check{
		commitCheck(st, shutting),
		incidentCheck("refusals", st.Refusals, func(in hub.Incident) string {
			if in.Partials > 0 {
				return fmt.Sprintf("%d batches refused (%d partials named)", in.Count, in.Partials)
			}
			return fmt.Sprintf("%d batches refused", in.Count)
		}),
		parkedCheck(st.Parked),
		incidentCheck("clock", st.Clamps, func(in hub.Incident) string {
			return fmt.Sprintf("%d watermarks ahead of the hub's clock held at its bound", in.Count)
		}),
		incidentCheck("epochs", st.EpochRefusals, func(in hub.Incident) string {
			return fmt.Sprintf("%d epochs refused", in.Count)
		}),
	})
	r.Version = s.cfg.Version // what Health.Check says too
	return r
}

func commitCheck(st hub.Status, shutting bool) health.Check {
	c := health.Check{Name: "commit"}
	switch {
	case shutting:
		c.Status, c.Reason = health.Failing, "shutting down"
	case st.Closed:
		c.Status, c.Reason = health.Failing, "the hub core is closing"
	case st.CommitErr != "":
		c.Status, c.Reason = health.Failing, "the last store commit failed (it is retried): "+st.CommitErr
	}
	return c
}

// incidentCheck is degraded while any edge has incidents, naming them:
// "gw-1: 3 batches refused (5 partials named), the last at <time>: <reason>".
func incidentCheck(name string, ins []hub.Incident, what func(hub.Incident) string) health.Check {
	c := health.Check{Name: name}
	if len(ins) == 0 {
		return c
	}
	var b strings.Builder
	for i, in := range ins {
		if i == maxListed {
			fmt.Fprintf(&b, "; and %d more edges", len(ins)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "edge %s: %s since %s, the last at %s: %s", in.Edge, what(in),
			in.First.UTC().Format(time.RFC3339), in.Last.UTC().Format(time.RFC3339), in.Reason)
	}
	c.Status, c.Reason = health.Degraded, b.String()
	return c
}

// parkedCheck is degraded while partials are parked.
func parkedCheck(ps []hub.ParkedPipeline) health.Check {
	c := health.Check{Name: "parked"}
	var b strings.Builder
	n := 0
	for _, p := range ps {
		if p.Partials == 0 {
			continue // a watermark only
		}
		if n == maxListed {
			b.WriteString("; and more pipelines")
			break
		}
		if n > 0 {
			b.WriteString("; ")
		}
		n++
		edges := p.Edges
		more := ""
		if len(edges) > maxListed {
			edges, more = edges[:maxListed], fmt.Sprintf(" and %d more", len(p.Edges)-maxListed)
		}
		what := fmt.Sprintf("pipeline %q, which the hub does not know", p.Pipeline)
		if len(p.Revisions) > 0 && !(len(p.Revisions) == 1 && p.Revisions[0] == 0) {
			what = fmt.Sprintf("pipeline %q revisions %v, which the hub does not know (created through the fleet API, they apply at once)", p.Pipeline, p.Revisions)
		}
		fmt.Fprintf(&b, "%s: %d partials (%d bytes) parked from %s%s",
			what, p.Partials, p.Bytes, strings.Join(edges, ", "), more)
	}
	if n > 0 {
		c.Status, c.Reason = health.Degraded, b.String()
	}
	return c
}

// healthService serves the Health service: status "ok", or the report's
// state and reasons ("degraded: ...", "failing: ..."); only failing means
// the hub does not do its job, as /healthz answers 503 only then.
type healthService struct {
	runnelv1.UnimplementedHealthServer
	s *Server
}

func (h *healthService) Check(ctx context.Context, _ *runnelv1.HealthCheckRequest) (*runnelv1.HealthCheckResponse, error) {
	r := h.s.report()
	msg := r.Status.String()
	if r.Status != health.OK {
		msg += ": " + strings.Join(r.Reasons(), "; ")
	}
	st := h.s.core.Status()
	return &runnelv1.HealthCheckResponse{Status: msg, Version: h.s.cfg.Version, EdgesLive: uint32(st.EdgesLive), EdgesKnown: uint32(st.EdgesKnown)}, nil
}
