package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/hub/fleet/fleeterr"
	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

const bootstrapToken = "bootstrap-token-0123"

// startFleet starts a server with ff as its fleet and the bootstrap API
// token (mod may change both).
func startFleet(t *testing.T, ff *fakeFleet, mod func(*server.Config)) *env {
	t.Helper()
	return start(t, newFakeCore(testPipeline(t)), func(c *server.Config) {
		c.Fleet, c.APIToken = ff, bootstrapToken
		if mod != nil {
			mod(c)
		}
	})
}

// fleetMethod is one Fleet method: the role it needs, a valid call, and
// the FleetCore method it reaches.
type fleetMethod struct {
	name  string
	need  string // viewer, operator, admin
	core  string // the fakeFleet method it calls
	who   bool   // a change: the core gets the caller's name
	call  func(context.Context, runnelv1.FleetClient) error
	rest  [2]string // method and path of the REST route
	rbody string
}

func fleetMethods() []fleetMethod {
	e := func(_ any, err error) error { return err }
	return []fleetMethod{
		{"ApplyPipeline", "operator", "ApplyPipeline", true, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: testSpec, File: "temps.yaml"}))
		}, [2]string{"POST", "/v1/fleet/pipelines"}, `{"spec":"name: temps\n"}`},
		{"GetPipeline", "viewer", "GetPipeline", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.GetPipeline(ctx, &runnelv1.GetPipelineRequest{Name: "temps"}))
		}, [2]string{"GET", "/v1/fleet/pipelines/temps"}, ""},
		{"ListManagedPipelines", "viewer", "ListPipelines", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.ListManagedPipelines(ctx, &runnelv1.ListManagedPipelinesRequest{}))
		}, [2]string{"GET", "/v1/fleet/pipelines"}, ""},
		{"ListRevisions", "viewer", "ListRevisions", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.ListRevisions(ctx, &runnelv1.ListRevisionsRequest{Name: "temps"}))
		}, [2]string{"GET", "/v1/fleet/pipelines/temps/revisions"}, ""},
		{"DiffRevisions", "viewer", "DiffRevisions", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.DiffRevisions(ctx, &runnelv1.DiffRevisionsRequest{Name: "temps", From: 1, To: 2}))
		}, [2]string{"GET", "/v1/fleet/pipelines/temps/diff?from=1&to=2"}, ""},
		{"DeletePipeline", "operator", "DeletePipeline", true, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.DeletePipeline(ctx, &runnelv1.DeletePipelineRequest{Name: "temps"}))
		}, [2]string{"DELETE", "/v1/fleet/pipelines/temps"}, ""},
		{"ListFleetEdges", "viewer", "ListEdges", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{Selector: "site=plant-7"}))
		}, [2]string{"GET", "/v1/fleet/edges?selector=site%3Dplant-7"}, ""},
		{"GetFleetEdge", "viewer", "GetEdge", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.GetFleetEdge(ctx, &runnelv1.GetFleetEdgeRequest{EdgeId: "gw-1"}))
		}, [2]string{"GET", "/v1/fleet/edges/gw-1"}, ""},
		{"LabelEdge", "operator", "LabelEdge", true, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.LabelEdge(ctx, &runnelv1.LabelEdgeRequest{EdgeId: "gw-1", Set: map[string]string{"site": "plant-7"}}))
		}, [2]string{"POST", "/v1/fleet/edges/gw-1:label"}, `{"set":{"site":"plant-7"}}`},
		{"ApplyDeployment", "operator", "ApplyDeployment", true, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "temps-all",
				Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}}}}))
		}, [2]string{"POST", "/v1/fleet/deployments"}, `{"spec":{"name":"temps-all","pipelines":[{"name":"temps"}]}}`},
		{"GetDeployment", "viewer", "GetDeployment", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.GetDeployment(ctx, &runnelv1.GetDeploymentRequest{Name: "temps-all"}))
		}, [2]string{"GET", "/v1/fleet/deployments/temps-all"}, ""},
		{"ListDeployments", "viewer", "ListDeployments", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.ListDeployments(ctx, &runnelv1.ListDeploymentsRequest{}))
		}, [2]string{"GET", "/v1/fleet/deployments"}, ""},
		{"ListDeploymentVersions", "viewer", "DeploymentVersions", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.ListDeploymentVersions(ctx, &runnelv1.GetDeploymentRequest{Name: "temps-all"}))
		}, [2]string{"GET", "/v1/fleet/deployments/temps-all/versions"}, ""},
		{"Rollout", "operator", "Rollout", true, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.Rollout(ctx, &runnelv1.RolloutRequest{Name: "temps-all", Action: "pause"}))
		}, [2]string{"POST", "/v1/fleet/deployments/temps-all:rollout"}, `{"action":"pause"}`},
		{"ListAudit", "viewer", "Audit", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.ListAudit(ctx, &runnelv1.ListAuditRequest{}))
		}, [2]string{"GET", "/v1/fleet/audit"}, ""},
		{"CreateToken", "admin", "CreateToken", true, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.CreateToken(ctx, &runnelv1.CreateTokenRequest{Name: "ci", Role: "operator"}))
		}, [2]string{"POST", "/v1/fleet/tokens"}, `{"name":"ci","role":"operator"}`},
		{"ListTokens", "admin", "ListTokens", false, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.ListTokens(ctx, &runnelv1.ListTokensRequest{}))
		}, [2]string{"GET", "/v1/fleet/tokens"}, ""},
		{"RevokeToken", "admin", "RevokeToken", true, func(ctx context.Context, c runnelv1.FleetClient) error {
			return e(c.RevokeToken(ctx, &runnelv1.RevokeTokenRequest{Name: "ci"}))
		}, [2]string{"DELETE", "/v1/fleet/tokens/ci"}, ""},
	}
}

