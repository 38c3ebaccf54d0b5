package edge_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
)

// TestGracefulRestartLosesNothing stops and restarts the node (gracefully,
// in-process, SIGTERM's path) while a publisher sends 2000 QoS 1 readings,
// and counts them: the final checkpoint, the replay of what it does not
// cover, and redelivery dedup together count each reading once.
func TestGracefulRestartLosesNothing(t *testing.T) {
	mosq := testbroker.Start(t)
	data := t.TempDir()
	p := compileSpec(t, countSpec)
	cfg := edge.NodeConfig{EdgeID: "rs", DataDir: data, Pipelines: []*operators.Pipeline{p}, Broker: mqtt.Config{Brokers: []string{mosq.Addr()}},
		CheckpointInterval: 50 * time.Millisecond, NoSync: true}
	stop := runNode(t, cfg)
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	const n = 2000
	for i := range n {
		if err := pub.PublishAsync(context.Background(), "s/a", fmt.Appendf(nil, `{"dev":"a","seq":%d,"ts":%d}`, i, 1000+i/10), 1); err != nil {
			t.Logf("publish %d: %v", i, err)
		}
		if i == n/2 {
			stop()
			stop = runNode(t, cfg)
		}
	}
	pub.MustPublish("s/a", []byte(`{"dev":"z","seq":-1,"ts":999999}`), 1)
	time.Sleep(2 * time.Second)
	stop()
	total := latestCount(t, p, data, `{"dev":"a"}`)
	if total != n {
		t.Fatalf("counted %d, want %d", total, n)
	}
}
