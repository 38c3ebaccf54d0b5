package demo_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/runnel-io/runnel/internal/demo"
	"github.com/runnel-io/runnel/internal/testproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestDemo runs the demo briefly, with the last edge offline for a few
// seconds: merged results come out, and the edge's return corrects
// windows the hub had already emitted without it.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 16 s")
	}
	var out testproc.Buffer
	err := demo.Run(context.Background(), demo.Options{Edges: 3, Duration: 16 * time.Second,
		OfflineAt: 3 * time.Second, OfflineFor: 5 * time.Second, GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		Out: &out, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	back := strings.Index(text, "edge-3 is back")
	if back < 0 {
		t.Fatalf("edge-3 never came back:\n%s", text)
	}
	if !strings.Contains(text[:back], " v1 ") {
		t.Errorf("no first versions before edge-3 came back:\n%s", text)
	}
	if !strings.Contains(text[back:], "edges=3   <- late correction") {
		t.Errorf("no correction with all three edges after edge-3 came back:\n%s", text)
	}
	t.Logf("demo output:\n%s", text)
}
