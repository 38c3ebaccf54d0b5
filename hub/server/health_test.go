package server_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/internal/buildinfo"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

type healthBody struct {
	Status string `json:"status"`
	Checks []struct {
		Name, Status, Reason string
	} `json:"checks"`
}

func (h healthBody) check(name string) (status, reason string) {
	for _, c := range h.Checks {
		if c.Name == name {
			return c.Status, c.Reason
		}
	}
	return "", ""
}

// TestHealthz: /healthz, the runnel_hub_health gauge and the Health
// service report each check's state from the core's Status: 200 while ok
// or degraded, 503 only while failing.
func TestHealthz(t *testing.T) {
	p := testPipeline(t)
	core := newFakeCore(p)
	e := start(t, core, nil)
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	incident := func(reason string) []hub.Incident {
		return []hub.Incident{{Edge: "gw-1", Count: 3, Partials: 5, First: at, Last: at.Add(time.Minute), Reason: reason}}
	}
	for _, tc := range []struct {
		name   string
		status func(*hub.Status)
		check  string // the check that is not ok
		want   []string
		code   int
		node   string
	}{
		{"ok", nil, "", nil, 200, "ok"},
		{"refusals", func(st *hub.Status) { st.Refusals = incident("seq 17: key of 5000 bytes, at most 4096") }, "refusals",
			[]string{"edge gw-1: 3 batches refused (5 partials named) since 2025-03-01T12:00:00Z, the last at 2025-03-01T12:01:00Z: seq 17: key of 5000 bytes"}, 200, "degraded"},
		{"parked", func(st *hub.Status) {
			st.Parked = []hub.ParkedPipeline{{Pipeline: "other", Partials: 4, Bytes: 300, Edges: []string{"gw-1", "gw-2"}}, {Pipeline: "wm-only", Bytes: 30}}
		}, "parked", []string{`pipeline "other", which the hub does not know: 4 partials (300 bytes) parked from gw-1, gw-2`}, 200, "degraded"},
		{"watermark only", func(st *hub.Status) { st.Parked = []hub.ParkedPipeline{{Pipeline: "wm-only", Bytes: 30}} }, "", nil, 200, "ok"},
		{"clock", func(st *hub.Status) {
			st.Clamps = incident(`pipeline "temps": watermark 9223372036854775807 is more than 1h0m0s ahead`)
		}, "clock",
			[]string{"edge gw-1: 3 watermarks ahead of the hub's clock held at its bound", "9223372036854775807"}, 200, "degraded"},
		{"epochs", func(st *hub.Status) { st.EpochRefusals = incident("hello with epoch 99") }, "epochs",
			[]string{"edge gw-1: 3 epochs refused", "hello with epoch 99"}, 200, "degraded"},
		{"commit", func(st *hub.Status) { st.CommitErr = "hub: commit: disk full" }, "commit",
			[]string{"the last store commit failed (it is retried): hub: commit: disk full"}, 503, "failing"},
		{"closing", func(st *hub.Status) { st.Closed = true }, "commit", []string{"closing"}, 503, "failing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core.mu.Lock()
			core.status = tc.status
			core.mu.Unlock()
			code, body := e.get(t, "/healthz", "")
			var h healthBody
			if err := json.Unmarshal([]byte(body), &h); err != nil || code != tc.code || h.Status != tc.node || len(h.Checks) != 5 {
				t.Fatalf("healthz: %d %s (%v); want %d, %s and 5 checks", code, body, err, tc.code, tc.node)
			}
			for _, c := range h.Checks {
				if (c.Name == tc.check) != (c.Status != "ok") {
					t.Errorf("check %s: %s %q", c.Name, c.Status, c.Reason)
				}
			}
			if tc.check != "" {
				st, reason := h.check(tc.check)
				for _, w := range tc.want {
					if st != tc.node || !strings.Contains(reason, w) {
						t.Errorf("check %s: %s %q, want %s naming %q", tc.check, st, reason, tc.node, w)
					}
				}
			}
			_, metrics := e.get(t, "/metrics", "")
			gauge := map[string]string{"ok": "0", "degraded": "1", "failing": "2"}[tc.node]
			if !strings.Contains(metrics, `runnel_hub_health{check="node"} `+gauge) ||
				tc.check != "" && !strings.Contains(metrics, `runnel_hub_health{check="`+tc.check+`"} `+gauge) {
				t.Errorf("metrics:\n%s", grepLines(metrics, "runnel_hub_health"))
			}
			r, err := runnelv1.NewHealthClient(e.conn).Check(testCtx(t), &runnelv1.HealthCheckRequest{})
			want := tc.node
			if tc.check != "" {
				want += ": " + tc.check + ": "
			}
			if err != nil || !strings.HasPrefix(r.Status, want) {
				t.Errorf("Health.Check: %v %v, want a status starting %q", r, err, want)
			}
		})
	}
}

