package edge_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
)

// TestStartFailureReturns: a node that fails part-way through its start
// (here its HTTP address is taken) returns the error rather than hang in
// its own undoing: the checkpoint writer it had started waited for a
// parts channel nobody closed, so Run never returned and a gateway's
// service manager saw a live process that did nothing.
func TestStartFailureReturns(t *testing.T) {
	mosq := testbroker.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := compileSpec(t, countSpec)
	cfg := edge.NodeConfig{EdgeID: "hang", DataDir: t.TempDir(), Pipelines: []*operators.Pipeline{p},
		Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, HTTPAddr: ln.Addr().String(), NoSync: true}
	done := make(chan error, 1)
	go func() { done <- edge.Run(context.Background(), cfg) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			t.Fatalf("Run returned %v, want the listen error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run hangs when its HTTP address is taken")
	}
}