// TestFleetMethodsCovered: the table above has every method of the Fleet
// service, so that the role tests cover a method added later.
func TestFleetMethodsCovered(t *testing.T) {
	have := map[string]bool{}
	for _, m := range fleetMethods() {
		have[m.name] = true
	}
	for _, m := range runnelv1.Fleet_ServiceDesc.Methods {
		if !have[m.MethodName] {
			t.Errorf("Fleet.%s is not in fleetMethods", m.MethodName)
		}
	}
	if len(have) != len(runnelv1.Fleet_ServiceDesc.Methods) {
		t.Errorf("fleetMethods has %d methods, the service %d", len(have), len(runnelv1.Fleet_ServiceDesc.Methods))
	}
}

var roleRank = map[string]int{"viewer": 1, "operator": 2, "admin": 3}

// TestFleetRoles calls every Fleet method with every kind of token, over
// gRPC and REST: a token of a role at least the method's reaches the core
// (with the token's name as who, for a change); any other is refused with
// the code that says why, and the core sees nothing of it.
func TestFleetRoles(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	client := runnelv1.NewFleetClient(e.conn)
	type tok struct {
		name, secret string
		role         string // "" : not an API token
		code         codes.Code
		http         int
	}
	toks := []tok{
		{"no token", "", "", codes.Unauthenticated, 401},
		{"unknown token", "not-a-token-at-all", "", codes.Unauthenticated, 401},
		{"edge token", "token-1", "", codes.PermissionDenied, 403},
		{"vera", "viewer-secret-1", "viewer", 0, 0},
		{"otto", "operator-secret", "operator", 0, 0},
		{"ada", "admin-secret-12", "admin", 0, 0},
		{"api", bootstrapToken, "admin", 0, 0},
	}
	for _, m := range fleetMethods() {
		for _, tk := range toks {
			allowed := tk.role != "" && roleRank[tk.role] >= roleRank[m.need]
			want, wantHTTP := tk.code, tk.http
			if tk.role != "" && !allowed {
				want, wantHTTP = codes.PermissionDenied, 403
			}
			t.Run(m.name+"/"+tk.name, func(t *testing.T) {
				ctx := testCtx(t)
				if tk.secret != "" {
					ctx = withToken(ctx, tk.secret)
				}
				before := ff.count(m.core)
				err := m.call(ctx, client)
				got := ff.count(m.core) - before
				if allowed {
					if err != nil || got != 1 {
						t.Fatalf("gRPC: %v, %d core calls; want OK and 1", err, got)
					}
					if c, _ := ff.last(m.core); m.who && c.who != tk.name {
						t.Errorf("who %q, want %q", c.who, tk.name)
					}
				} else {
					wantCode(t, err, want, "gRPC")
					if got != 0 {
						t.Errorf("a refused call reached the core %d times", got)
					}
					if want == codes.PermissionDenied && tk.role != "" && !strings.Contains(err.Error(), "needs role "+m.need) {
						t.Errorf("refusal %q does not name the role needed", err)
					}
				}

				before = ff.count(m.core)
				code, body := e.do(t, m.rest[0], m.rest[1], tk.secret, m.rbody)
				got = ff.count(m.core) - before
				switch {
				case allowed && (code != 200 || got != 1):
					t.Errorf("REST %s %s: %d %s, %d core calls; want 200 and 1", m.rest[0], m.rest[1], code, body, got)
				case !allowed && (code != wantHTTP || got != 0):
					t.Errorf("REST %s %s: %d %s, %d core calls; want %d and 0", m.rest[0], m.rest[1], code, body, got, wantHTTP)
				}
			})
		}
	}
}

