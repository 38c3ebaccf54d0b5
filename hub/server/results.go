package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/window/aggregate"
)

// Query limits: QueryResultsRequest.limit 0 is defaultLimit; more than
// maxLimit is cut to maxLimit.
const (
	defaultLimit = 1000
	maxLimit     = 10000
)

// results serves the Results service.
type results struct {
	runnelv1.UnimplementedResultsServer
	s *Server
}

// ListPipelines lists what the hub merges: each local pipeline, and each
// compatibility class of managed revisions (with its revisions), so that
// one name may be listed more than once.
func (r *results) ListPipelines(ctx context.Context, _ *runnelv1.ListPipelinesRequest) (*runnelv1.ListPipelinesResponse, error) {
	infos := r.s.core.Pipelines()
	out := &runnelv1.ListPipelinesResponse{Pipelines: make([]*runnelv1.Pipeline, 0, len(infos))}
	for _, in := range infos {
		p := in.Pipeline
		pb := &runnelv1.Pipeline{Name: p.Name, KeyFields: p.KeyFields(), Window: windowText(p.Spec.Window), Results: in.Results,
			Revisions: in.Revisions, CompatClass: in.Class}
		for _, a := range p.Spec.Aggregates {
			pb.Aggregates = append(pb.Aggregates, fmt.Sprintf("%s: %s(%s)", a.Name, a.Func, strings.Join(a.Args, ", ")))
		}
		if in.HasWatermark {
			wm := in.Watermark
			pb.WatermarkMs = &wm
		}
		out.Pipelines = append(out.Pipelines, pb)
	}
	return out, nil
}

// windowText describes a window as ListPipelines does: "tumbling 1m0s",
// "sliding 10m0s/1m0s", "session 30s".
func windowText(w spec.Window) string {
	ms := func(d spec.Duration) time.Duration { return time.Duration(d) * time.Millisecond }
	switch w.Kind {
	case spec.Tumbling:
		return "tumbling " + ms(w.Size).String()
	case spec.Sliding:
		return "sliding " + ms(w.Size).String() + "/" + ms(w.Slide).String()
	case spec.Session:
		return "session " + ms(w.Gap).String()
	}
	return ""
}

func (r *results) ListEdges(ctx context.Context, _ *runnelv1.ListEdgesRequest) (*runnelv1.ListEdgesResponse, error) {
	edges := r.s.core.Edges()
	out := &runnelv1.ListEdgesResponse{Edges: make([]*runnelv1.Edge, 0, len(edges))}
	for _, e := range edges {
		pb := &runnelv1.Edge{EdgeId: e.ID, Epoch: e.Epoch, AckedSeq: e.AckedSeq, Live: e.Live}
		if !e.LastSeen.IsZero() {
			pb.LastSeenMs = e.LastSeen.UnixMilli()
		}
		for _, name := range sortedKeys(e.Watermarks) {
			pb.Watermarks = append(pb.Watermarks, &runnelv1.Watermark{Pipeline: name, WatermarkMs: e.Watermarks[name]})
		}
		out.Edges = append(out.Edges, pb)
	}
	return out, nil
}

// key encodes a key filter; nil for none.
func key(p *operators.Pipeline, fields map[string]string) ([]byte, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	k, err := p.KeyFromStrings(fields)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, strings.TrimPrefix(err.Error(), "operators: "))
	}
	return k, nil
}

// entryOf returns the entry of infos (one per local pipeline and per class
// of managed revisions) that a query of name at revision reads, as
// hub.Query resolves it: revision 0 the class of the latest managed
// revision, or the local pipeline; another revision the class holding it.
func entryOf(infos []hub.PipelineInfo, name string, revision uint32) *hub.PipelineInfo {
	var local, latest *hub.PipelineInfo
	var top uint32
	for i := range infos {
		in := &infos[i]
		switch {
		case in.Pipeline.Name != name:
		case in.Class == 0:
			local = in
		case revision != 0 && slices.Contains(in.Revisions, revision):
			return in
		case len(in.Revisions) > 0 && in.Revisions[len(in.Revisions)-1] > top:
			latest, top = in, in.Revisions[len(in.Revisions)-1]
		}
	}
	switch {
	case revision != 0:
		return nil
	case latest != nil:
		return latest
	}
	return local
}

