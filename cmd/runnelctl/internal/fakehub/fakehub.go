package fakehub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/internal/linediff"
	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Now is the fake hub's clock: every time it stores.
var Now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// Hub is the fake. Its fields are guarded by mu; tests change them with
// Do, after Start.
type Hub struct {
	// Addr is the host:port it listens on.
	Addr string
	// Token, when set, is the only bearer token accepted (name "test").
	Token string

	mu          sync.Mutex
	Pipelines   map[string][]*runnelv1.PipelineRevision // revisions, oldest first
	Created     map[string]int64                        // pipeline created_ms
	Edges       map[string]*runnelv1.FleetEdge
	Deployments map[string][]*runnelv1.Deployment // versions, oldest first
	Tokens      map[string]*runnelv1.Token
	Audit       []*runnelv1.AuditEntry
	Results     []*runnelv1.Result
	// Live is what Subscribe sends, in order, before it waits for the
	// client to leave.
	Live []*runnelv1.Result
	// DropAfterLive ends each subscription after Live with Unavailable.
	DropAfterLive bool
	// Calls is every call, by method name ("ApplyPipeline"), and Reqs
	// the requests in order.
	Calls map[string]int
	Reqs  []proto.Message
	// Tokens seen in the authorization metadata, in order.
	SeenTokens []string
	fail       map[string]error
	script     map[string][]*runnelv1.RolloutStatus

	srv  *grpc.Server
	done chan struct{}

	runnelv1.UnimplementedFleetServer
	results resultsServer
	health  healthServer
}

// Start serves a new empty hub on 127.0.0.1:0 until the test ends.
func Start(t testing.TB) *Hub {
	t.Helper()
	h := &Hub{
		Pipelines: map[string][]*runnelv1.PipelineRevision{}, Created: map[string]int64{},
		Edges: map[string]*runnelv1.FleetEdge{}, Deployments: map[string][]*runnelv1.Deployment{},
		Tokens: map[string]*runnelv1.Token{}, Calls: map[string]int{}, fail: map[string]error{},
		script: map[string][]*runnelv1.RolloutStatus{}, done: make(chan struct{}),
	}
	h.results.h, h.health.h = h, h
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.Addr = lis.Addr().String()
	h.srv = grpc.NewServer(grpc.UnaryInterceptor(h.unary), grpc.StreamInterceptor(h.stream))
	runnelv1.RegisterFleetServer(h.srv, h)
	runnelv1.RegisterResultsServer(h.srv, &h.results)
	runnelv1.RegisterHealthServer(h.srv, &h.health)
	go func() {
		defer close(h.done)
		_ = h.srv.Serve(lis)
	}()
	t.Cleanup(func() {
		h.srv.Stop()
		<-h.done
	})
	return h
}

// Do runs f with the hub's state locked.
func (h *Hub) Do(f func(h *Hub)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

// Fail makes every later call of method return err (nil: succeed again).
func (h *Hub) Fail(method string, err error) {
	h.Do(func(h *Hub) { h.fail[method] = err })
}

// Script makes the next GetDeployment calls of name return these rollout
// statuses, one each, the last one from then on.
func (h *Hub) Script(name string, steps ...*runnelv1.RolloutStatus) {
	h.Do(func(h *Hub) { h.script[name] = steps })
}

// Count returns how many calls of method the hub received.
func (h *Hub) Count(method string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.Calls[method]
}

func (h *Hub) check(ctx context.Context, method string, req any) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	name := method[strings.LastIndexByte(method, '/')+1:]
	h.Calls[name]++
	if m, ok := req.(proto.Message); ok {
		h.Reqs = append(h.Reqs, proto.Clone(m))
	}
	md, _ := metadata.FromIncomingContext(ctx)
	tok := ""
	for _, v := range md.Get("authorization") {
		tok = strings.TrimPrefix(v, "Bearer ")
	}
	h.SeenTokens = append(h.SeenTokens, tok)
	if h.Token != "" && tok != h.Token {
		return status.Error(codes.Unauthenticated, "unknown token")
	}
	if err := h.fail[name]; err != nil {
		return err
	}
	return nil
}

func (h *Hub) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := h.check(ctx, info.FullMethod, req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (h *Hub) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if err := h.check(ss.Context(), info.FullMethod, nil); err != nil {
		return err
	}
	return handler(srv, ss)
}