// do sends an HTTP request with an optional token and JSON body.
func (e *env) do(t *testing.T, method, path, token, body string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, e.base+path, r)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestEdgeTokenScope: an edge token reads nothing (results, health,
// pipelines, edges, over gRPC and REST), and API tokens open no edge
// stream.
func TestEdgeTokenScope(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	ctx := withToken(testCtx(t), "token-1")
	_, err := runnelv1.NewResultsClient(e.conn).ListEdges(ctx, &runnelv1.ListEdgesRequest{})
	wantCode(t, err, codes.PermissionDenied, "Results.ListEdges with an edge token")
	_, err = runnelv1.NewResultsClient(e.conn).QueryResults(ctx, &runnelv1.QueryResultsRequest{Pipeline: "temps"})
	wantCode(t, err, codes.PermissionDenied, "Results.QueryResults with an edge token")
	_, err = runnelv1.NewHealthClient(e.conn).Check(ctx, &runnelv1.HealthCheckRequest{})
	wantCode(t, err, codes.PermissionDenied, "Health.Check with an edge token")
	for _, path := range []string{"/v1/edges", "/v1/pipelines/temps/results", "/v1/pipelines/temps/results/events", "/v1/health", "/v1/fleet/edges/gw-1"} {
		if code, body := e.get(t, path, "token-1"); code != 403 {
			t.Errorf("GET %s with an edge token: %d %s, want 403", path, code, body)
		}
	}

	for _, tok := range []string{bootstrapToken, "admin-secret-12", "viewer-secret-1"} {
		ctx := withToken(testCtx(t), tok)
		s, err := runnelv1.NewUplinkClient(e.edge).Sync(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s.Send(hello("gw-1", 1, 1))
		wantCode(t, recvErr(s), codes.PermissionDenied, "uplink with an API token")
		c, err := runnelv1.NewControlClient(e.edge).Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Send(register("gw-1"))
		_, err = c.Recv()
		wantCode(t, err, codes.PermissionDenied, "control stream with an API token")
		if err != nil && !strings.Contains(err.Error(), "edge's token") {
			t.Errorf("refusal %q does not say what the stream takes", err)
		}
	}
	if n := ff.count(""); n != 0 {
		t.Errorf("%d calls reached the fleet", n)
	}
}

// TestFleetOpenReads: a fleet without a configured API token serves
// reads to anyone and refuses changes with a message that says to set
// auth.api_token; tokens the fleet knows still work.
func TestFleetOpenReads(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, func(c *server.Config) { c.APIToken = "" })
	client := runnelv1.NewFleetClient(e.conn)
	for _, m := range fleetMethods() {
		before := ff.count(m.core)
		err := m.call(testCtx(t), client)
		got := ff.count(m.core) - before
		if m.need == "viewer" {
			if err != nil || got != 1 {
				t.Errorf("%s without a token: %v, %d core calls; want OK", m.name, err, got)
			}
			continue
		}
		wantCode(t, err, codes.Unauthenticated, m.name+" without a token")
		if !strings.Contains(err.Error(), "auth.api_token") || got != 0 {
			t.Errorf("%s: %v, %d core calls; want a refusal naming auth.api_token, and none", m.name, err, got)
		}
	}
	if code, body := e.do(t, "POST", "/v1/fleet/pipelines", "", `{"spec":"x"}`); code != 401 || !strings.Contains(body, "auth.api_token") {
		t.Errorf("REST change without a token: %d %s", code, body)
	}
	// The results stay open too, as without a fleet.
	if code, body := e.get(t, "/v1/pipelines", ""); code != 200 {
		t.Errorf("GET /v1/pipelines: %d %s", code, body)
	}
	// A token given is checked: an operator's works, an unknown one not.
	if _, err := client.Rollout(withToken(testCtx(t), "operator-secret"), &runnelv1.RolloutRequest{Name: "d", Action: "resume"}); err != nil {
		t.Errorf("operator without a bootstrap token: %v", err)
	}
	_, err := client.GetPipeline(withToken(testCtx(t), "stale-token-xyz"), &runnelv1.GetPipelineRequest{Name: "temps"})
	wantCode(t, err, codes.Unauthenticated, "an unknown token on an open hub")
}

// TestNoFleet: without a fleet both services answer Unimplemented, over
// gRPC and REST, whatever the token.
func TestNoFleet(t *testing.T) {
	e := start(t, newFakeCore(testPipeline(t)), func(c *server.Config) { c.APIToken = bootstrapToken })
	client := runnelv1.NewFleetClient(e.conn)
	for _, m := range fleetMethods() {
		for _, tok := range []string{"", bootstrapToken} {
			ctx := testCtx(t)
			if tok != "" {
				ctx = withToken(ctx, tok)
			}
			err := m.call(ctx, client)
			wantCode(t, err, codes.Unimplemented, m.name)
			if !strings.Contains(err.Error(), "the hub has no fleet store") {
				t.Errorf("%s: %v does not say why", m.name, err)
			}
		}
	}
	if code, body := e.do(t, "GET", "/v1/fleet/pipelines", bootstrapToken, ""); code != 501 || !strings.Contains(body, "no fleet store") {
		t.Errorf("REST: %d %s, want 501", code, body)
	}
	c, err := runnelv1.NewControlClient(e.edge).Connect(withToken(testCtx(t), "token-1"))
	if err != nil {
		t.Fatal(err)
	}
	c.Send(register("gw-1"))
	_, err = c.Recv()
	wantCode(t, err, codes.Unimplemented, "control stream")
}

// TestFleetErrors: the fleet's errors reach gRPC and REST clients with
// stable codes; a refused spec carries every problem in the message and
// in a SpecProblems detail.
func TestFleetErrors(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	client := runnelv1.NewFleetClient(e.conn)
	ctx := withToken(testCtx(t), "operator-secret")
	for _, tc := range []struct {
		err  error
		code codes.Code
		http int
	}{
		{fmt.Errorf("fleet: pipeline %q: %w", "temps", fleeterr.ErrNotFound), codes.NotFound, 404},
		{fmt.Errorf("fleet: revision 0: %w", fleeterr.ErrInvalid), codes.InvalidArgument, 400},
		{fmt.Errorf("fleet: pipeline temps: deployed by temps-all: %w", fleeterr.ErrConflict), codes.FailedPrecondition, 400},
		{fmt.Errorf("fleet: token ci: %w", fleeterr.ErrExists), codes.AlreadyExists, 409},
		{errors.New("fleet: store: disk I/O error"), codes.Internal, 500},
	} {
		ff.setErr("DeletePipeline", tc.err)
		_, err := client.DeletePipeline(ctx, &runnelv1.DeletePipelineRequest{Name: "temps"})
		wantCode(t, err, tc.code, tc.err.Error())
		if !strings.Contains(status.Convert(err).Message(), tc.err.Error()) {
			t.Errorf("message %q, want %q", status.Convert(err).Message(), tc.err)
		}
		code, body := e.do(t, "DELETE", "/v1/fleet/pipelines/temps", "operator-secret", "")
		var rb struct {
			Code    int
			Message string
		}
		if err := json.Unmarshal([]byte(body), &rb); err != nil || code != tc.http || rb.Code != int(tc.code) || rb.Message != tc.err.Error() {
			t.Errorf("REST: %d %s, want %d with code %d", code, body, tc.http, tc.code)
		}
	}

	se := &fleeterr.SpecError{Problems: []spec.Problem{
		{File: "temps.yaml", Pos: spec.Pos{Line: 3, Column: 7}, Field: "window.tumbling", Msg: "not a duration"},
		{File: "temps.yaml", Pos: spec.Pos{Line: 5, Column: 3}, Field: "aggregates.n", Msg: `unknown function "cnt"`},
	}}
	ff.setErr("ApplyPipeline", fmt.Errorf("fleet: pipeline temps: %w", se))
	_, err := client.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: testSpec})
	wantCode(t, err, codes.InvalidArgument, "bad spec")
	wantLines := "temps.yaml:3:7: window.tumbling: not a duration\ntemps.yaml:5:3: aggregates.n: unknown function \"cnt\""
	if msg := status.Convert(err).Message(); !strings.HasSuffix(msg, "\n"+wantLines) {
		t.Errorf("message %q does not list the problems one per line", msg)
	}
	var sp *runnelv1.SpecProblems
	for _, d := range status.Convert(err).Details() {
		if p, ok := d.(*runnelv1.SpecProblems); ok {
			sp = p
		}
	}
	if sp == nil || len(sp.Problems) != 2 || sp.Problems[1].Line != 5 || sp.Problems[1].Column != 3 ||
		sp.Problems[1].Field != "aggregates.n" || sp.Problems[0].File != "temps.yaml" || sp.Problems[0].Message != "not a duration" {
		t.Errorf("SpecProblems detail: %v", sp)
	}

	code, body := e.do(t, "POST", "/v1/fleet/pipelines", "operator-secret", `{"spec":"name: temps\n"}`)
	var rb struct {
		Code    int
		Message string
		Details []struct {
			Type     string `json:"@type"`
			Problems []struct {
				File    string
				Line    int
				Column  int
				Field   string
				Message string
			}
		}
	}
	if err := json.Unmarshal([]byte(body), &rb); err != nil || code != 400 || rb.Code != 3 || !strings.Contains(rb.Message, wantLines) ||
		len(rb.Details) != 1 || rb.Details[0].Type != "type.googleapis.com/runnel.v1.SpecProblems" || len(rb.Details[0].Problems) != 2 ||
		rb.Details[0].Problems[0].Line != 3 || rb.Details[0].Problems[0].Column != 7 || rb.Details[0].Problems[1].Message != `unknown function "cnt"` {
		t.Errorf("REST spec refusal: %d %s (%v)", code, body, err)
	}
}

