package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/sync/uplink"
)

const restoreSpec = `name: restore
source: {mqtt: {topic: "gw/+/r", qos: 1, topic_fields: {dev: 1}}}
event_time: {field: ts, unit: ms}
event_id: [dev, seq]
key: [dev]
watermark: {max_out_of_order: 1s}
window: {tumbling: 1s}
allowed_lateness: 1h
aggregates: {n: count(), sum: sum(v)}
`

// TestRestoredEdgeDoesNotDoubleCount: an edge whose data directory is
// replaced by an older copy (restored from a backup) finds that the hub
// has acked more of it than it committed, starts a new epoch and resends
// its outbox; the hub replaces that edge's partials instead of adding
// them, so nothing is counted twice, and what the old history sent after
// the copy stays.
func TestRestoredEdgeDoesNotDoubleCount(t *testing.T) {
	dir := t.TempDir()
	p, err := operators.CompileYAML("restore.yaml", []byte(restoreSpec))
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	core, err := hub.Open(hub.Config{Dir: filepath.Join(dir, "hub"), Pipelines: []*operators.Pipeline{p},
		CommitInterval: 10 * time.Millisecond, NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	const token = "restore-token-0123456789"
	srv, err := server.New(core, server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		EdgeTokens: map[string]string{"gw": token}, Insecure: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())

	mosq := testbroker.Start(t)
	data := filepath.Join(dir, "edge")
	runEdge := func() (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		ready, done := make(chan struct{}), make(chan error, 1)
		go func() {
			done <- edge.Run(ctx, edge.NodeConfig{EdgeID: "gw", DataDir: data, Pipelines: []*operators.Pipeline{p},
				Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 50 * time.Millisecond, NoSync: true,
				Uplink: &uplink.Config{Hub: srv.GRPCAddr().String(), Token: token, Insecure: true,
					BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond},
				Logger: quiet, Started: func(string) { close(ready) }})
		}()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("edge: %v", err)
		}
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("edge: %v", err)
			}
		}
	}

	base := int64(1_767_225_600_000)
	want := map[string][2]int64{} // dev/window -> count, sum
	pub := testbroker.NewPublisher(t, mosq.HostPort())
	defer pub.Close()
	seq := 0
	// phase publishes 10 s of readings from second `from` on, and a
	// reading of device "tick" that moves the watermark past them.
	phase := func(from int64) {
		for i := range 100 {
			seq++
			dev := fmt.Sprintf("d%d", i%3)
			ts := base + from*1000 + int64(i)*100
			v := int64(i*7%50 + 1)
			pub.MustPublish("gw/"+dev+"/r", fmt.Appendf(nil, `{"seq":%d,"ts":%d,"v":%d}`, seq, ts, v), 1)
			k := fmt.Sprintf("%s/%d", dev, ts/1000*1000)
			c := want[k]
			want[k] = [2]int64{c[0] + 1, c[1] + v}
		}
		seq++
		pub.MustPublish("gw/tick/r", fmt.Appendf(nil, `{"seq":%d,"ts":%d,"v":0}`, seq, base+(from+12)*1000), 1)
	}
	// settled waits until the hub's latest results equal want.
	settled := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := hubResults(t, core, p)
			bad := ""
			for k, w := range want {
				if got[k] != w {
					bad = fmt.Sprintf("window %s: hub has %v, want %v", k, got[k], w)
					break
				}
			}
			if bad == "" && len(got) == len(want) {
				return
			}
			if bad == "" {
				bad = fmt.Sprintf("hub has %d windows, want %d", len(got), len(want))
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s", what, bad)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	stop := runEdge()
	phase(0)
	settled("first history")
	stop()
	backup := filepath.Join(dir, "backup")
	if out, err := exec.Command("cp", "-a", data, backup).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v: %s", err, out)
	}

	stop = runEdge()
	phase(20)
	settled("second history")
	stop()

	// The gateway's disk is replaced by the backup taken after the first
	// part: its outbox and sequence numbers are behind the hub's ack.
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(backup, data); err != nil {
		t.Fatal(err)
	}
	stop = runEdge()
	phase(40)
	settled("after the restore")
	stop()
	var epoch uint64
	for _, e := range core.Edges() {
		if e.ID == "gw" {
			epoch = e.Epoch
		}
	}
	if epoch != 2 {
		t.Errorf("hub holds epoch %d for the restored edge, want 2", epoch)
	}
}

// hubResults returns the latest version of every window of p the hub
// holds, as dev/window_start -> (count, sum), without the tick device.
func hubResults(t *testing.T, core *hub.Hub, p *operators.Pipeline) map[string][2]int64 {
	t.Helper()
	got := map[string][2]int64{}
	st := p.Aggregates.New()
	q := hub.Query{Pipeline: p.Name, Limit: 10000}
	for {
		rs, next, err := core.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			key, err := p.AppendKeyJSON(nil, r.Key)
			if err != nil {
				t.Fatal(err)
			}
			if string(key) == `{"dev":"tick"}` {
				continue
			}
			if err := p.Aggregates.Decode(st, r.State); err != nil {
				t.Fatal(err)
			}
			var dev struct{ Dev string }
			fmt.Sscanf(string(key), `{"dev":"%2s"}`, &dev.Dev)
			got[fmt.Sprintf("%s/%d", dev.Dev, r.Start)] = [2]int64{p.Aggregates.Result(st, 0).Int, int64(p.Aggregates.Result(st, 1).Float)}
		}
		if next == nil {
			return got
		}
		q.After = next
	}
}