func notFound(format string, args ...any) error {
	return status.Errorf(codes.NotFound, format, args...)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

// ---- Pipelines

// AddPipeline stores a revision of spec text as author, as ApplyPipeline
// would, for a test's setup.
func (h *Hub) AddPipeline(name, text, author string) *runnelv1.PipelineRevision {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.addRevision(name, text, author)
}

func (h *Hub) addRevision(name, text, author string) *runnelv1.PipelineRevision {
	revs := h.Pipelines[name]
	sum := sha256.Sum256([]byte(text))
	r := &runnelv1.PipelineRevision{Name: name, Revision: uint32(len(revs) + 1), Spec: text, Author: author,
		CreatedMs: ms(Now), Hash: hex.EncodeToString(sum[:]), CompatClass: 1}
	if len(revs) == 0 {
		h.Created[name] = ms(Now)
	}
	h.Pipelines[name] = append(revs, r)
	return r
}

// ApplyPipeline implements runnelv1.FleetServer.
func (h *Hub) ApplyPipeline(_ context.Context, req *runnelv1.ApplyPipelineRequest) (*runnelv1.ApplyPipelineResponse, error) {
	file := req.File
	if file == "" {
		file = "spec"
	}
	p, err := spec.Parse(file, []byte(req.Spec))
	if err != nil {
		var ps spec.Problems
		errors.As(err, &ps)
		detail := &runnelv1.SpecProblems{}
		for _, pr := range ps {
			detail.Problems = append(detail.Problems, &runnelv1.SpecProblem{File: pr.File, Line: uint32(pr.Pos.Line),
				Column: uint32(pr.Pos.Column), Field: pr.Field, Message: pr.Msg})
		}
		st, _ := status.New(codes.InvalidArgument, "invalid pipeline spec:\n"+err.Error()).WithDetails(detail)
		return nil, st.Err()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	revs := h.Pipelines[p.Name]
	sum := sha256.Sum256([]byte(req.Spec))
	hash := hex.EncodeToString(sum[:])
	resp := &runnelv1.ApplyPipelineResponse{}
	if len(revs) > 0 {
		latest := revs[len(revs)-1]
		resp.Diff = linediff.Unified(fmt.Sprintf("%s revision %d", p.Name, latest.Revision), file, latest.Spec, req.Spec)
		if latest.Hash == hash {
			resp.Revision = latest
			return resp, nil
		}
	}
	if req.DryRun {
		resp.Revision = &runnelv1.PipelineRevision{Name: p.Name, Revision: uint32(len(revs) + 1), Spec: req.Spec, Hash: hash}
		return resp, nil
	}
	resp.Revision = h.addRevision(p.Name, req.Spec, "test")
	resp.Created = true
	h.audit("apply pipeline", "pipeline/"+p.Name, "", strconv.Itoa(int(resp.Revision.Revision)))
	return resp, nil
}

func (h *Hub) audit(action, object, before, after string) {
	h.Audit = append(h.Audit, &runnelv1.AuditEntry{Id: uint64(len(h.Audit) + 1), AtMs: ms(Now), Who: "test",
		Action: action, Object: object, Before: before, After: after})
}

func (h *Hub) managed(name string) *runnelv1.ManagedPipeline {
	revs := h.Pipelines[name]
	latest := revs[len(revs)-1]
	mp := &runnelv1.ManagedPipeline{Name: name, Latest: latest.Revision, CreatedMs: h.Created[name],
		UpdatedMs: latest.CreatedMs, LatestRevision: latest}
	for dn, vs := range h.Deployments {
		for _, r := range vs[len(vs)-1].Spec.GetPipelines() {
			if r.Name == name {
				mp.Deployments = append(mp.Deployments, dn)
			}
		}
	}
	sort.Strings(mp.Deployments)
	return mp
}

// GetPipeline implements runnelv1.FleetServer.
func (h *Hub) GetPipeline(_ context.Context, req *runnelv1.GetPipelineRequest) (*runnelv1.ManagedPipeline, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.Pipelines[req.Name]) == 0 {
		return nil, notFound("pipeline %s not found", req.Name)
	}
	return h.managed(req.Name), nil
}

// ListManagedPipelines implements runnelv1.FleetServer.
func (h *Hub) ListManagedPipelines(context.Context, *runnelv1.ListManagedPipelinesRequest) (*runnelv1.ListManagedPipelinesResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	resp := &runnelv1.ListManagedPipelinesResponse{}
	for _, name := range sortedKeys(h.Pipelines) {
		resp.Pipelines = append(resp.Pipelines, h.managed(name))
	}
	return resp, nil
}

// ListRevisions implements runnelv1.FleetServer.
func (h *Hub) ListRevisions(_ context.Context, req *runnelv1.ListRevisionsRequest) (*runnelv1.ListRevisionsResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	revs := h.Pipelines[req.Name]
	if len(revs) == 0 {
		return nil, notFound("pipeline %s not found", req.Name)
	}
	return &runnelv1.ListRevisionsResponse{Revisions: revs}, nil
}

// DiffRevisions implements runnelv1.FleetServer.
func (h *Hub) DiffRevisions(_ context.Context, req *runnelv1.DiffRevisionsRequest) (*runnelv1.DiffRevisionsResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	revs := h.Pipelines[req.Name]
	if len(revs) == 0 {
		return nil, notFound("pipeline %s not found", req.Name)
	}
	for _, r := range []uint32{req.From, req.To} {
		if r < 1 || int(r) > len(revs) {
			return nil, notFound("pipeline %s has no revision %d", req.Name, r)
		}
	}
	a, b := revs[req.From-1], revs[req.To-1]
	resp := &runnelv1.DiffRevisionsResponse{
		Diff:       linediff.Unified(fmt.Sprintf("%s revision %d", req.Name, a.Revision), fmt.Sprintf("%s revision %d", req.Name, b.Revision), a.Spec, b.Spec),
		Compatible: a.CompatClass == b.CompatClass,
	}
	if !resp.Compatible {
		resp.Reason = "the window changed"
	}
	return resp, nil
}

// ---- Edges

// ListFleetEdges implements runnelv1.FleetServer; its selector is only
// k=v terms joined by commas.
func (h *Hub) ListFleetEdges(_ context.Context, req *runnelv1.ListFleetEdgesRequest) (*runnelv1.ListFleetEdgesResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	want := map[string]string{}
	if req.Selector != "" {
		for _, term := range strings.Split(req.Selector, ",") {
			k, v, ok := strings.Cut(term, "=")
			if !ok || k == "" {
				return nil, status.Errorf(codes.InvalidArgument, "selector %q: term %q is not key=value", req.Selector, term)
			}
			want[k] = v
		}
	}
	resp := &runnelv1.ListFleetEdgesResponse{}
edges:
	for _, id := range sortedKeys(h.Edges) {
		e := h.Edges[id]
		for k, v := range want {
			if e.Labels[k] != v {
				continue edges
			}
		}
		resp.Edges = append(resp.Edges, e)
	}
	return resp, nil
}

// GetFleetEdge implements runnelv1.FleetServer.
func (h *Hub) GetFleetEdge(_ context.Context, req *runnelv1.GetFleetEdgeRequest) (*runnelv1.FleetEdge, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.Edges[req.EdgeId]
	if e == nil {
		return nil, notFound("edge %s not found", req.EdgeId)
	}
	return e, nil
}

// LabelEdge implements runnelv1.FleetServer.
func (h *Hub) LabelEdge(_ context.Context, req *runnelv1.LabelEdgeRequest) (*runnelv1.FleetEdge, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.Edges[req.EdgeId]
	if e == nil {
		return nil, notFound("edge %s not found", req.EdgeId)
	}
	for k := range req.Set {
		if k == "" || strings.ContainsAny(k, " =,!") {
			return nil, status.Errorf(codes.InvalidArgument, "label key %q is not valid", k)
		}
	}
	e = proto.Clone(e).(*runnelv1.FleetEdge)
	if e.HubLabels == nil {
		e.HubLabels = map[string]string{}
	}
	if e.Labels == nil {
		e.Labels = map[string]string{}
	}
	for k, v := range req.Set {
		e.HubLabels[k], e.Labels[k] = v, v
	}
	for _, k := range req.Remove {
		delete(e.HubLabels, k)
		delete(e.Labels, k)
	}
	h.Edges[req.EdgeId] = e
	h.audit("label edge", "edge/"+req.EdgeId, "", "")
	return e, nil
}

// ---- Deployments

// ApplyDeployment implements runnelv1.FleetServer.
func (h *Hub) ApplyDeployment(_ context.Context, req *runnelv1.ApplyDeploymentRequest) (*runnelv1.Deployment, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := req.GetSpec()
	if s.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "deployment: name is empty")
	}
	d := &runnelv1.Deployment{Spec: s, Author: "test", CreatedMs: ms(Now),
		Rollout: &runnelv1.RolloutStatus{Phase: "progressing", Steps: 1}}
	for _, r := range s.Pipelines {
		revs := h.Pipelines[r.Name]
		if len(revs) == 0 {
			return nil, status.Errorf(codes.FailedPrecondition, "deployment %s: pipeline %s does not exist", s.Name, r.Name)
		}
		rev := r.Revision
		if rev == 0 {
			rev = revs[len(revs)-1].Revision
		}
		if int(rev) > len(revs) {
			return nil, status.Errorf(codes.FailedPrecondition, "deployment %s: pipeline %s has no revision %d", s.Name, r.Name, rev)
		}
		d.Resolved = append(d.Resolved, &runnelv1.PipelineRef{Name: r.Name, Revision: rev})
	}
	vs := h.Deployments[s.Name]
	if len(vs) > 0 {
		cur := vs[len(vs)-1]
		if proto.Equal(cur.Spec.GetStrategy(), s.GetStrategy()) && cur.Spec.GetSelector() == s.GetSelector() &&
			slices.EqualFunc(cur.Resolved, d.Resolved, func(a, b *runnelv1.PipelineRef) bool { return proto.Equal(a, b) }) {
			return cur, nil
		}
	}
	d.Version = uint32(len(vs) + 1)
	if req.DryRun {
		return d, nil
	}
	if len(vs) > 0 {
		vs[len(vs)-1].Rollout.Phase = "superseded"
	}
	h.Deployments[s.Name] = append(vs, d)
	h.audit("apply deployment", "deployment/"+s.Name, "", strconv.Itoa(int(d.Version)))
	return d, nil
}

