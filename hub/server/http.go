package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/runnel-io/runnel/internal/health"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/proto/runnelv1gw"
)

// httpHandler routes the HTTP listener: the REST gateway under /v1/, the
// OpenAPI document, Server-Sent Events, /healthz and /metrics. The
// gateway serves Results, Health and Fleet (/v1/fleet/...), not the edge
// services.
func (s *Server) httpHandler() (http.Handler, error) {
	gw := runtime.NewServeMux(runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
		MarshalOptions:   jsonOpts,
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}))
	ctx := context.Background() // only read by the registration itself
	if err := runnelv1gw.RegisterResultsHandler(ctx, gw, s.innerConn); err != nil {
		return nil, fmt.Errorf("server: gateway: %w", err)
	}
	if err := runnelv1gw.RegisterHealthHandler(ctx, gw, s.innerConn); err != nil {
		return nil, fmt.Errorf("server: gateway: %w", err)
	}
	if err := runnelv1gw.RegisterFleetHandler(ctx, gw, s.innerConn); err != nil {
		return nil, fmt.Errorf("server: gateway: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", gw)
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(runnelv1gw.OpenAPI)
	})
	mux.HandleFunc("GET /v1/pipelines/{pipeline}/results/events", s.events)
	mux.HandleFunc("GET /v1/archive/status", s.archiveStatus)
	mux.Handle("GET /healthz", health.Handler(s.report))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	return mux, nil
}

// archiveStatus serves the archive's Status as JSON (what `runnel-hub
// archive status` prints), to a caller the Results API would serve.
func (s *Server) archiveStatus(w http.ResponseWriter, r *http.Request) {
	const method = runnelv1.Results_QueryResults_FullMethodName
	if _, err := s.tokens.apiCaller(bearerHeader(r), method, methodRoles[method]); err != nil {
		httpError(w, err)
		return
	}
	if s.cfg.Archive == nil {
		httpError(w, status.Error(codes.NotFound, "this hub has no archive (archive.url is empty)"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(s.cfg.Archive.Status())
}

// httpError writes err (a gRPC status) as the gateway does: its HTTP
// status and a JSON body {"code", "message"}.
func httpError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(runtime.HTTPStatusFromCode(st.Code()))
	json.NewEncoder(w).Encode(map[string]any{"code": int(st.Code()), "message": st.Message()})
}

// keyParams collects key[field]=value query parameters.
func keyParams(r *http.Request) map[string]string {
	var out map[string]string
	for name, vals := range r.URL.Query() {
		field, ok := strings.CutPrefix(name, "key[")
		if !ok || !strings.HasSuffix(field, "]") || len(vals) == 0 {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[strings.TrimSuffix(field, "]")] = vals[len(vals)-1]
	}
	return out
}

// events serves a subscription as Server-Sent Events: a comment
// (": subscribed") once the subscription is in place, then one
// `data: <result JSON>` event per result, and a comment every heartbeat
// so that proxies keep the connection. It ends when the client leaves,
// the core drops the subscription (the client reconnects) or the server
// shuts down.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	const method = runnelv1.Results_Subscribe_FullMethodName // the same stream
	if _, err := s.tokens.apiCaller(bearerHeader(r), method, methodRoles[method]); err != nil {
		httpError(w, err)
		return
	}
	// The class the gRPC Subscribe resolves: the latest managed
	// revision's, or the local pipeline.
	name := r.PathValue("pipeline")
	if name == "" {
		httpError(w, status.Error(codes.InvalidArgument, "pipeline: required"))
		return
	}
	in := entryOf(s.core.Pipelines(), name, 0)
	if in == nil {
		httpError(w, status.Errorf(codes.NotFound, "pipeline %q: not merged by this hub", name))
		return
	}
	p := in.Pipeline
	k, err := key(p, keyParams(r))
	if err != nil {
		httpError(w, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ch := s.core.Subscribe(ctx, p.Name, k)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": subscribed\n\n")
	flusher.Flush()
	s.metrics.sse.Inc()
	defer s.metrics.sse.Dec()

	tick := time.NewTicker(s.cfg.Heartbeat)
	defer tick.Stop()
	st := p.Aggregates.New()
	var buf []byte
	for {
		select {
		case res, ok := <-ch:
			if !ok || res.Class != in.Class {
				// Dropped, or Define made another class the latest as
				// the subscription began: the client reconnects.
				return
			}
			pb, err := render(p, &res, st)
			if err != nil {
				s.log.Error("hub: SSE: rendering a result", "pipeline", p.Name, "err", err)
				return
			}
			buf, err = jsonOpts.MarshalAppend(append(buf[:0], "data: "...), pb)
			if err != nil {
				return
			}
			buf = append(buf, '\n', '\n')
			if _, err := w.Write(buf); err != nil {
				return
			}
			flusher.Flush()
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-ctx.Done():
			return
		case <-s.quit:
			return
		}
	}
}

func bearerHeader(r *http.Request) string {
	for _, v := range r.Header.Values("Authorization") {
		if tok, ok := cutPrefixFold(v, "Bearer "); ok {
			return strings.TrimSpace(tok)
		}
	}
	return ""
}
