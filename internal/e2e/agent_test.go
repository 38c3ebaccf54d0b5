package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/internal/testbroker"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
)

// controlOnly is a FleetCore that serves only the control stream: the
// test sets the desired set and reads the statuses. The other methods are
// the nil interface's (never called here).
type controlOnly struct {
	server.FleetCore
	mu       sync.Mutex
	reg      *runnelv1.Register
	statuses []*runnelv1.EdgeStatus
	out      chan *runnelv1.DesiredSet
}

func (c *controlOnly) Connect(ctx context.Context, edgeID string, reg *runnelv1.Register, notify func()) (<-chan *runnelv1.DesiredSet, error) {
	c.mu.Lock()
	c.reg = reg
	out := c.out
	c.mu.Unlock()
	ch := make(chan *runnelv1.DesiredSet, 1)
	go func() {
		defer notify()
		defer close(ch)
		for {
			select {
			case d := <-out:
				select {
				case ch <- d:
					notify()
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func (c *controlOnly) Status(edgeID string, st *runnelv1.EdgeStatus) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.statuses = append(c.statuses, st)
	return nil
}

// waitStatus waits for a status that ok accepts.
func (c *controlOnly) waitStatus(t *testing.T, what string, ok func(*runnelv1.EdgeStatus) bool) *runnelv1.EdgeStatus {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		for _, st := range c.statuses {
			if ok(st) {
				c.mu.Unlock()
				return st
			}
		}
		c.mu.Unlock()
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no status %s", what)
	return nil
}

func desiredOf(gen uint64, rev uint32, spec string) *runnelv1.DesiredSet {
	sum := sha256.Sum256([]byte(spec))
	return &runnelv1.DesiredSet{Generation: gen, Pipelines: []*runnelv1.DesiredPipeline{{Name: "restore", Revision: rev,
		Spec: spec, Hash: hex.EncodeToString(sum[:]), CompatClass: 1}}}
}

// TestAgentOverControlStream: an edge with no pipelines of its own
// registers over the hub server's control stream with its labels, applies
// the desired set it receives and reports it running; a set that does not
// compile is reported failed with the problem while the edge runs on.
func TestAgentOverControlStream(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	core, err := hub.Open(hub.Config{Dir: filepath.Join(dir, "hub"), CommitInterval: 10 * time.Millisecond, NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	fc := &controlOnly{out: make(chan *runnelv1.DesiredSet, 4)}
	const token = "agent-token-0123456789"
	srv, err := server.New(core, server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Fleet: fc,
		EdgeTokens: map[string]string{"gw": token}, Insecure: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	mosq := testbroker.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- edge.Run(ctx, edge.NodeConfig{EdgeID: "gw", DataDir: filepath.Join(dir, "edge"),
			Broker: mqtt.Config{Brokers: []string{mosq.Addr()}}, CheckpointInterval: 50 * time.Millisecond, NoSync: true,
			Uplink: &uplink.Config{Hub: srv.GRPCAddr().String(), Token: token, Insecure: true,
				BackoffMin: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond},
			Fleet:  &edge.FleetConfig{Labels: map[string]string{"site": "plant-7"}, Version: "test", StatusInterval: 50 * time.Millisecond},
			Logger: quiet})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	fc.waitStatus(t, "at registration", func(*runnelv1.EdgeStatus) bool { return true })
	fc.mu.Lock()
	if fc.reg.GetEdgeId() != "gw" || fc.reg.GetLabels()["site"] != "plant-7" || fc.reg.GetVersion() != "test" || fc.reg.GetOs() == "" {
		t.Errorf("registration %v", fc.reg)
	}
	fc.mu.Unlock()

	fc.out <- desiredOf(1, 1, restoreSpec)
	fc.waitStatus(t, "running revision 1", func(st *runnelv1.EdgeStatus) bool {
		ps := st.GetPipelines()
		return st.GetAppliedGeneration() == 1 && len(ps) == 1 && ps[0].GetRevision() == 1 && ps[0].GetState() == "running"
	})
	fc.out <- desiredOf(2, 2, strings.Replace(restoreSpec, "tumbling: 1s", "tumbling: nope", 1))
	st := fc.waitStatus(t, "refusing generation 2", func(st *runnelv1.EdgeStatus) bool { return st.GetAppliedGeneration() == 2 })
	ps := st.GetPipelines()
	if !strings.Contains(st.GetApplyError(), "restore@2:7:20: window.tumbling") || len(ps) != 1 ||
		ps[0].GetRevision() != 1 || ps[0].GetState() != "failed" || !strings.Contains(ps[0].GetError(), "window.tumbling") {
		t.Errorf("status of a refused set (revision 1 runs on): %v", st)
	}
}
