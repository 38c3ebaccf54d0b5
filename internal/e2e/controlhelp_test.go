package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testproc"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// The control-plane suite's fleet: a real runnel-hub serving the Fleet
// API, real runnel-edge processes that run only what the hub deploys to
// them, each uplinked straight to the hub or through a toxiproxy proxy
// of its own (so that one edge's link can be cut), and clients of the
// Fleet and Results APIs holding the hub's admin token.

// ctlFleet is one hub and its edges. Every method must be called from
// the test goroutine (they may t.Fatal).
type ctlFleet struct {
	t          *testing.T
	dir        string // binaries, data dirs, token files
	hub        *testproc.Proc
	grpc, http string
	admin      string            // the hub's --api-token
	tokens     map[string]string // edge id -> edge token
	conn       *grpc.ClientConn  // with the admin token
	fleet      runnelv1.FleetClient
	results    runnelv1.ResultsClient
	tp         *toxiproxy.ApiServer
	edges      map[string]*ctlEdge
}

// ctlEdge is one runnel-edge process of a ctlFleet.
type ctlEdge struct {
	id     string
	proc   *testproc.Proc
	http   string                // its /metrics
	broker *testbroker.Mosquitto // where it reads
	proxy  *toxiproxy.Proxy      // its link to the hub; nil: straight to the hub
}

// newCtlFleet builds the binaries, writes tokens for the edges named and
// starts the hub (fleet tick 50 ms, edges live for 2 s without a word).
func newCtlFleet(t *testing.T, edgeIDs ...string) *ctlFleet {
	t.Helper()
	dir := t.TempDir()
	testproc.Build(t, dir, "../../cmd/runnel-edge", "../../cmd/runnel-hub")
	f := &ctlFleet{t: t, dir: dir, grpc: freePort(t), http: freePort(t), admin: "ctl-admin-token-0123456789abcdef",
		tokens: map[string]string{}, edges: map[string]*ctlEdge{}}
	var tokens strings.Builder
	for _, id := range edgeIDs {
		f.tokens[id] = "ctl-edge-token-" + id + "-0123456789abcdef"
		fmt.Fprintf(&tokens, "%s %s\n", id, f.tokens[id])
	}
	tokFile := f.write("edge-tokens", tokens.String())
	apiFile := f.write("api-token", f.admin)
	f.hub = &testproc.Proc{Name: "hub", Args: []string{filepath.Join(dir, "runnel-hub"), "--data-dir", filepath.Join(dir, "hub"),
		"--grpc-addr", f.grpc, "--http-addr", f.http, "--edge-tokens-file", tokFile, "--api-token-file", apiFile,
		"--edge-timeout", "2s", "--commit-interval", "20ms", "--fleet-tick", "50ms"}}
	f.startHub()
	t.Cleanup(func() {
		for _, e := range f.edges {
			if e.proc.Cmd != nil {
				e.proc.Kill()
			}
		}
		f.hub.Kill()
		if t.Failed() {
			t.Logf("hub log tail:\n%s", tail(f.hub.Logs.String(), 4000))
			for _, id := range slices.Sorted(maps.Keys(f.edges)) {
				if p := f.edges[id].proc; p.Logs != nil {
					t.Logf("%s log tail:\n%s", id, tail(p.Logs.String(), 2000))
				}
			}
		}
	})
	f.conn = f.connAs(f.admin)
	f.fleet, f.results = runnelv1.NewFleetClient(f.conn), runnelv1.NewResultsClient(f.conn)
	return f
}

