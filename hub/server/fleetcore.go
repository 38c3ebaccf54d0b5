package server

import (
	"context"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// FleetCore is what the server needs of the control plane; *fleet.Fleet
// (hub/fleet) satisfies it. Calls take the caller's name (the API
// token's, for the audit log) where they change something. Errors wrap
// those of hub/fleet/fleeterr, which the server maps to gRPC codes:
// ErrNotFound → NotFound, ErrInvalid → InvalidArgument (a
// *fleeterr.SpecError adds a SpecProblems detail), ErrConflict →
// FailedPrecondition, ErrExists → AlreadyExists. Every refusal changes
// nothing.
type FleetCore interface {
	ApplyPipeline(who string, req *runnelv1.ApplyPipelineRequest) (*runnelv1.ApplyPipelineResponse, error)
	GetPipeline(name string) (*runnelv1.ManagedPipeline, error)
	ListPipelines() []*runnelv1.ManagedPipeline
	ListRevisions(name string) ([]*runnelv1.PipelineRevision, error)
	DiffRevisions(name string, from, to uint32) (*runnelv1.DiffRevisionsResponse, error)
	DeletePipeline(who, name string) error

	ListEdges(selector string) ([]*runnelv1.FleetEdge, error)
	GetEdge(id string) (*runnelv1.FleetEdge, error)
	LabelEdge(who string, req *runnelv1.LabelEdgeRequest) (*runnelv1.FleetEdge, error)

	ApplyDeployment(who string, req *runnelv1.ApplyDeploymentRequest) (*runnelv1.Deployment, error)
	GetDeployment(name string) (*runnelv1.Deployment, error)
	ListDeployments() []*runnelv1.Deployment
	DeploymentVersions(name string) ([]*runnelv1.Deployment, error)
	Rollout(who, name, action string) (*runnelv1.Deployment, error)

	Audit(afterID uint64, limit int) []*runnelv1.AuditEntry

	// Tokens: a token's secret is shown once; the store keeps its sum.
	CreateToken(who, name, role string) (*runnelv1.CreateTokenResponse, error)
	ListTokens() []*runnelv1.Token
	RevokeToken(who, name string) error
	// Authenticate returns the name and role of the API token whose
	// secret is given, or fleet.ErrNotFound.
	Authenticate(secret string) (name, role string, err error)

	// Connect registers an edge's control stream (the edge id the
	// interceptor authenticated; reg's edge_id must equal it) and returns
	// a channel of its desired sets: the current one at once, then each
	// change. The channel closes when ctx ends or when the same edge
	// connects again. notify, unless nil, is called after each set is put
	// on the channel and after it closes; it must not block (the server
	// takes the sets without a goroutine waiting on the channel). Status
	// records a report on that stream.
	Connect(ctx context.Context, edgeID string, reg *runnelv1.Register, notify func()) (<-chan *runnelv1.DesiredSet, error)
	Status(edgeID string, st *runnelv1.EdgeStatus) error
}
