package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/internal/testproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemo runs the demo briefly: revision 1 is deployed and merged
// results come out; revision 2 rolls out with a canary while the last
// edge's uplink is down, and the rollout finishes when it is back; the
// edge's outbox, filled meanwhile from its embedded broker's in-process
// intake, corrects windows the hub had already emitted without it.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 24 s")
	}
	var out testproc.Buffer
	err := Run(context.Background(), Options{Edges: 3, Duration: 24 * time.Second, Deploy: time.Second,
		OfflineAt: 5 * time.Second, OfflineFor: 6 * time.Second, Rollout: 7 * time.Second, Soak: 2 * time.Second,
		GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Out: &out, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	back := strings.Index(text, "edge-3's uplink is back")
	if back < 0 {
		t.Fatalf("edge-3 never came back:\n%s", text)
	}
	if !strings.Contains(text[:back], " v1 ") {
		t.Errorf("no first versions before edge-3 came back:\n%s", text)
	}
	if !strings.Contains(text[back:], "<- late correction") {
		t.Errorf("no correction after edge-3 came back:\n%s", text)
	}
	for _, want := range []string{"edge-1 (hw=rpi4,site=plant-1) runs line-temps@2 running", "edge-3 (hw=rpi4,site=plant-1) runs line-temps@2 running",
		"v2 succeeded", "revisions=[1 2]"} {
		if !strings.Contains(text, want) {
			t.Errorf("the output does not show %q:\n%s", want, text)
		}
	}
	t.Logf("demo output:\n%s", text)
}
