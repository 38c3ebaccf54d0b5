package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/hub/fleet/fleeterr"
	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// fleetService serves the Fleet service: thin adapters to the FleetCore.
// The interceptor has checked the caller's role; each handler checks the
// request for what needs no state (names given, a known action) and
// leaves the rest to the core, whose errors fleetError maps.
type fleetService struct {
	runnelv1.UnimplementedFleetServer
	s *Server
}

// Audit page sizes: ListAuditRequest.limit 0 is defaultAuditLimit; more
// than maxAuditLimit is cut to it.
const (
	defaultAuditLimit = 100
	maxAuditLimit     = 1000
)

// rolloutActions are the actions RolloutRequest.action takes.
var rolloutActions = []string{"pause", "resume", "abort", "undo"}

// A SpecProblems detail carries at most maxSpecProblems problems with
// fields and messages of at most maxReasonBytes, and the status message
// lists at most maxListedProblems, so that the trailers stay small.
const (
	maxSpecProblems   = 1000
	maxListedProblems = 100
)

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

// needName refuses an empty name.
func needName(field, v string) error {
	if v == "" {
		return invalid("%s: empty; name the object", field)
	}
	return nil
}

// who is the caller's name for the audit log. A change always has one:
// the interceptor refuses a change without a token.
func who(ctx context.Context) (string, error) {
	if c := callerOf(ctx); c.name != "" {
		return c.name, nil
	}
	return "", status.Error(codes.Internal, "fleet: no authenticated caller") // not through the interceptor: a wiring bug
}

// fleetError maps the fleet's errors (fleeterr) to gRPC codes: NotFound,
// InvalidArgument (with a SpecProblems detail for a *fleeterr.SpecError),
// FailedPrecondition (ErrConflict), AlreadyExists; anything else is
// Internal, and logged.
func (s *Server) fleetError(method string, err error) error {
	if err == nil {
		return nil
	}
	if se := (*fleeterr.SpecError)(nil); errors.As(err, &se) {
		return specRefusal(err, se)
	}
	var code codes.Code
	switch {
	case errors.Is(err, fleeterr.ErrNotFound):
		code = codes.NotFound
	case errors.Is(err, fleeterr.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, fleeterr.ErrConflict):
		code = codes.FailedPrecondition
	case errors.Is(err, fleeterr.ErrExists):
		code = codes.AlreadyExists
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	default:
		s.log.Error("hub: fleet call failed", "method", method, "err", err)
		code = codes.Internal
	}
	return status.Error(code, err.Error())
}

// specRefusal is the InvalidArgument of a refused spec: the message lists
// the problems one per line (file:line:col: field: message), and a
// SpecProblems detail carries each.
func specRefusal(err error, se *fleeterr.SpecError) error {
	msg := err.Error()
	if n := len(se.Problems); n > maxListedProblems {
		lines := make([]string, maxListedProblems)
		for i, p := range se.Problems[:maxListedProblems] {
			lines[i] = cut(p.Error())
		}
		msg = fmt.Sprintf("invalid pipeline spec: %d problems, the first %d:\n%s\n... and %d more",
			n, maxListedProblems, strings.Join(lines, "\n"), n-maxListedProblems)
	}
	st := status.New(codes.InvalidArgument, msg)
	d := &runnelv1.SpecProblems{Problems: make([]*runnelv1.SpecProblem, 0, min(len(se.Problems), maxSpecProblems))}
	for _, p := range se.Problems[:min(len(se.Problems), maxSpecProblems)] {
		d.Problems = append(d.Problems, specProblem(p))
	}
	if ds, err := st.WithDetails(d); err == nil {
		st = ds
	}
	return st.Err()
}

func specProblem(p spec.Problem) *runnelv1.SpecProblem {
	return &runnelv1.SpecProblem{File: cut(p.File), Line: clampU32(p.Pos.Line), Column: clampU32(p.Pos.Column), Field: cut(p.Field), Message: cut(p.Msg)}
}

func clampU32(n int) uint32 { return uint32(max(0, min(int64(n), 1<<32-1))) }

// cut bounds a string of a detail to maxReasonBytes.
func cut(s string) string {
	if len(s) <= maxReasonBytes {
		return s
	}
	return strings.ToValidUTF8(s[:maxReasonBytes-3], "") + "..."
}

