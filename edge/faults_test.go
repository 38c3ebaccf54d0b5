package edge_test

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
)

// The fault tests (broker restart, malformed payloads, damaged files) run
// nodes in-process and watch them through /metrics; these are their shared
// pieces.

// testNode is an in-process node started by startNode.
type testNode struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan error
	err    error // set when the node stopped before it was ready
	logs   *nodeLog
}

// startNode runs an edge node in-process and returns once it is connected
// and subscribed, or has failed (testNode.err). Its log, at debug level, is
// kept in testNode.logs and written to the test log on failure.
func startNode(t *testing.T, cfg edge.NodeConfig) *testNode {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	nd := &testNode{t: t, cancel: cancel, done: make(chan error, 1), logs: newNodeLog()}
	cfg.Logger = slog.New(nd.logs)
	started := make(chan struct{})
	cfg.Started = func(string) { close(started) }
	go func() { nd.done <- edge.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			t.Logf("node %s log:\n%s", cfg.EdgeID, nd.logs.text.String())
		}
	})
	select {
	case <-started:
	case err := <-nd.done:
		cancel()
		if err == nil {
			t.Fatal("node returned nil before it was ready")
		}
		nd.err = err
		nd.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("node neither ready nor failed after 10s")
	}
	return nd
}

// stop stops the node gracefully and returns Run's error.
func (nd *testNode) stop() error {
	nd.cancel()
	err := <-nd.done
	nd.done <- err
	return err
}

// alive fails the test if the node has stopped on its own.
func (nd *testNode) alive() {
	nd.t.Helper()
	select {
	case err := <-nd.done:
		nd.done <- err
		nd.t.Fatalf("node stopped by itself: %v", err)
	default:
	}
}

// freeAddr returns a free loopback address.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// fastBroker is the MQTT source configuration of the fault tests: the
// broker under test, and reconnects within tens of milliseconds.
func fastBroker(m *testbroker.Mosquitto) mqtt.Config {
	return mqtt.Config{Brokers: []string{m.Addr()}, ConnectRetryMin: 20 * time.Millisecond, ConnectRetryMax: 200 * time.Millisecond}
}

// waitCheckpoint waits until the node has committed a checkpoint that
// covers n messages fed to its pipelines since it started (replayed ones
// included; the log's clock records are not messages), failing the test
// after 10 s or if the node stops. It watches the node's "edge:
// checkpoint" log records rather than /metrics.
func (nd *testNode) waitCheckpoint(n uint64) {
	nd.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for nd.logs.ckptMsg.Load() < n {
		nd.alive()
		if time.Now().After(deadline) {
			nd.t.Fatalf("no checkpoint covers %d messages after 10s (the last covers %d, up to log position %d)", n, nd.logs.ckptMsg.Load(), nd.logs.ckptPos.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// nodeLog is a slog.Handler that keeps a node's log as text and notes what
// the fault tests wait for or check: the log position of the last
// checkpoint, and the attributes of "edge: opened" and of a cut torn tail.
type nodeLog struct {
	text    *testproc.Buffer
	h       slog.Handler
	ckptPos atomic.Uint64
	ckptMsg atomic.Uint64 // messages fed before the last checkpoint
	mu      sync.Mutex
	opened  map[string]string // attributes of "edge: opened"
	torn    map[string]string // attributes of "ingest log: cut a torn tail"
}

func newNodeLog() *nodeLog {
	b := &testproc.Buffer{}
	return &nodeLog{text: b, h: slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})}
}

func (l *nodeLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *nodeLog) WithAttrs(as []slog.Attr) slog.Handler    { return &attrLog{l, as} }
func (l *nodeLog) WithGroup(string) slog.Handler            { return l }

func (l *nodeLog) Handle(ctx context.Context, r slog.Record) error {
	attrs := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	switch r.Message {
	case "edge: checkpoint":
		if p, err := strconv.ParseUint(attrs["pos"], 10, 64); err == nil {
			l.ckptPos.Store(max(l.ckptPos.Load(), p)) // only the writer logs it
		}
		if m, err := strconv.ParseUint(attrs["messages"], 10, 64); err == nil {
			l.ckptMsg.Store(max(l.ckptMsg.Load(), m))
		}
	case "edge: opened":
		l.mu.Lock()
		l.opened = attrs
		l.mu.Unlock()
	case "ingest log: cut a torn tail":
		l.mu.Lock()
		l.torn = attrs
		l.mu.Unlock()
	}
	return l.h.Handle(ctx, r)
}

// attrLog is a nodeLog with attributes (the MQTT source's component).
type attrLog struct {
	*nodeLog
	as []slog.Attr
}

func (a *attrLog) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(a.as...)
	return a.nodeLog.Handle(ctx, r)
}

func (a *attrLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrLog{a.nodeLog, append(slices.Clip(a.as), as...)}
}

func (l *nodeLog) openedAttrs() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.opened
}

// tornAttrs returns the attributes of the node's "cut a torn tail" warning,
// nil when it cut nothing.
func (l *nodeLog) tornAttrs() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.torn
}
