package server_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/runnel-io/runnel/hub/fleet/fleeterr"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// fakeFleet is an in-memory FleetCore that records every call (method,
// caller, arguments), answers with canned objects, and returns errs[method]
// when set. Its control streams follow the contract: Connect replaces an
// edge's earlier stream (closing its channel) and a stream's channel
// closes when its context ends.
type fakeFleet struct {
	mu       sync.Mutex
	calls    []fleetCall
	errs     map[string]error
	tokens   map[string][2]string // secret -> name, role
	edges    []*runnelv1.FleetEdge
	deps     []*runnelv1.Deployment
	conns    map[string]*fakeConn
	statuses []edgeStatus
	changed  chan struct{} // closed and replaced at every call and stream's end
}

type fleetCall struct {
	method, who string
	args        []any
}

type edgeStatus struct {
	edge string
	st   *runnelv1.EdgeStatus
}

type fakeConn struct {
	ch     chan *runnelv1.DesiredSet
	notify func()
	closed bool
}

// end closes c's channel; the caller holds the fleet's lock.
func (c *fakeConn) end() {
	c.closed = true
	close(c.ch)
	if c.notify != nil {
		c.notify()
	}
}

func newFakeFleet() *fakeFleet {
	return &fakeFleet{
		errs: map[string]error{},
		tokens: map[string][2]string{"viewer-secret-1": {"vera", "viewer"}, "operator-secret": {"otto", "operator"}, "admin-secret-12": {"ada", "admin"},
			"strange-secret1": {"sam", "root"}},
		conns:   map[string]*fakeConn{},
		changed: make(chan struct{}),
	}
}

// call records a call and returns the error set for the method.
func (f *fakeFleet) call(method, who string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fleetCall{method, who, args})
	close(f.changed)
	f.changed = make(chan struct{})
	return f.errs[method]
}

func (f *fakeFleet) setErr(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs[method] = err
}

// count is how many calls of method the core saw ("" : every method).
func (f *fakeFleet) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if method == "" || c.method == method {
			n++
		}
	}
	return n
}

// last returns the latest call of method.
func (f *fakeFleet) last(method string) (fleetCall, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.calls) - 1; i >= 0; i-- {
		if f.calls[i].method == method {
			return f.calls[i], true
		}
	}
	return fleetCall{}, false
}

func (f *fakeFleet) ApplyPipeline(who string, req *runnelv1.ApplyPipelineRequest) (*runnelv1.ApplyPipelineResponse, error) {
	if err := f.call("ApplyPipeline", who, req.Spec, req.File, req.DryRun); err != nil {
		return nil, err
	}
	return &runnelv1.ApplyPipelineResponse{Revision: &runnelv1.PipelineRevision{Name: "temps", Revision: 1, Author: who, Spec: req.Spec}, Created: true}, nil
}

func (f *fakeFleet) GetPipeline(name string) (*runnelv1.ManagedPipeline, error) {
	if err := f.call("GetPipeline", "", name); err != nil {
		return nil, err
	}
	return &runnelv1.ManagedPipeline{Name: name, Latest: 1}, nil
}

func (f *fakeFleet) ListPipelines() []*runnelv1.ManagedPipeline {
	f.call("ListPipelines", "")
	return []*runnelv1.ManagedPipeline{{Name: "temps", Latest: 2}}
}

func (f *fakeFleet) ListRevisions(name string) ([]*runnelv1.PipelineRevision, error) {
	if err := f.call("ListRevisions", "", name); err != nil {
		return nil, err
	}
	return []*runnelv1.PipelineRevision{{Name: name, Revision: 1}, {Name: name, Revision: 2}}, nil
}

func (f *fakeFleet) DiffRevisions(name string, from, to uint32) (*runnelv1.DiffRevisionsResponse, error) {
	if err := f.call("DiffRevisions", "", name, from, to); err != nil {
		return nil, err
	}
	return &runnelv1.DiffRevisionsResponse{Diff: fmt.Sprintf("--- %d\n+++ %d\n", from, to), Compatible: true}, nil
}

func (f *fakeFleet) DeletePipeline(who, name string) error {
	return f.call("DeletePipeline", who, name)
}

func (f *fakeFleet) ListEdges(selector string) ([]*runnelv1.FleetEdge, error) {
	if err := f.call("ListEdges", "", selector); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.edges, nil
}

func (f *fakeFleet) GetEdge(id string) (*runnelv1.FleetEdge, error) {
	if err := f.call("GetEdge", "", id); err != nil {
		return nil, err
	}
	return &runnelv1.FleetEdge{EdgeId: id}, nil
}

func (f *fakeFleet) LabelEdge(who string, req *runnelv1.LabelEdgeRequest) (*runnelv1.FleetEdge, error) {
	if err := f.call("LabelEdge", who, req.EdgeId, req.Set, req.Remove); err != nil {
		return nil, err
	}
	return &runnelv1.FleetEdge{EdgeId: req.EdgeId, HubLabels: req.Set}, nil
}

