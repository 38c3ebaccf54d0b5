package fleet_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/runnel-io/runnel/hub/fleet"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func TestConnectAndLabels(t *testing.T) {
	h := newHarness(t, nil)
	e := newSimEdge("e1", map[string]string{"site": "plant-7", "hw": "rpi4"})
	e.connect(t, h.Fleet)
	registered := h.clock.Now().UnixMilli()
	// The current set at once, even when empty.
	select {
	case ds := <-e.ch:
		if ds.Generation != 0 || len(ds.Pipelines) != 0 {
			t.Fatalf("first set: %v", ds)
		}
	default:
		t.Fatal("no desired set at Connect")
	}
	got, err := h.GetEdge("e1")
	if err != nil || !got.Connected || got.RegisteredMs != registered || got.LastSeenMs != registered || got.Version != "v1.0.0" || got.Os != "linux" || got.Arch != "arm64" || got.Labels["site"] != "plant-7" {
		t.Fatalf("GetEdge: %v, %v", got, err)
	}
	// Hub labels override the edge's; removing one lets the edge's show.
	fe, err := h.LabelEdge("ops", &runnelv1.LabelEdgeRequest{EdgeId: "e1", Set: map[string]string{"site": "plant-8", "ring": "1"}})
	if err != nil || fe.Labels["site"] != "plant-8" || fe.EdgeLabels["site"] != "plant-7" || fe.HubLabels["ring"] != "1" {
		t.Fatalf("LabelEdge: %v, %v", fe, err)
	}
	for sel, want := range map[string]int{"site=plant-8": 1, "site=plant-7": 0, "ring in (1,2),hw=rpi4": 1, "!ring": 0, "": 1} {
		es, err := h.ListEdges(sel)
		if err != nil || len(es) != want {
			t.Errorf("ListEdges(%q) = %d edges, %v; want %d", sel, len(es), err, want)
		}
	}
	// A reconnect updates the edge's own labels; the hub's still win.
	h.clock.Advance(time.Minute)
	e.labels = map[string]string{"site": "plant-9", "hw": "cm4"}
	e.connect(t, h.Fleet)
	got, _ = h.GetEdge("e1")
	if got.RegisteredMs != registered || got.LastSeenMs != h.clock.Now().UnixMilli() || got.Labels["site"] != "plant-8" || got.Labels["hw"] != "cm4" {
		t.Fatalf("after reconnect: %v", got)
	}
	fe, err = h.LabelEdge("ops", &runnelv1.LabelEdgeRequest{EdgeId: "e1", Remove: []string{"site", "absent"}})
	if err != nil || fe.Labels["site"] != "plant-9" || len(fe.HubLabels) != 1 {
		t.Fatalf("remove: %v, %v", fe, err)
	}
	audit := h.Audit(0, 0)
	if len(audit) != 2 || audit[0].Action != "edge.label" || audit[0].Object != "edge/e1" || audit[0].Before != "" || audit[0].After != "ring=1,site=plant-8" || audit[1].Before != "ring=1,site=plant-8" || audit[1].After != "ring=1" || audit[1].Who != "ops" {
		t.Errorf("audit: %v", audit)
	}
	// Labels survive a restart; the edge is not connected until it is.
	e.disconnect()
	h.reopen()
	got, _ = h.GetEdge("e1")
	if got.Connected || got.Labels["site"] != "plant-9" || got.HubLabels["ring"] != "1" || got.RegisteredMs != registered {
		t.Fatalf("after reopen: %v", got)
	}
}

// streamCtx is a context with an AfterFunc of its own and no Done, as
// the hub's wire streams are: end runs what was registered.
type streamCtx struct {
	context.Context
	mu sync.Mutex
	fs []func()
}

func (c *streamCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fs = append(c.fs, f)
	return func() bool { return false }
}

func (c *streamCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.fs {
		go f()
	}
}

// TestConnectStreamContext: a stream whose context has its own AfterFunc
// is ended through it (context.AfterFunc would wait on a Done this one
// never closes).
func TestConnectStreamContext(t *testing.T) {
	h := newHarness(t, nil)
	ctx := &streamCtx{Context: context.Background()}
	ch, err := h.Connect(ctx, "e1", &runnelv1.Register{EdgeId: "e1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	ctx.end()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("a second set")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream is open after its context's AfterFunc ran")
	}
	if got, err := h.GetEdge("e1"); err != nil || got.Connected {
		t.Fatalf("GetEdge: %v, %v", got, err)
	}
}