// TestSpecProblemsBounded: a spec with very many problems is refused with
// a message that lists the first ones and says how many more there are,
// and a detail of at most 1000.
func TestSpecProblemsBounded(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	se := &fleeterr.SpecError{}
	for i := range 1500 {
		se.Problems = append(se.Problems, spec.Problem{File: "big.yaml", Pos: spec.Pos{Line: i + 1, Column: 1}, Field: "f", Msg: strings.Repeat("x", 1000)})
	}
	ff.setErr("ApplyPipeline", se)
	_, err := runnelv1.NewFleetClient(e.conn).ApplyPipeline(withToken(testCtx(t), "operator-secret"), &runnelv1.ApplyPipelineRequest{Spec: testSpec})
	wantCode(t, err, codes.InvalidArgument, "1500 problems")
	st := status.Convert(err)
	if !strings.Contains(st.Message(), "1500 problems") || !strings.HasSuffix(st.Message(), "and 1400 more") || len(st.Message()) > 64<<10 {
		t.Errorf("message of %d bytes: %.200q ... %q", len(st.Message()), st.Message(), st.Message()[max(0, len(st.Message())-40):])
	}
	sp, _ := st.Details()[0].(*runnelv1.SpecProblems)
	if sp == nil || len(sp.Problems) != 1000 || len(sp.Problems[0].Message) > 256 {
		t.Errorf("detail: %d problems", len(sp.GetProblems()))
	}
}