// TestHealthVersion: /healthz, /v1/health and Health.Check name the
// hub's version: Config.Version, or the binary's (internal/buildinfo)
// when it is not set.
func TestHealthVersion(t *testing.T) {
	p := testPipeline(t)
	for _, tc := range []struct{ set, want string }{{"v1.2.3-4-gabcdef0", "v1.2.3-4-gabcdef0"}, {"", buildinfo.Version()}} {
		e := start(t, newFakeCore(p), func(c *server.Config) { c.Version = tc.set })
		var hz, v1 struct{ Status, Version string }
		e.getJSON(t, "/healthz", "", 200, &hz)
		e.getJSON(t, "/v1/health", "", 200, &v1)
		r, err := runnelv1.NewHealthClient(e.conn).Check(testCtx(t), &runnelv1.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if hz.Version != tc.want || v1.Version != tc.want || r.GetVersion() != tc.want || tc.want == "" {
			t.Errorf("Config.Version %q: /healthz %+v, /v1/health %+v, Health.Check %q; want version %q", tc.set, hz, v1, r.GetVersion(), tc.want)
		}
	}
}

// TestHealthRealHub: the real core's refusals, parked partials and close
// reach /healthz.
func TestHealthRealHub(t *testing.T) {
	h := openHub(t)
	p := testPipeline(t)
	e := start(t, h, nil)
	up := runnelv1.NewUplinkClient(e.edge)
	ctx := withToken(testCtx(t), "token-1")
	send := func(b *runnelv1.Batch) error {
		s, err := up.Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(hello("gw-1", 1, 1))
		if _, err := s.Recv(); err != nil {
			t.Fatal(err)
		}
		s.Send(batch(b))
		for {
			m, err := s.Recv()
			if err != nil {
				return err
			}
			if a := m.GetAck(); a != nil && a.AckedSeq == b.LastSeq {
				s.CloseSend()
				recvErr(s)
				return nil
			}
		}
	}
	if err := send(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 1, Partials: []*runnelv1.Partial{
		{Seq: 1, Pipeline: "temps", Key: mustKey(t, p, "d1"), WindowEnd: 60000, Version: 1, State: []byte{0xee}}}}); err == nil {
		t.Fatal("a bad partial was not refused")
	}
	if err := send(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 1, Partials: []*runnelv1.Partial{
		{Seq: 1, Pipeline: "nope", Key: []byte("k"), WindowEnd: 60000, Version: 1, State: []byte{1}}}}); err != nil {
		t.Fatal(err)
	}
	code, body := e.get(t, "/healthz", "")
	var hb healthBody
	json.Unmarshal([]byte(body), &hb)
	if st, r := hb.check("refusals"); code != 200 || hb.Status != "degraded" || st != "degraded" || !strings.Contains(r, "edge gw-1: 1 batches refused") {
		t.Errorf("healthz: %d %s", code, body)
	}
	if st, r := hb.check("parked"); st != "degraded" || !strings.Contains(r, `pipeline "nope"`) || !strings.Contains(r, "from gw-1") {
		t.Errorf("healthz: %d %s", code, body)
	}
	h.Close()
	if code, body := e.get(t, "/healthz", ""); code != 503 || !strings.Contains(body, "closing") {
		t.Errorf("healthz after Close: %d %s", code, body)
	}
}