func TestConnectStreams(t *testing.T) {
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	reg := &runnelv1.Register{EdgeId: "e1"}
	ch1, err := h.Connect(ctx, "e1", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-ch1
	// A second stream of the edge closes the first.
	ch2, err := h.Connect(context.Background(), "e1", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch1; ok {
		t.Fatal("the replaced stream's channel is still open")
	}
	<-ch2
	cancel() // the old context ending does not touch the new stream
	if err := h.Status("e1", &runnelv1.EdgeStatus{}); err != nil {
		t.Fatalf("Status on the new stream: %v", err)
	}
	// Its context ending closes a stream.
	ctx3, cancel3 := context.WithCancel(context.Background())
	ch3, err := h.Connect(ctx3, "e1", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch2; ok {
		t.Fatal("stream 2 still open")
	}
	<-ch3
	cancel3()
	if _, ok := <-ch3; ok {
		t.Fatal("stream 3 still open after its context ended")
	}
	err = h.Status("e1", &runnelv1.EdgeStatus{})
	if !errors.Is(err, fleet.ErrConflict) || !strings.Contains(err.Error(), "e1") {
		t.Errorf("Status without a stream: %v", err)
	}
	if err := h.Status("nope", &runnelv1.EdgeStatus{}); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("Status of an unknown edge: %v", err)
	}
	// Close ends the open streams.
	ch4, err := h.Connect(context.Background(), "e1", reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-ch4
	h.Close()
	if _, ok := <-ch4; ok {
		t.Fatal("stream open after Close")
	}
	if _, err := h.Connect(context.Background(), "e1", reg, nil); !errors.Is(err, fleet.ErrClosed) {
		t.Errorf("Connect after Close: %v", err)
	}
	h.Fleet = nil
}

// TestLatestWins: an edge that does not read gets the newest set, not a
// backlog.
func TestLatestWins(t *testing.T) {
	h := newHarness(t, nil)
	h.applyPipeline(tempsV1)
	e := newSimEdge("e1", map[string]string{"a": "1"})
	e.connect(t, h.Fleet)
	for _, spec := range []string{tempsV2, tempsV3, tempsV1} {
		h.applyPipeline(spec)
		h.applyDeployment(&runnelv1.DeploymentSpec{Name: "d", Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}}})
	}
	ds := <-e.ch
	if ds.Generation != 3 || len(ds.Pipelines) != 1 || ds.Pipelines[0].Revision != 4 || ds.Pipelines[0].Spec != tempsV1 || ds.Pipelines[0].CompatClass != 4 || ds.Deployments[0] != "d@3" {
		t.Fatalf("set: %v", ds)
	}
	select {
	case ds := <-e.ch:
		t.Fatalf("a second set waiting: %v", ds)
	default:
	}
}

func TestStatusDurability(t *testing.T) {
	h := newHarness(t, nil)
	e := newSimEdge("e1", nil)
	e.connect(t, h.Fleet)
	st := &runnelv1.EdgeStatus{AppliedGeneration: 0, RecordsPerMin: 10, Pipelines: []*runnelv1.PipelineStatus{{Name: "x", State: "running"}}}
	if err := h.Status("e1", st); err != nil {
		t.Fatal(err)
	}
	// Only metrics change: kept in memory, not yet written.
	h.clock.Advance(10 * time.Second)
	if err := h.Status("e1", &runnelv1.EdgeStatus{RecordsPerMin: 20, Pipelines: st.Pipelines}); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.GetEdge("e1"); got.Status.RecordsPerMin != 20 {
		t.Fatalf("in memory: %v", got.Status)
	}
	h.crash()
	got, _ := h.GetEdge("e1")
	if got.Status.RecordsPerMin != 10 || got.Status.Pipelines[0].Name != "x" {
		t.Fatalf("after a crash: %v, want the status written at once (records 10)", got.Status)
	}
	// A change of what a gate reads is written before Status returns.
	e.connect(t, h.Fleet)
	if err := h.Status("e1", &runnelv1.EdgeStatus{AppliedGeneration: 0, ApplyError: "boom", RecordsPerMin: 30}); err != nil {
		t.Fatal(err)
	}
	h.crash()
	if got, _ := h.GetEdge("e1"); got.Status.ApplyError != "boom" {
		t.Fatalf("after a crash: %v, want the apply error", got.Status)
	}
	// Metrics alone: written by FlushStatus once StatusWriteEvery passed.
	e.connect(t, h.Fleet)
	if err := h.Status("e1", &runnelv1.EdgeStatus{ApplyError: "boom", RecordsPerMin: 40}); err != nil {
		t.Fatal(err)
	}
	if err := h.FlushStatus(); err != nil {
		t.Fatal(err)
	}
	h.crash()
	if got, _ := h.GetEdge("e1"); got.Status.RecordsPerMin == 40 {
		t.Fatalf("written before StatusWriteEvery passed")
	}
	e.connect(t, h.Fleet) // writes the status it registers with
	if err := h.Status("e1", &runnelv1.EdgeStatus{ApplyError: "boom", RecordsPerMin: 50}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	if err := h.FlushStatus(); err != nil {
		t.Fatal(err)
	}
	h.crash()
	if got, _ := h.GetEdge("e1"); got.Status.RecordsPerMin != 50 {
		t.Fatalf("after flush and crash: %v, want records 50", got.Status)
	}
	// Close writes what is left.
	e.connect(t, h.Fleet)
	if err := h.Status("e1", &runnelv1.EdgeStatus{ApplyError: "boom", RecordsPerMin: 60}); err != nil {
		t.Fatal(err)
	}
	e.disconnect()
	h.reopen()
	if got, _ := h.GetEdge("e1"); got.Status.RecordsPerMin != 60 || got.LastSeenMs != h.clock.Now().UnixMilli() {
		t.Fatalf("after Close: %v", got)
	}
}

func TestEdgeRefusals(t *testing.T) {
	h := newHarness(t, nil)
	e := newSimEdge("e1", map[string]string{"site": "a"})
	e.connect(t, h.Fleet)
	before := snapshot(t, h.Fleet)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"bad edge label", connectErr(h, "e2", map[string]string{"bad key": "x"}), `label key "bad key"`},
		{"bad edge label value", connectErr(h, "e2", map[string]string{"k": "-x"}), `label k: label value "-x"`},
		{"no id", connectErr(h, "", nil), "empty edge id"},
		{"long id", connectErr(h, strings.Repeat("x", 256), nil), "at most 255"},
		{"label key", labelErr(h, &runnelv1.LabelEdgeRequest{EdgeId: "e1", Set: map[string]string{"a/b/c": "x"}}), `more than one "/"`},
		{"label value", labelErr(h, &runnelv1.LabelEdgeRequest{EdgeId: "e1", Set: map[string]string{"ok": "x", "k": strings.Repeat("v", 64)}}), "at most 63"},
		{"remove key", labelErr(h, &runnelv1.LabelEdgeRequest{EdgeId: "e1", Remove: []string{"-x"}}), "remove: label key"},
		{"set and remove", labelErr(h, &runnelv1.LabelEdgeRequest{EdgeId: "e1", Set: map[string]string{"k": "v"}, Remove: []string{"k"}}), "both set and removed"},
		{"selector", listErr(h, "site in (a"), "column 11: expected \")\""},
	} {
		if !errors.Is(c.err, fleet.ErrInvalid) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", c.name, c.err, c.want)
		}
	}
	if _, err := h.LabelEdge("ops", &runnelv1.LabelEdgeRequest{EdgeId: "nope", Set: map[string]string{"k": "v"}}); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("label of an unknown edge: %v", err)
	}
	if _, err := h.Connect(context.Background(), "e2", &runnelv1.Register{EdgeId: "e3"}, nil); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("Register naming another edge: %v", err)
	}
	if after := snapshot(t, h.Fleet); after != before {
		t.Errorf("refusals changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func connectErr(h *harness, id string, labels map[string]string) error {
	_, err := h.Connect(context.Background(), id, &runnelv1.Register{EdgeId: id, Labels: labels}, nil)
	return err
}

func labelErr(h *harness, req *runnelv1.LabelEdgeRequest) error {
	_, err := h.LabelEdge("ops", req)
	return err
}

func listErr(h *harness, sel string) error {
	_, err := h.ListEdges(sel)
	return err
}