func (f *fakeFleet) ApplyDeployment(who string, req *runnelv1.ApplyDeploymentRequest) (*runnelv1.Deployment, error) {
	if err := f.call("ApplyDeployment", who, req.Spec.GetName(), req.DryRun); err != nil {
		return nil, err
	}
	return &runnelv1.Deployment{Spec: req.Spec, Version: 1, Author: who}, nil
}

func (f *fakeFleet) GetDeployment(name string) (*runnelv1.Deployment, error) {
	if err := f.call("GetDeployment", "", name); err != nil {
		return nil, err
	}
	return &runnelv1.Deployment{Spec: &runnelv1.DeploymentSpec{Name: name}, Version: 3}, nil
}

func (f *fakeFleet) ListDeployments() []*runnelv1.Deployment {
	f.call("ListDeployments", "")
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deps
}

func (f *fakeFleet) DeploymentVersions(name string) ([]*runnelv1.Deployment, error) {
	if err := f.call("DeploymentVersions", "", name); err != nil {
		return nil, err
	}
	return []*runnelv1.Deployment{{Spec: &runnelv1.DeploymentSpec{Name: name}, Version: 1}}, nil
}

func (f *fakeFleet) Rollout(who, name, action string) (*runnelv1.Deployment, error) {
	if err := f.call("Rollout", who, name, action); err != nil {
		return nil, err
	}
	return &runnelv1.Deployment{Spec: &runnelv1.DeploymentSpec{Name: name}, Rollout: &runnelv1.RolloutStatus{Phase: action + "d"}}, nil
}

func (f *fakeFleet) Audit(afterID uint64, limit int) []*runnelv1.AuditEntry {
	f.call("Audit", "", afterID, limit)
	return []*runnelv1.AuditEntry{{Id: afterID + 1, Who: "ada", Action: "apply"}}
}

func (f *fakeFleet) CreateToken(who, name, role string) (*runnelv1.CreateTokenResponse, error) {
	if err := f.call("CreateToken", who, name, role); err != nil {
		return nil, err
	}
	return &runnelv1.CreateTokenResponse{Token: &runnelv1.Token{Name: name, Role: role, CreatedBy: who}, Secret: "s3cret"}, nil
}

func (f *fakeFleet) ListTokens() []*runnelv1.Token {
	f.call("ListTokens", "")
	return []*runnelv1.Token{{Name: "vera", Role: "viewer"}}
}

func (f *fakeFleet) RevokeToken(who, name string) error {
	return f.call("RevokeToken", who, name)
}

// Authenticate is not recorded as a call: it is the interceptor's, and
// tests count what reaches the core past it.
func (f *fakeFleet) Authenticate(secret string) (string, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.errs["Authenticate"]; err != nil {
		return "", "", err
	}
	t, ok := f.tokens[secret]
	if !ok {
		return "", "", fmt.Errorf("fleet: token: %w", fleeterr.ErrNotFound)
	}
	return t[0], t[1], nil
}

func (f *fakeFleet) Connect(ctx context.Context, edgeID string, reg *runnelv1.Register, notify func()) (<-chan *runnelv1.DesiredSet, error) {
	// The stream is in place before the call is recorded, so that a test
	// that waits for the call can push at once.
	f.mu.Lock()
	err := f.errs["Connect"]
	var c *fakeConn
	if err == nil {
		if old := f.conns[edgeID]; old != nil && !old.closed {
			old.end()
		}
		c = &fakeConn{ch: make(chan *runnelv1.DesiredSet, 16), notify: notify}
		f.conns[edgeID] = c
		context.AfterFunc(ctx, func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			if !c.closed {
				c.end()
			}
			close(f.changed)
			f.changed = make(chan struct{})
		})
	}
	f.mu.Unlock()
	f.call("Connect", edgeID, reg.EdgeId, reg.Labels)
	if err != nil {
		return nil, err
	}
	return c.ch, nil
}

func (f *fakeFleet) Status(edgeID string, st *runnelv1.EdgeStatus) error {
	f.mu.Lock()
	err := f.errs["Status"]
	if err == nil {
		f.statuses = append(f.statuses, edgeStatus{edgeID, st})
	}
	f.mu.Unlock()
	f.call("Status", edgeID, st)
	return err
}

// push hands ds to edge's current stream; false if it has none open.
func (f *fakeFleet) push(edge string, ds *runnelv1.DesiredSet) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.conns[edge]
	if c == nil || c.closed {
		return false
	}
	c.ch <- ds
	if c.notify != nil {
		c.notify()
	}
	return true
}

// queued returns how many sets edge's current stream has not taken.
func (f *fakeFleet) queued(edge string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.conns[edge]; c != nil && !c.closed {
		return len(c.ch)
	}
	return -1
}

// waitFor waits until cond holds (checked after every call) or ctx ends.
func (f *fakeFleet) waitFor(ctx context.Context, cond func() bool) bool {
	for {
		f.mu.Lock()
		ch := f.changed
		f.mu.Unlock()
		if cond() {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return cond()
		}
	}
}

func (f *fakeFleet) statusesOf() []edgeStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]edgeStatus(nil), f.statuses...)
}