// classEntry returns name's entry of class (0: local), or nil.
func classEntry(infos []hub.PipelineInfo, name string, class uint32) *hub.PipelineInfo {
	for i := range infos {
		if in := &infos[i]; in.Pipeline.Name == name && in.Class == class {
			return in
		}
	}
	return nil
}

// QueryResults queries one local pipeline, or one class of managed
// revisions (req.revision), with the class's spec for the key and the
// values. A page token keeps the class of the page before it.
func (r *results) QueryResults(ctx context.Context, req *runnelv1.QueryResultsRequest) (*runnelv1.QueryResultsResponse, error) {
	if req.Pipeline == "" {
		return nil, status.Error(codes.InvalidArgument, "pipeline: required")
	}
	q := hub.Query{Pipeline: req.Pipeline, Revision: req.Revision, From: req.FromMs, To: req.ToMs, AllVersions: req.AllVersions, Limit: int(req.Limit)}
	var err error
	if req.PageToken != "" {
		if q.After, err = base64.RawURLEncoding.DecodeString(req.PageToken); err != nil || len(q.After) == 0 {
			return nil, status.Error(codes.InvalidArgument, "page_token: not a token from a previous response")
		}
	}
	infos := r.s.core.Pipelines()
	var in *hub.PipelineInfo
	if q.After != nil {
		class, ok := hub.CursorClass(q.After)
		// The core refuses a token of another class than req.revision's.
		if in = classEntry(infos, req.Pipeline, class); !ok || in == nil {
			return nil, status.Error(codes.InvalidArgument, "page_token: not a token from a previous response for this pipeline")
		}
	} else if in = entryOf(infos, req.Pipeline, req.Revision); in == nil {
		if req.Revision != 0 && r.s.core.Pipeline(req.Pipeline) != nil {
			return nil, status.Errorf(codes.NotFound, "pipeline %q: no revision %d merged by this hub", req.Pipeline, req.Revision)
		}
		return nil, status.Errorf(codes.NotFound, "pipeline %q: not merged by this hub", req.Pipeline)
	} else if q.Revision == 0 && in.Class != 0 {
		// Pin the class resolved here, whatever Define adds meanwhile.
		q.Revision = in.Revisions[len(in.Revisions)-1]
	}
	p := in.Pipeline
	if q.Key, err = key(p, req.Key); err != nil {
		return nil, err
	}
	switch {
	case req.FromMs < 0 || req.ToMs < 0:
		return nil, status.Error(codes.InvalidArgument, "from_ms and to_ms: Unix milliseconds, not negative")
	case req.ToMs != 0 && req.ToMs < req.FromMs:
		return nil, status.Errorf(codes.InvalidArgument, "to_ms %d is before from_ms %d", req.ToMs, req.FromMs)
	case q.Limit == 0:
		q.Limit = defaultLimit
	case q.Limit > maxLimit:
		q.Limit = maxLimit
	}
	rs, next, err := r.s.core.Query(q)
	if err != nil {
		return nil, coreError(err)
	}
	if q.Revision == 0 && q.After == nil {
		// Resolved to a local pipeline, which no revision pins: if the name
		// got managed revisions since, the core may have read their class.
		// Once managed, a name never goes back to local, so still local
		// now means local then.
		if now := entryOf(r.s.core.Pipelines(), req.Pipeline, 0); now == nil || now.Class != in.Class {
			return nil, status.Errorf(codes.Aborted, "pipeline %q: its first managed revision came during the query; query again", req.Pipeline)
		}
	}
	out := &runnelv1.QueryResultsResponse{Results: make([]*runnelv1.Result, 0, len(rs))}
	st := p.Aggregates.New()
	for i := range rs {
		pb, err := render(p, &rs[i], st)
		if err != nil {
			return nil, err
		}
		out.Results = append(out.Results, pb)
	}
	if len(next) > 0 {
		out.NextPageToken = base64.RawURLEncoding.EncodeToString(next)
	}
	return out, nil
}

