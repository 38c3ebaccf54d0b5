package fakehub

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

type resultsServer struct {
	h *Hub
	runnelv1.UnimplementedResultsServer
}

// keyMatches reports whether r's key has every field of want, compared
// as text.
func keyMatches(r *runnelv1.Result, want map[string]string) bool {
	for k, v := range want {
		f := r.GetKey().GetFields()[k]
		if f == nil {
			return false
		}
		var got string
		switch k := f.GetKind().(type) {
		case *structpb.Value_StringValue:
			got = k.StringValue
		case *structpb.Value_NumberValue:
			got = strconv.FormatFloat(k.NumberValue, 'g', -1, 64)
		case *structpb.Value_BoolValue:
			got = strconv.FormatBool(k.BoolValue)
		}
		if got != v {
			return false
		}
	}
	return true
}

// QueryResults pages through the results a test stored: limit per page
// (default 1000), the page token the index to go on from.
func (s *resultsServer) QueryResults(_ context.Context, req *runnelv1.QueryResultsRequest) (*runnelv1.QueryResultsResponse, error) {
	h := s.h
	h.mu.Lock()
	defer h.mu.Unlock()
	known := false
	for _, r := range h.Results {
		known = known || r.Pipeline == req.Pipeline
	}
	if !known {
		return nil, notFound("pipeline %s not found", req.Pipeline)
	}
	var match []*runnelv1.Result
	for _, r := range h.Results {
		switch {
		case r.Pipeline != req.Pipeline, !keyMatches(r, req.Key),
			req.FromMs != 0 && r.WindowStart < req.FromMs, req.ToMs != 0 && r.WindowEnd > req.ToMs,
			req.Revision != 0 && !slices.Contains(r.Revisions, req.Revision):
			continue
		}
		match = append(match, r)
	}
	if !req.AllVersions { // the latest version of each window and key
		latest := map[string]int{}
		var out []*runnelv1.Result
		for _, r := range match {
			id := fmt.Sprint(r.WindowStart, r.Key.String())
			if i, ok := latest[id]; ok {
				if r.Version > out[i].Version {
					out[i] = r
				}
				continue
			}
			latest[id] = len(out)
			out = append(out, r)
		}
		match = out
	}
	start := 0
	if req.PageToken != "" {
		n, err := strconv.Atoi(req.PageToken)
		if err != nil || n < 0 || n > len(match) {
			return nil, status.Errorf(codes.InvalidArgument, "bad page_token %q", req.PageToken)
		}
		start = n
	}
	limit := int(req.Limit)
	if limit == 0 {
		limit = 1000
	}
	end := min(len(match), start+limit)
	resp := &runnelv1.QueryResultsResponse{Results: match[start:end]}
	if end < len(match) {
		resp.NextPageToken = strconv.Itoa(end)
	}
	return resp, nil
}

// Subscribe sends Live, then waits for the client to leave, or with
// DropAfterLive ends the stream as a hub drops a slow subscriber.
func (s *resultsServer) Subscribe(req *runnelv1.SubscribeRequest, stream grpc.ServerStreamingServer[runnelv1.Result]) error {
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	s.h.mu.Lock()
	live := slices.Clone(s.h.Live)
	s.h.mu.Unlock()
	for _, r := range live {
		if r.Pipeline != req.Pipeline || !keyMatches(r, req.Key) {
			continue
		}
		if err := stream.Send(r); err != nil {
			return err
		}
	}
	s.h.mu.Lock()
	drop := s.h.DropAfterLive
	s.h.mu.Unlock()
	if drop {
		return status.Error(codes.Unavailable, "fell behind")
	}
	select {
	case <-stream.Context().Done():
	case <-s.h.done:
	}
	return nil
}

type healthServer struct {
	h *Hub
	runnelv1.UnimplementedHealthServer
}

// Check reports the fake's version.
func (s *healthServer) Check(context.Context, *runnelv1.HealthCheckRequest) (*runnelv1.HealthCheckResponse, error) {
	return &runnelv1.HealthCheckResponse{Status: "ok", Version: "v0.0.0-fake", EdgesLive: 1, EdgesKnown: 2}, nil
}