// TestFleetValidation: requests wrong in themselves are InvalidArgument,
// named by field, and never reach the core.
func TestFleetValidation(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	c := runnelv1.NewFleetClient(e.conn)
	ctx := withToken(testCtx(t), bootstrapToken)
	e2 := func(_ any, err error) error { return err }
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"empty spec", func() error { return e2(c.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: " \n"})) }, "spec: empty"},
		{"huge spec", func() error {
			return e2(c.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: strings.Repeat("#", spec.MaxSize+1)}))
		}, "at most"},
		{"get pipeline", func() error { return e2(c.GetPipeline(ctx, &runnelv1.GetPipelineRequest{})) }, "name: empty"},
		{"revisions", func() error { return e2(c.ListRevisions(ctx, &runnelv1.ListRevisionsRequest{})) }, "name: empty"},
		{"diff", func() error { return e2(c.DiffRevisions(ctx, &runnelv1.DiffRevisionsRequest{From: 1, To: 2})) }, "name: empty"},
		{"delete", func() error { return e2(c.DeletePipeline(ctx, &runnelv1.DeletePipelineRequest{})) }, "name: empty"},
		{"get edge", func() error { return e2(c.GetFleetEdge(ctx, &runnelv1.GetFleetEdgeRequest{})) }, "edge_id: empty"},
		{"label no edge", func() error {
			return e2(c.LabelEdge(ctx, &runnelv1.LabelEdgeRequest{Set: map[string]string{"a": "b"}}))
		}, "edge_id: empty"},
		{"label nothing", func() error { return e2(c.LabelEdge(ctx, &runnelv1.LabelEdgeRequest{EdgeId: "gw-1"})) }, "both empty"},
		{"label empty key", func() error {
			return e2(c.LabelEdge(ctx, &runnelv1.LabelEdgeRequest{EdgeId: "gw-1", Set: map[string]string{"": "b"}}))
		}, "empty key"},
		{"label set and remove", func() error {
			return e2(c.LabelEdge(ctx, &runnelv1.LabelEdgeRequest{EdgeId: "gw-1", Set: map[string]string{"a": "b"}, Remove: []string{"a"}}))
		}, `remove[0]: label "a" is also in set`},
		{"deployment without spec", func() error { return e2(c.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{})) }, "spec: missing"},
		{"deployment without name", func() error {
			return e2(c.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{}}))
		}, "spec.name: empty"},
		{"deployment pipeline without name", func() error {
			return e2(c.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "d",
				Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}, {Revision: 2}}}}))
		}, "spec.pipelines[1].name: empty"},
		{"get deployment", func() error { return e2(c.GetDeployment(ctx, &runnelv1.GetDeploymentRequest{})) }, "name: empty"},
		{"versions", func() error { return e2(c.ListDeploymentVersions(ctx, &runnelv1.GetDeploymentRequest{})) }, "name: empty"},
		{"rollout without name", func() error { return e2(c.Rollout(ctx, &runnelv1.RolloutRequest{Action: "pause"})) }, "name: empty"},
		{"rollout action", func() error { return e2(c.Rollout(ctx, &runnelv1.RolloutRequest{Name: "d", Action: "restart"})) },
			`action: "restart"; want one of pause, resume, abort, undo`},
		{"rollout no action", func() error { return e2(c.Rollout(ctx, &runnelv1.RolloutRequest{Name: "d"})) }, `action: ""`},
		{"token without name", func() error { return e2(c.CreateToken(ctx, &runnelv1.CreateTokenRequest{Role: "viewer"})) }, "name: empty"},
		{"token named api", func() error { return e2(c.CreateToken(ctx, &runnelv1.CreateTokenRequest{Name: "api", Role: "viewer"})) }, `"api"`},
		{"token role", func() error { return e2(c.CreateToken(ctx, &runnelv1.CreateTokenRequest{Name: "ci", Role: "root"})) }, `role: "root"`},
		{"revoke", func() error { return e2(c.RevokeToken(ctx, &runnelv1.RevokeTokenRequest{})) }, "name: empty"},
	} {
		err := tc.call()
		wantCode(t, err, codes.InvalidArgument, tc.name)
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if n := ff.count(""); n != 0 {
		t.Errorf("%d refused calls reached the core", n)
	}
}

