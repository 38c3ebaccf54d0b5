package server

import (
	"testing"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/internal/health"
)

type statusCore struct {
	Core // nil: only Status is called
	st   hub.Status
}

func (c statusCore) Status() hub.Status { return c.st }

// TestReportShuttingDown: once Shutdown has begun, the commit check fails.
func TestReportShuttingDown(t *testing.T) {
	s := &Server{core: statusCore{}, quit: make(chan struct{})}
	if r := s.report(); r.Status != health.OK {
		t.Fatalf("report %+v", r)
	}
	close(s.quit)
	r := s.report()
	if r.Status != health.Failing || r.Checks[0].Name != "commit" || r.Checks[0].Reason != "shutting down" {
		t.Fatalf("report while shutting down %+v", r)
	}
}