// GetDeployment implements runnelv1.FleetServer; a scripted rollout
// (Script) moves one step each call.
func (h *Hub) GetDeployment(_ context.Context, req *runnelv1.GetDeploymentRequest) (*runnelv1.Deployment, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	vs := h.Deployments[req.Name]
	if len(vs) == 0 {
		return nil, notFound("deployment %s not found", req.Name)
	}
	cur := vs[len(vs)-1]
	if steps := h.script[req.Name]; len(steps) > 0 {
		cur.Rollout = steps[0]
		if len(steps) > 1 {
			h.script[req.Name] = steps[1:]
		}
	}
	return cur, nil
}

// ListDeployments implements runnelv1.FleetServer.
func (h *Hub) ListDeployments(context.Context, *runnelv1.ListDeploymentsRequest) (*runnelv1.ListDeploymentsResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	resp := &runnelv1.ListDeploymentsResponse{}
	for _, name := range sortedKeys(h.Deployments) {
		vs := h.Deployments[name]
		resp.Deployments = append(resp.Deployments, vs[len(vs)-1])
	}
	return resp, nil
}

// ListDeploymentVersions implements runnelv1.FleetServer.
func (h *Hub) ListDeploymentVersions(_ context.Context, req *runnelv1.GetDeploymentRequest) (*runnelv1.ListDeploymentsResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	vs := h.Deployments[req.Name]
	if len(vs) == 0 {
		return nil, notFound("deployment %s not found", req.Name)
	}
	return &runnelv1.ListDeploymentsResponse{Deployments: vs}, nil
}