func (f *fleetService) ApplyPipeline(ctx context.Context, req *runnelv1.ApplyPipelineRequest) (*runnelv1.ApplyPipelineResponse, error) {
	switch {
	case strings.TrimSpace(req.Spec) == "":
		return nil, invalid("spec: empty; send the pipeline's YAML")
	case len(req.Spec) > spec.MaxSize:
		return nil, invalid("spec: %d bytes, at most %d", len(req.Spec), spec.MaxSize)
	}
	w, err := who(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := f.s.fleet.ApplyPipeline(w, req)
	return resp, f.s.fleetError("ApplyPipeline", err)
}

func (f *fleetService) GetPipeline(ctx context.Context, req *runnelv1.GetPipelineRequest) (*runnelv1.ManagedPipeline, error) {
	if err := needName("name", req.Name); err != nil {
		return nil, err
	}
	p, err := f.s.fleet.GetPipeline(req.Name)
	return p, f.s.fleetError("GetPipeline", err)
}

func (f *fleetService) ListManagedPipelines(ctx context.Context, _ *runnelv1.ListManagedPipelinesRequest) (*runnelv1.ListManagedPipelinesResponse, error) {
	return &runnelv1.ListManagedPipelinesResponse{Pipelines: f.s.fleet.ListPipelines()}, nil
}

func (f *fleetService) ListRevisions(ctx context.Context, req *runnelv1.ListRevisionsRequest) (*runnelv1.ListRevisionsResponse, error) {
	if err := needName("name", req.Name); err != nil {
		return nil, err
	}
	rs, err := f.s.fleet.ListRevisions(req.Name)
	if err != nil {
		return nil, f.s.fleetError("ListRevisions", err)
	}
	return &runnelv1.ListRevisionsResponse{Revisions: rs}, nil
}

func (f *fleetService) DiffRevisions(ctx context.Context, req *runnelv1.DiffRevisionsRequest) (*runnelv1.DiffRevisionsResponse, error) {
	if err := needName("name", req.Name); err != nil {
		return nil, err
	}
	d, err := f.s.fleet.DiffRevisions(req.Name, req.From, req.To)
	return d, f.s.fleetError("DiffRevisions", err)
}

func (f *fleetService) DeletePipeline(ctx context.Context, req *runnelv1.DeletePipelineRequest) (*runnelv1.DeletePipelineResponse, error) {
	if err := needName("name", req.Name); err != nil {
		return nil, err
	}
	w, err := who(ctx)
	if err != nil {
		return nil, err
	}
	if err := f.s.fleet.DeletePipeline(w, req.Name); err != nil {
		return nil, f.s.fleetError("DeletePipeline", err)
	}
	return &runnelv1.DeletePipelineResponse{}, nil
}

func (f *fleetService) ListFleetEdges(ctx context.Context, req *runnelv1.ListFleetEdgesRequest) (*runnelv1.ListFleetEdgesResponse, error) {
	es, err := f.s.fleet.ListEdges(req.Selector)
	if err != nil {
		return nil, f.s.fleetError("ListFleetEdges", err)
	}
	return &runnelv1.ListFleetEdgesResponse{Edges: es}, nil
}

func (f *fleetService) GetFleetEdge(ctx context.Context, req *runnelv1.GetFleetEdgeRequest) (*runnelv1.FleetEdge, error) {
	if err := needName("edge_id", req.EdgeId); err != nil {
		return nil, err
	}
	e, err := f.s.fleet.GetEdge(req.EdgeId)
	return e, f.s.fleetError("GetFleetEdge", err)
}

func (f *fleetService) LabelEdge(ctx context.Context, req *runnelv1.LabelEdgeRequest) (*runnelv1.FleetEdge, error) {
	if err := needName("edge_id", req.EdgeId); err != nil {
		return nil, err
	}
	if len(req.Set) == 0 && len(req.Remove) == 0 {
		return nil, invalid("set, remove: both empty; name a label to set or remove")
	}
	if _, ok := req.Set[""]; ok {
		return nil, invalid("set: a label with an empty key")
	}
	for i, k := range req.Remove {
		switch _, both := req.Set[k]; {
		case k == "":
			return nil, invalid("remove[%d]: empty label key", i)
		case both:
			return nil, invalid("remove[%d]: label %q is also in set; set it or remove it", i, k)
		}
	}
	w, err := who(ctx)
	if err != nil {
		return nil, err
	}
	e, err := f.s.fleet.LabelEdge(w, req)
	return e, f.s.fleetError("LabelEdge", err)
}

func (f *fleetService) ApplyDeployment(ctx context.Context, req *runnelv1.ApplyDeploymentRequest) (*runnelv1.Deployment, error) {
	sp := req.Spec
	if sp == nil {
		return nil, invalid("spec: missing; send the deployment's name, selector, pipelines and strategy")
	}
	if err := needName("spec.name", sp.Name); err != nil {
		return nil, err
	}
	for i, p := range sp.Pipelines {
		if p == nil || p.Name == "" {
			return nil, invalid("spec.pipelines[%d].name: empty; name a pipeline", i)
		}
	}
	w, err := who(ctx)
	if err != nil {
		return nil, err
	}
	d, err := f.s.fleet.ApplyDeployment(w, req)
	return d, f.s.fleetError("ApplyDeployment", err)
}

func (f *fleetService) GetDeployment(ctx context.Context, req *runnelv1.GetDeploymentRequest) (*runnelv1.Deployment, error) {
	if err := needName("name", req.Name); err != nil {
		return nil, err
	}
	d, err := f.s.fleet.GetDeployment(req.Name)
	return d, f.s.fleetError("GetDeployment", err)
}

func (f *fleetService) ListDeployments(ctx context.Context, _ *runnelv1.ListDeploymentsRequest) (*runnelv1.ListDeploymentsResponse, error) {
	return &runnelv1.ListDeploymentsResponse{Deployments: f.s.fleet.ListDeployments()}, nil
}

func (f *fleetService) ListDeploymentVersions(ctx context.Context, req *runnelv1.GetDeploymentRequest) (*runnelv1.ListDeploymentsResponse, error) {
	if err := needName("name", req.Name); err != nil {
		return nil, err
	}
	ds, err := f.s.fleet.DeploymentVersions(req.Name)
	if err != nil {
		return nil, f.s.fleetError("ListDeploymentVersions", err)
	}
	return &runnelv1.ListDeploymentsResponse{Deployments: ds}, nil
}

func (f *fleetService) Rollout(ctx context.Context, req *runnelv1.RolloutRequest) (*runnelv1.Deployment, error) {
	if err := needName("name", req.Name); err != nil {
		return nil, err
	}
	if !contains(rolloutActions, req.Action) {
		return nil, invalid("action: %q; want one of %s", req.Action, strings.Join(rolloutActions, ", "))
	}
	w, err := who(ctx)
	if err != nil {
		return nil, err
	}
	d, err := f.s.fleet.Rollout(w, req.Name, req.Action)
	return d, f.s.fleetError("Rollout", err)
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

func (f *fleetService) ListAudit(ctx context.Context, req *runnelv1.ListAuditRequest) (*runnelv1.ListAuditResponse, error) {
	limit := int(req.Limit)
	switch {
	case limit == 0:
		limit = defaultAuditLimit
	case limit > maxAuditLimit:
		limit = maxAuditLimit
	}
	return &runnelv1.ListAuditResponse{Entries: f.s.fleet.Audit(req.AfterId, limit)}, nil
}

func (f *fleetService) CreateToken(ctx context.Context, req *runnelv1.CreateTokenRequest) (*runnelv1.CreateTokenResponse, error) {
	if err := needName("name", req.Name); err != nil {
		return nil, err
	}
	if req.Name == bootstrapName {
		return nil, invalid("name: %q is the configured API token's name in the audit log; choose another", bootstrapName)
	}
	if _, ok := parseRole(req.Role); !ok {
		return nil, invalid("role: %q; want viewer, operator or admin", req.Role)
	}
	w, err := who(ctx)
	if err != nil {
		return nil, err
	}
	resp, err := f.s.fleet.CreateToken(w, req.Name, req.Role)
	return resp, f.s.fleetError("CreateToken", err)
}

func (f *fleetService) ListTokens(ctx context.Context, _ *runnelv1.ListTokensRequest) (*runnelv1.ListTokensResponse, error) {
	return &runnelv1.ListTokensResponse{Tokens: f.s.fleet.ListTokens()}, nil
}

func (f *fleetService) RevokeToken(ctx context.Context, req *runnelv1.RevokeTokenRequest) (*runnelv1.RevokeTokenResponse, error) {
	if err := needName("name", req.Name); err != nil {
		return nil, err
	}
	w, err := who(ctx)
	if err != nil {
		return nil, err
	}
	if err := f.s.fleet.RevokeToken(w, req.Name); err != nil {
		return nil, f.s.fleetError("RevokeToken", err)
	}
	return &runnelv1.RevokeTokenResponse{}, nil
}
