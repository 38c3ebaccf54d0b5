package server_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// openHub opens the real core in a temporary directory; it is closed
// after the server (cleanups run last-registered first).
func openHub(t *testing.T) *hub.Hub {
	t.Helper()
	h, err := hub.Open(hub.Config{Dir: t.TempDir(), Pipelines: []*operators.Pipeline{testPipeline(t)}, CommitInterval: 2 * time.Millisecond, NoSync: true})
	if errors.Is(err, hub.ErrClosed) {
		t.Skip("the hub core is a stub")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// TestRealHub runs the uplink, auth, REST and SSE against the real core:
// refused streams leave it untouched; a batch becomes durable, acked and
// queryable; a result emitted after subscribing reaches the SSE client.
func TestRealHub(t *testing.T) {
	h := openHub(t)
	p := testPipeline(t)
	e := start(t, h, nil)
	ctx := testCtx(t)
	up := runnelv1.NewUplinkClient(e.edge)

	// Refused: another edge's id. Nothing reaches the core.
	s, err := up.Sync(withToken(ctx, "token-1"))
	if err != nil {
		t.Fatal(err)
	}
	s.Send(hello("gw-1", 1, 1))
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	s.Send(batch(&runnelv1.Batch{EdgeId: "gw-2", Epoch: 1, FirstSeq: 1, LastSeq: 1, Partials: []*runnelv1.Partial{
		{Seq: 1, Pipeline: "temps", Key: mustKey(t, p, "d1"), WindowEnd: 60000, Version: 1, State: state(p, 99)}},
		Watermarks: []*runnelv1.Watermark{{Pipeline: "temps", WatermarkMs: 120000}}}))
	wantCode(t, recvErr(s), codes.PermissionDenied, "batch of another edge")
	if rs, _, err := h.Query(hub.Query{Pipeline: "temps"}); err != nil || len(rs) != 0 {
		t.Fatalf("after a refused batch: %v %v", rs, err)
	}
	for _, ed := range h.Edges() {
		if ed.ID != "gw-1" || ed.AckedSeq != 0 {
			t.Fatalf("after a refused batch: %+v", ed)
		}
	}

	// SSE subscriber first.
	req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/pipelines/temps/results/events?key[device]=d1", nil)
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || lines.Text() != ": subscribed" {
		t.Fatalf("events: %d %q", resp.StatusCode, lines.Text())
	}

	// gw-1 sends two partials and a watermark past their window.
	s, err = up.Sync(withToken(ctx, "token-1"))
	if err != nil {
		t.Fatal(err)
	}
	s.Send(hello("gw-1", 1, 1))
	if m, err := s.Recv(); err != nil || m.GetResume() == nil {
		t.Fatalf("resume: %v %v", m, err)
	}
	s.Send(batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 3, Partials: []*runnelv1.Partial{
		{Seq: 1, Pipeline: "temps", Key: mustKey(t, p, "d1"), WindowEnd: 60000, Version: 1, State: state(p, 20, 22)},
		{Seq: 2, Pipeline: "temps", Key: mustKey(t, p, "d2"), WindowEnd: 60000, Version: 1, State: state(p, 30)}},
		Watermarks: []*runnelv1.Watermark{{Pipeline: "temps", WatermarkMs: 60000}}}))
	for {
		m, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if a := m.GetAck(); a != nil && a.AckedSeq == 3 {
			break
		}
	}
	// A duplicate is acked and changes nothing; a gap is OutOfRange.
	s.Send(batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 3, Partials: []*runnelv1.Partial{
		{Seq: 1, Pipeline: "temps", Key: mustKey(t, p, "d1"), WindowEnd: 60000, Version: 1, State: state(p, 20, 22)}}}))
	s.Send(batch(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 7, LastSeq: 7}))
	wantCode(t, recvErr(s), codes.OutOfRange, "gap")

	var got restResult
	for lines.Scan() {
		if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
			if err := json.Unmarshal([]byte(data), &got); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	if got.Key["device"] != "d1" || got.Values["n"] != 2.0 || got.Values["avg_temp"] != 21.0 || got.WindowEnd != "60000" {
		t.Errorf("SSE: %+v", got)
	}

	var rs restResults
	e.getJSON(t, "/v1/pipelines/temps/results?key[device]=d2&all_versions=true", "", 200, &rs)
	if len(rs.Results) != 1 || rs.Results[0].Values["avg_temp"] != 30.0 || rs.Results[0].Edges != 1 {
		t.Errorf("d2: %+v", rs)
	}
	var edges struct {
		Edges []struct {
			EdgeID   string `json:"edge_id"`
			AckedSeq string `json:"acked_seq"`
			Live     bool   `json:"live"`
		} `json:"edges"`
	}
	e.getJSON(t, "/v1/edges", "", 200, &edges)
	if len(edges.Edges) != 1 || edges.Edges[0].EdgeID != "gw-1" || edges.Edges[0].AckedSeq != "3" || !edges.Edges[0].Live {
		t.Errorf("edges: %+v", edges)
	}
	code, body := e.get(t, "/metrics", "")
	for _, want := range []string{"runnel_hub_batches_total 1", "runnel_hub_batches_duplicate_total 1", "runnel_hub_partials_total 2", `runnel_hub_watermark_seconds{class="0",pipeline="temps"} 60`} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics: missing %q in\n%s", want, grepLines(body, "runnel_hub_"))
		}
	}
	if code, body := e.get(t, "/healthz", ""); code != 200 {
		t.Errorf("healthz: %d %s", code, body)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestMetricsPerClass: a pipeline of the hub's files and two classes of
// managed revisions under the same name are three series each, told apart
// by class, and the scrape succeeds (a duplicate series would fail it).
func TestMetricsPerClass(t *testing.T) {
	p := testPipeline(t)
	incompatible, err := operators.CompileYAML("temps@3", []byte(strings.Replace(testSpec, "tumbling: 1m", "tumbling: 2m", 1)))
	if err != nil {
		t.Fatal(err)
	}
	h, err := hub.Open(hub.Config{Dir: t.TempDir(), Pipelines: []*operators.Pipeline{p}, NoSync: true,
		Revisions: []hub.Revision{{Name: "temps", Revision: 1, Class: 1, Pipeline: p}, {Name: "temps", Revision: 3, Class: 3, Pipeline: incompatible}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	e := start(t, h, nil)
	code, body := e.get(t, "/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	for _, class := range []string{"0", "1", "3"} {
		if want := `runnel_hub_pipeline_results{class="` + class + `",pipeline="temps"} 0`; !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