// Subscribe streams results as the core emits them: those of the latest
// managed revision's class (or of the local pipeline). The stream ends
// with Unavailable when the core drops the subscription (the subscriber
// fell behind, the hub is closing, or a revision of another class became
// the latest): resubscribe, then query from the last window seen to fill
// the gap.
func (r *results) Subscribe(req *runnelv1.SubscribeRequest, stream grpc.ServerStreamingServer[runnelv1.Result]) error {
	if req.Pipeline == "" {
		return status.Error(codes.InvalidArgument, "pipeline: required")
	}
	in := entryOf(r.s.core.Pipelines(), req.Pipeline, 0)
	if in == nil {
		return status.Errorf(codes.NotFound, "pipeline %q: not merged by this hub", req.Pipeline)
	}
	p := in.Pipeline
	k, err := key(p, req.Key)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	ch := r.s.core.Subscribe(ctx, p.Name, k)
	// Headers now, so that a client (or the gateway) knows the
	// subscription is in place before the first result.
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	st := p.Aggregates.New()
	for {
		select {
		case res, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return status.Error(codes.Unavailable, "subscription dropped (fell behind, the hub is closing, or a revision of another class became the latest); resubscribe and query the gap")
			}
			if res.Class != in.Class {
				// The core resolved another class than in: Define ran
				// between the two calls.
				return status.Error(codes.Unavailable, "the pipeline's latest revision changed as the subscription began; resubscribe")
			}
			pb, err := render(p, &res, st)
			if err != nil {
				return err
			}
			if err := stream.Send(pb); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		case <-r.s.quit:
			return errShutdown
		}
	}
}

// jsonOpts is how results are written as JSON (REST, SSE): field names as
// in the .proto (window_start), every field present.
var jsonOpts = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// render converts a core result to the API's. st is scratch state from
// p.Aggregates.New().
func render(p *operators.Pipeline, r *hub.Result, st *aggregate.State) (*runnelv1.Result, error) {
	buf, err := p.AppendKeyJSON(nil, r.Key)
	if err != nil {
		return nil, status.Errorf(codes.DataLoss, "pipeline %s: result key: %v", p.Name, err)
	}
	k := new(structpb.Struct)
	if err := protojson.Unmarshal(buf, k); err != nil {
		return nil, status.Errorf(codes.Internal, "pipeline %s: result key %s: %v", p.Name, buf, err)
	}
	if err := p.Aggregates.Decode(st, r.State); err != nil {
		return nil, status.Errorf(codes.DataLoss, "pipeline %s: result state: %v", p.Name, err)
	}
	vals := &structpb.Struct{Fields: make(map[string]*structpb.Value, p.Aggregates.Len())}
	for i := 0; i < p.Aggregates.Len(); i++ {
		vals.Fields[p.Aggregates.Spec(i).Name] = aggValue(p.Aggregates.Result(st, i))
	}
	return &runnelv1.Result{
		Pipeline: p.Name, Key: k, WindowStart: r.Start, WindowEnd: r.End, Version: r.Version,
		Values: vals, Edges: r.Edges, EmittedMs: r.Emitted, Revisions: r.Revisions,
	}, nil
}

// aggValue is an aggregate's result as a JSON value: null when it saw no
// input or is not finite (as aggregate.Set.AppendJSON writes it).
func aggValue(v aggregate.Value) *structpb.Value {
	switch v.Kind {
	case aggregate.Int:
		return structpb.NewNumberValue(float64(v.Int))
	case aggregate.Float:
		if v.Float-v.Float == 0 { // finite
			return structpb.NewNumberValue(v.Float)
		}
	}
	return structpb.NewNullValue()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