// Rollout implements runnelv1.FleetServer.
func (h *Hub) Rollout(_ context.Context, req *runnelv1.RolloutRequest) (*runnelv1.Deployment, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	vs := h.Deployments[req.Name]
	if len(vs) == 0 {
		return nil, notFound("deployment %s not found", req.Name)
	}
	cur := vs[len(vs)-1]
	terminal := func() bool {
		switch cur.Rollout.GetPhase() {
		case "succeeded", "failed", "aborted", "superseded":
			return true
		}
		return false
	}
	switch req.Action {
	case "pause":
		if cur.Rollout.GetPhase() != "progressing" {
			return nil, status.Errorf(codes.FailedPrecondition, "deployment %s: cannot pause a rollout that is %s", req.Name, cur.Rollout.GetPhase())
		}
		cur.Rollout.Phase = "paused"
	case "resume":
		if cur.Rollout.GetPhase() != "paused" {
			return nil, status.Errorf(codes.FailedPrecondition, "deployment %s: cannot resume a rollout that is %s", req.Name, cur.Rollout.GetPhase())
		}
		cur.Rollout.Phase = "progressing"
	case "abort":
		if terminal() {
			return nil, status.Errorf(codes.FailedPrecondition, "deployment %s: the rollout is %s already", req.Name, cur.Rollout.GetPhase())
		}
		cur.Rollout.Phase = "aborted"
	case "undo":
		if len(vs) < 2 {
			return nil, status.Errorf(codes.FailedPrecondition, "deployment %s: no previous version to go back to", req.Name)
		}
		prev := vs[len(vs)-2]
		cur.Rollout.Phase = "superseded"
		d := &runnelv1.Deployment{Spec: prev.Spec, Version: uint32(len(vs) + 1), Author: "test", CreatedMs: ms(Now),
			Resolved: prev.Resolved, Rollout: &runnelv1.RolloutStatus{Phase: "progressing", Steps: 1}}
		h.Deployments[req.Name] = append(vs, d)
		cur = d
	default:
		return nil, status.Errorf(codes.InvalidArgument, "rollout action %q: use pause, resume, abort or undo", req.Action)
	}
	h.audit("rollout "+req.Action, "deployment/"+req.Name, "", "")
	return cur, nil
}