func (f *ctlFleet) write(name, s string) string {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// with is f for a subtest.
func (f *ctlFleet) with(t *testing.T) *ctlFleet {
	g := *f
	g.t = t
	return &g
}

// startHub starts the hub and waits until it serves.
func (f *ctlFleet) startHub() {
	f.t.Helper()
	f.hub.Start(f.t)
	f.hub.WaitLog(f.t, "hub: listening")
}

// killHub kills the hub with SIGKILL and starts it again on the same
// data dir and addresses.
func (f *ctlFleet) killHub() {
	f.t.Helper()
	f.hub.Kill()
	f.startHub()
}

// connAs returns a client connection that calls with token, each call
// bounded by ctlCallTimeout.
func (f *ctlFleet) connAs(token string) *grpc.ClientConn {
	f.t.Helper()
	conn, err := grpc.NewClient(f.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer(token)), grpc.WithUnaryInterceptor(ctlCallTimeout))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { conn.Close() })
	return conn
}

// ctlCallTimeout bounds every unary call to 10 s, so that a hub that
// hangs fails the test instead of stalling it.
func ctlCallTimeout(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return invoke(ctx, method, req, reply, cc, opts...)
}

// ctx is the context of the test's calls: ctlCallTimeout bounds each.
func (f *ctlFleet) ctx() context.Context { return f.t.Context() }

// addEdge starts an edge that reads broker, with its labels
// ("site=north"); viaProxy puts a toxiproxy proxy of its own between it
// and the hub.
func (f *ctlFleet) addEdge(id string, broker *testbroker.Mosquitto, viaProxy bool, labels ...string) *ctlEdge {
	f.t.Helper()
	e := &ctlEdge{id: id, http: freePort(f.t), broker: broker}
	hub := f.grpc
	if viaProxy {
		if f.tp == nil {
			f.tp = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
		}
		e.proxy = toxiproxy.NewProxy(f.tp, "to-hub-"+id, freePort(f.t), f.grpc)
		if err := e.proxy.Start(); err != nil {
			f.t.Fatal(err)
		}
		f.t.Cleanup(e.proxy.Stop)
		hub = e.proxy.Listen
	}
	args := []string{filepath.Join(f.dir, "runnel-edge"), "run", "--edge-id", id, "--data-dir", filepath.Join(f.dir, id),
		"--broker-url", broker.Addr(), "--uplink-hub", hub, "--uplink-token", f.tokens[id], "--uplink-insecure",
		"--http-addr", e.http, "--checkpoint-interval", "100ms", "--fleet-status-interval", "200ms",
		"--ingest-log-sync", "never"}
	for _, l := range labels {
		args = append(args, "--labels", l)
	}
	e.proc = &testproc.Proc{Name: id, Args: args}
	f.edges[id] = e
	e.proc.Start(f.t)
	return e
}

// metric is one sample of the edge's /metrics (name{labels} as the
// page writes it, edge label first), and whether it is there.
func (e *ctlEdge) metric(name string) (float64, bool) {
	v, ok := scrape(e.http)[name]
	return v, ok
}

