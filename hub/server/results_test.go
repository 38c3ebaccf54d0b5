package server_test

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/window/aggregate"
)

// tempsRevisions: revisions 1 and 2 of temps merge (class 1; 2 reads
// another topic), 3 has other aggregates (class 3).
func tempsRevisions(t *testing.T) []hub.Revision {
	spec3 := strings.Replace(testSpec, "  avg_temp: avg(temp)\n", "  hi: max(temp)\n", 1)
	compile := func(spec string) *operators.Pipeline {
		p, err := operators.CompileYAML("temps.yaml", []byte(spec))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	return []hub.Revision{
		{Name: "temps", Revision: 1, Class: 1, Pipeline: compile(testSpec)},
		{Name: "temps", Revision: 2, Class: 1, Pipeline: compile(strings.Replace(testSpec, "plant/+/temp", "plant/+/t2", 1))},
		{Name: "temps", Revision: 3, Class: 3, Pipeline: compile(spec3)},
	}
}

func revState(set *aggregate.Set, temps ...float64) []byte {
	st := set.New()
	for i, x := range temps {
		set.Add(st, &aggregate.Input{Time: int64(i), Nums: []float64{x}})
	}
	return set.AppendEncode(nil, st)
}

// TestResultsRevisions: the Results API over a real core with managed
// revisions. ListPipelines lists each class with its revisions; a query
// reads the class its revision picks (0: the latest's) and renders it
// with that class's aggregates, its results naming the revisions merged;
// an unknown revision is NotFound; a page token keeps its class across a
// Define of another class; a subscription ends when another class becomes
// the latest, and a new one follows it.
func TestResultsRevisions(t *testing.T) {
	revs := tempsRevisions(t)
	h, err := hub.Open(hub.Config{Dir: t.TempDir(), Revisions: revs[:2], CommitInterval: time.Hour, NoSync: true,
		Logger: slog.New(slog.DiscardHandler)})
	if errors.Is(err, hub.ErrClosed) {
		t.Skip("the hub core is a stub")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	e := start(t, h, nil)
	ctx := testCtx(t)
	api := runnelv1.NewResultsClient(e.conn)
	set1, set3 := revs[0].Pipeline.Aggregates, revs[2].Pipeline.Aggregates
	key := func(d string) []byte { return mustKey(t, revs[0].Pipeline, d) }
	apply := func(b *runnelv1.Batch) {
		t.Helper()
		if err := h.Apply(b); err != nil {
			t.Fatal(err)
		}
		if err := h.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := api.Subscribe(ctx, &runnelv1.SubscribeRequest{Pipeline: "temps"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Header(); err != nil {
		t.Fatal(err)
	}
	apply(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 2, Partials: []*runnelv1.Partial{
		{Seq: 1, Pipeline: "temps", Revision: 1, Key: key("d1"), WindowEnd: 60000, Version: 1, State: revState(set1, 10)},
		{Seq: 2, Pipeline: "temps", Revision: 2, Key: key("d2"), WindowEnd: 60000, Version: 1, State: revState(set1, 20)},
	}})
	apply(&runnelv1.Batch{EdgeId: "gw-2", Epoch: 1, FirstSeq: 1, LastSeq: 1, Partials: []*runnelv1.Partial{
		{Seq: 1, Pipeline: "temps", Revision: 2, Key: key("d1"), WindowEnd: 60000, Version: 1, State: revState(set1, 30)},
	}, Watermarks: []*runnelv1.Watermark{{Pipeline: "temps", Revision: 2, WatermarkMs: 60000}}})
	apply(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 3, LastSeq: 2, Watermarks: []*runnelv1.Watermark{{Pipeline: "temps", Revision: 2, WatermarkMs: 60000}}})
	r, err := sub.Recv()
	if err != nil || r.Values.Fields["avg_temp"] == nil || len(r.Revisions) == 0 {
		t.Fatalf("subscribed result %v, %v", r, err)
	}

	list, err := api.ListPipelines(ctx, &runnelv1.ListPipelinesRequest{})
	if err != nil || len(list.Pipelines) != 1 || list.Pipelines[0].CompatClass != 1 || !slices.Equal(list.Pipelines[0].Revisions, []uint32{1, 2}) {
		t.Fatalf("pipelines %v, %v", list, err)
	}
	q, err := api.QueryResults(ctx, &runnelv1.QueryResultsRequest{Pipeline: "temps", Key: map[string]string{"device": "d1"}})
	if err != nil || len(q.Results) != 1 || q.Results[0].Values.Fields["avg_temp"].GetNumberValue() != 20 ||
		!slices.Equal(q.Results[0].Revisions, []uint32{1, 2}) || q.Results[0].Edges != 2 {
		t.Fatalf("d1 of class 1: %v, %v", q, err)
	}
	page, err := api.QueryResults(ctx, &runnelv1.QueryResultsRequest{Pipeline: "temps", Limit: 1})
	if err != nil || len(page.Results) != 1 || page.NextPageToken == "" {
		t.Fatalf("first page %v, %v", page, err)
	}

	// Revision 3, of another class, becomes the latest.
	if err := h.Define(revs[2]); err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = sub.Recv() // class 1's second result, then the end
	}
	wantCode(t, err, codes.Unavailable, "the subscription of class 1 after Define of class 3")
	sub, err = api.Subscribe(ctx, &runnelv1.SubscribeRequest{Pipeline: "temps"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Header(); err != nil {
		t.Fatal(err)
	}
	apply(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 3, LastSeq: 3, Partials: []*runnelv1.Partial{
		{Seq: 3, Pipeline: "temps", Revision: 3, Key: key("d1"), WindowStart: 60000, WindowEnd: 120000, Version: 1, State: revState(set3, 5, 7)},
	}, Watermarks: []*runnelv1.Watermark{{Pipeline: "temps", Revision: 3, WatermarkMs: 120000}}})
	if r, err := sub.Recv(); err != nil || r.Values.Fields["hi"].GetNumberValue() != 7 || !slices.Equal(r.Revisions, []uint32{3}) {
		t.Fatalf("subscribed result of class 3: %v, %v", r, err)
	}

	list, err = api.ListPipelines(ctx, &runnelv1.ListPipelinesRequest{})
	if err != nil || len(list.Pipelines) != 2 || list.Pipelines[1].CompatClass != 3 || !slices.Equal(list.Pipelines[1].Revisions, []uint32{3}) ||
		!slices.Contains(list.Pipelines[1].Aggregates, "hi: max(temp)") || !slices.Contains(list.Pipelines[0].Aggregates, "avg_temp: avg(temp)") {
		t.Fatalf("pipelines %v, %v", list, err)
	}
	for rev, want := range map[uint32]string{0: "hi", 3: "hi", 1: "avg_temp", 2: "avg_temp"} {
		q, err := api.QueryResults(ctx, &runnelv1.QueryResultsRequest{Pipeline: "temps", Revision: rev})
		if err != nil || len(q.Results) == 0 || q.Results[0].Values.Fields[want] == nil {
			t.Fatalf("revision %d: %v, %v; want values with %s", rev, q, err, want)
		}
	}
	_, err = api.QueryResults(ctx, &runnelv1.QueryResultsRequest{Pipeline: "temps", Revision: 9})
	wantCode(t, err, codes.NotFound, "revision 9")

	// The page token of class 1 goes on in class 1.
	next, err := api.QueryResults(ctx, &runnelv1.QueryResultsRequest{Pipeline: "temps", Limit: 1, PageToken: page.NextPageToken})
	if err != nil || len(next.Results) != 1 || next.Results[0].Values.Fields["avg_temp"] == nil || next.Results[0].Key.Fields["device"].GetStringValue() != "d2" {
		t.Fatalf("second page %v, %v", next, err)
	}
	_, err = api.QueryResults(ctx, &runnelv1.QueryResultsRequest{Pipeline: "temps", Revision: 3, PageToken: page.NextPageToken})
	wantCode(t, err, codes.InvalidArgument, "a page token of class 1 with revision 3")
}

// hookCore is the real core, with a hook that runs once right after
// Pipelines: where a Define may land during a query.
type hookCore struct {
	*hub.Hub
	afterPipelines func()
}

func (c *hookCore) Pipelines() []hub.PipelineInfo {
	infos := c.Hub.Pipelines()
	if f := c.afterPipelines; f != nil {
		c.afterPipelines = nil
		f()
	}
	return infos
}

// TestResultsDefineDuringQuery: a Define that lands while a query runs
// does not make the query render one class's results with another's spec:
// a class resolved by the query stays the one read; a local pipeline that
// gets its first managed revision meanwhile makes the query Aborted.
func TestResultsDefineDuringQuery(t *testing.T) {
	revs := tempsRevisions(t)
	for _, local := range []bool{false, true} {
		cfg := hub.Config{Dir: t.TempDir(), Revisions: revs[:1], CommitInterval: time.Hour, NoSync: true, Logger: slog.New(slog.DiscardHandler)}
		if local {
			cfg.Pipelines, cfg.Revisions = []*operators.Pipeline{testPipeline(t)}, nil
		}
		h, err := hub.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		core := &hookCore{Hub: h}
		e := start(t, core, nil)
		rev := uint32(1)
		if local {
			rev = 0
		}
		if err := h.Apply(&runnelv1.Batch{EdgeId: "gw-1", Epoch: 1, FirstSeq: 1, LastSeq: 1, Partials: []*runnelv1.Partial{
			{Seq: 1, Pipeline: "temps", Revision: rev, Key: mustKey(t, revs[0].Pipeline, "d1"), WindowEnd: 60000, Version: 1, State: revState(revs[0].Pipeline.Aggregates, 10)},
		}, Watermarks: []*runnelv1.Watermark{{Pipeline: "temps", Revision: rev, WatermarkMs: 60000}}}); err != nil {
			t.Fatal(err)
		}
		if err := h.Commit(); err != nil {
			t.Fatal(err)
		}
		core.afterPipelines = func() {
			if err := h.Define(revs[2]); err != nil {
				t.Error(err)
			}
		}
		q, err := runnelv1.NewResultsClient(e.conn).QueryResults(testCtx(t), &runnelv1.QueryResultsRequest{Pipeline: "temps"})
		if local {
			wantCode(t, err, codes.Aborted, "a local pipeline that got a managed revision during the query")
			continue
		}
		if err != nil || len(q.Results) != 1 || q.Results[0].Values.Fields["avg_temp"].GetNumberValue() != 10 {
			t.Fatalf("query during Define: %v, %v; want class 1's result", q, err)
		}
	}
}
