package edge_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/internal/buildinfo"
	"github.com/runnel-io/runnel/operators"
)

// TestHealthzVersion: the edge's /healthz names the binary's version
// (internal/buildinfo), beside its status and checks.
func TestHealthzVersion(t *testing.T) {
	httpAddr := freeAddr(t)
	nd := startNode(t, edge.NodeConfig{EdgeID: "version", DataDir: filepath.Join(t.TempDir(), "data"),
		Pipelines: []*operators.Pipeline{compileSpec(t, sumSpec)}, EmbeddedAddr: freeAddr(t),
		CheckpointInterval: 50 * time.Millisecond, NoSync: true, HTTPAddr: httpAddr})
	if nd.err != nil {
		t.Fatal(nd.err)
	}
	var h struct {
		Status, Version string
		Checks          []struct{ Name, Status string }
	}
	getJSON(t, "http://"+httpAddr+"/healthz", &h)
	if h.Version == "" || h.Version != buildinfo.Version() || h.Status == "" || len(h.Checks) == 0 {
		t.Errorf("healthz %+v; want version %q", h, buildinfo.Version())
	}
	if err := nd.stop(); err != nil {
		t.Fatal(err)
	}
}