// TestFleetAdapters: requests reach the core as sent (over REST too), and
// the audit page size has its default and bound.
func TestFleetAdapters(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	c := runnelv1.NewFleetClient(e.conn)
	ctx := withToken(testCtx(t), "viewer-secret-1")
	for _, tc := range []struct {
		limit uint32
		want  int
	}{{0, 100}, {7, 7}, {5000, 1000}} {
		if _, err := c.ListAudit(ctx, &runnelv1.ListAuditRequest{AfterId: 41, Limit: tc.limit}); err != nil {
			t.Fatal(err)
		}
		if call, _ := ff.last("Audit"); call.args[0] != uint64(41) || call.args[1] != tc.want {
			t.Errorf("limit %d: the core got %v, want limit %d", tc.limit, call.args, tc.want)
		}
	}
	code, body := e.do(t, "POST", "/v1/fleet/deployments/temps-all:rollout", "operator-secret", `{"action":"abort"}`)
	if call, _ := ff.last("Rollout"); code != 200 || call.who != "otto" || call.args[0] != "temps-all" || call.args[1] != "abort" ||
		!strings.Contains(body, `"phase":"abortd"`) {
		t.Errorf("REST rollout: %d %s; core got %+v", code, body, call)
	}
	e.do(t, "GET", "/v1/fleet/edges?selector=hw+in+(rpi4,cm4),!legacy", "viewer-secret-1", "")
	if call, _ := ff.last("ListEdges"); call.args[0] != "hw in (rpi4,cm4),!legacy" {
		t.Errorf("selector %q reached the core", call.args[0])
	}
	e.do(t, "GET", "/v1/fleet/pipelines/temps/diff?from=2&to=5", "viewer-secret-1", "")
	if call, _ := ff.last("DiffRevisions"); call.args[1] != uint32(2) || call.args[2] != uint32(5) {
		t.Errorf("diff args %v", call.args)
	}
	code, body = e.do(t, "POST", "/v1/fleet/tokens", bootstrapToken, `{"name":"ci","role":"viewer"}`)
	if call, _ := ff.last("CreateToken"); code != 200 || call.who != "api" || !strings.Contains(body, `"secret":"s3cret"`) {
		t.Errorf("REST create token: %d %s; core got %+v", code, body, call)
	}
	// The OpenAPI document describes the fleet's routes.
	if code, body := e.get(t, "/v1/openapi.json", ""); code != 200 || !strings.Contains(body, `"/v1/fleet/deployments/{name}:rollout"`) {
		t.Errorf("openapi: %d, no fleet routes", code)
	}
}