// waitUntil polls cond every 50 ms until it holds, and fails the test
// with what it last said after d.
func (f *ctlFleet) waitUntil(d time.Duration, what string, cond func() (bool, string)) {
	f.t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("after %v, still not %s: %s", d, what, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *ctlFleet) applyPipeline(spec string) *runnelv1.PipelineRevision {
	f.t.Helper()
	r, err := f.fleet.ApplyPipeline(f.ctx(), &runnelv1.ApplyPipelineRequest{Spec: spec, File: "spec.yaml"})
	if err != nil {
		f.t.Fatalf("ApplyPipeline: %v", err)
	}
	return r.Revision
}

func (f *ctlFleet) deploy(spec *runnelv1.DeploymentSpec) *runnelv1.Deployment {
	f.t.Helper()
	d, err := f.fleet.ApplyDeployment(f.ctx(), &runnelv1.ApplyDeploymentRequest{Spec: spec})
	if err != nil {
		f.t.Fatalf("ApplyDeployment %s: %v", spec.Name, err)
	}
	return d
}

func (f *ctlFleet) deployment(name string) (*runnelv1.Deployment, error) {
	return f.fleet.GetDeployment(f.ctx(), &runnelv1.GetDeploymentRequest{Name: name})
}

// waitRollout waits until version of deployment name is in phase.
func (f *ctlFleet) waitRollout(d time.Duration, name string, version uint32, phase string) *runnelv1.Deployment {
	f.t.Helper()
	var dep *runnelv1.Deployment
	f.waitUntil(d, fmt.Sprintf("deployment %s version %d %s", name, version, phase), func() (bool, string) {
		var err error
		if dep, err = f.deployment(name); err != nil {
			return false, err.Error()
		}
		r := dep.GetRollout()
		return dep.Version == version && r.GetPhase() == phase, fmt.Sprintf("version %d: %v", dep.Version, r)
	})
	return dep
}

// ctlRuns reports whether an edge reported running want (pipeline ->
// revision; others may run too), for the set the hub wants it to run,
// with no error.
func ctlRuns(fe *runnelv1.FleetEdge, want map[string]uint32) (bool, string) {
	st := fe.GetStatus()
	got := map[string]uint32{}
	var bad []string
	for _, p := range st.GetPipelines() {
		if p.GetState() != "running" {
			bad = append(bad, fmt.Sprintf("%s@%d %s %s", p.GetName(), p.GetRevision(), p.GetState(), p.GetError()))
			continue
		}
		got[p.GetName()] = p.GetRevision()
	}
	why := fmt.Sprintf("%s: connected %v, desired %v (generation %d), applied generation %d, running %v, not running %v, apply error %q",
		fe.GetEdgeId(), fe.GetConnected(), ctlRefs(fe.GetDesired()), fe.GetDesiredGeneration(), st.GetAppliedGeneration(), got, bad, st.GetApplyError())
	ok := st != nil && st.GetAppliedGeneration() >= fe.GetDesiredGeneration() && st.GetApplyError() == "" && len(bad) == 0
	for n, r := range want {
		ok = ok && got[n] == r
	}
	return ok, why
}

func ctlRefs(rs []*runnelv1.PipelineRef) []string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%s@%d", r.GetName(), r.GetRevision()))
	}
	sort.Strings(s)
	return s
}

// waitRunning waits until every edge named reports running want.
func (f *ctlFleet) waitRunning(d time.Duration, want map[string]uint32, ids ...string) {
	f.t.Helper()
	f.waitUntil(d, fmt.Sprintf("%v running %v", ids, want), func() (bool, string) {
		for _, id := range ids {
			fe, err := f.fleet.GetFleetEdge(f.ctx(), &runnelv1.GetFleetEdgeRequest{EdgeId: id})
			if err != nil {
				return false, id + ": " + err.Error()
			}
			if ok, why := ctlRuns(fe, want); !ok {
				return false, why
			}
		}
		return true, ""
	})
}

// waitRegistered waits until the edges named are registered and
// connected.
func (f *ctlFleet) waitRegistered(d time.Duration, ids ...string) {
	f.t.Helper()
	f.waitUntil(d, fmt.Sprintf("%v connected", ids), func() (bool, string) {
		for _, id := range ids {
			fe, err := f.fleet.GetFleetEdge(f.ctx(), &runnelv1.GetFleetEdgeRequest{EdgeId: id})
			if err != nil {
				return false, id + ": " + err.Error()
			}
			if !fe.GetConnected() {
				return false, id + " not connected"
			}
		}
		return true, ""
	})
}

// classResults returns the latest version of every window of the
// compatibility class holding revision (0: the latest revision's).
func (f *ctlFleet) classResults(pipeline string, revision uint32) ([]*runnelv1.Result, error) {
	var out []*runnelv1.Result
	req := &runnelv1.QueryResultsRequest{Pipeline: pipeline, Revision: revision, Limit: 10000}
	for {
		resp, err := f.results.QueryResults(f.ctx(), req)
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Results...)
		if resp.NextPageToken == "" {
			return out, nil
		}
		req.PageToken = resp.NextPageToken
	}
}

// ctlPublisher is a Publisher to an edge's broker that the test goroutine
// uses.
func ctlPublisher(t *testing.T, m *testbroker.Mosquitto) *testbroker.Publisher {
	return testbroker.NewPublisher(t, m.HostPort())
}