// ---- Audit and tokens

// ListAudit implements runnelv1.FleetServer: entries after after_id,
// oldest first, at most limit (default 100, and never more than 100).
func (h *Hub) ListAudit(_ context.Context, req *runnelv1.ListAuditRequest) (*runnelv1.ListAuditResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	limit := int(req.Limit)
	if limit == 0 || limit > 100 {
		limit = 100
	}
	resp := &runnelv1.ListAuditResponse{}
	for _, e := range h.Audit {
		if e.Id > req.AfterId && len(resp.Entries) < limit {
			resp.Entries = append(resp.Entries, e)
		}
	}
	return resp, nil
}

// CreateToken implements runnelv1.FleetServer.
func (h *Hub) CreateToken(_ context.Context, req *runnelv1.CreateTokenRequest) (*runnelv1.CreateTokenResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch req.Role {
	case "viewer", "operator", "admin":
	default:
		return nil, status.Errorf(codes.InvalidArgument, "token %s: role %q: use viewer, operator or admin", req.Name, req.Role)
	}
	if h.Tokens[req.Name] != nil {
		return nil, status.Errorf(codes.AlreadyExists, "token %s exists already", req.Name)
	}
	tok := &runnelv1.Token{Name: req.Name, Role: req.Role, CreatedMs: ms(Now), CreatedBy: "test"}
	h.Tokens[req.Name] = tok
	h.audit("create token", "token/"+req.Name, "", req.Role)
	return &runnelv1.CreateTokenResponse{Token: tok, Secret: "rt_" + req.Name + "_s3cr3t"}, nil
}

// ListTokens implements runnelv1.FleetServer.
func (h *Hub) ListTokens(context.Context, *runnelv1.ListTokensRequest) (*runnelv1.ListTokensResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	resp := &runnelv1.ListTokensResponse{}
	for _, name := range sortedKeys(h.Tokens) {
		resp.Tokens = append(resp.Tokens, h.Tokens[name])
	}
	return resp, nil
}

// RevokeToken implements runnelv1.FleetServer.
func (h *Hub) RevokeToken(_ context.Context, req *runnelv1.RevokeTokenRequest) (*runnelv1.RevokeTokenResponse, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Tokens[req.Name] == nil {
		return nil, notFound("token %s not found", req.Name)
	}
	delete(h.Tokens, req.Name)
	h.audit("revoke token", "token/"+req.Name, "", "")
	return &runnelv1.RevokeTokenResponse{}, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