// TestAuthenticateFails: a fleet that cannot check a token refuses the
// call with Internal, and nothing else reaches it.
func TestAuthenticateFails(t *testing.T) {
	ff := newFakeFleet()
	e := startFleet(t, ff, nil)
	ff.setErr("Authenticate", errors.New("fleet: store closed"))
	_, err := runnelv1.NewFleetClient(e.conn).ListDeployments(withToken(testCtx(t), "operator-secret"), &runnelv1.ListDeploymentsRequest{})
	wantCode(t, err, codes.Internal, "Authenticate failing")
	// The configured token does not need the fleet.
	if _, err := runnelv1.NewFleetClient(e.conn).ListDeployments(withToken(testCtx(t), bootstrapToken), &runnelv1.ListDeploymentsRequest{}); err != nil {
		t.Error(err)
	}
	if n := ff.count("ListDeployments"); n != 1 {
		t.Errorf("%d calls, want 1", n)
	}
	// A role the server does not know allows nothing.
	ff.setErr("Authenticate", nil)
	_, err = runnelv1.NewFleetClient(e.conn).ListDeployments(withToken(testCtx(t), "strange-secret1"), &runnelv1.ListDeploymentsRequest{})
	wantCode(t, err, codes.PermissionDenied, "a token of role root")
	if n := ff.count("ListDeployments"); n != 1 {
		t.Errorf("%d calls, want 1", n)
	}
}
