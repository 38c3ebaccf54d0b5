package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/fleet"
	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/internal/testbroker"
	"github.com/runnel-io/runnel/internal/testcert"
	"github.com/runnel-io/runnel/internal/testproc"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/sync/uplink"
)

// The fleet at scale: one hub (fleet.OpenWithHub behind server.New on
// loopback) and many in-process edges, each a whole edge.Run node with its
// own data directory, MQTT client id (on one Mosquitto for all), uplink
// and control stream. Between the server and the fleet a scaleRecorder
// notes, at the hub, every desired set handed to an edge's stream and
// every status an edge reports, with the time: the order of a rollout is
// checked on those records, not on polls that could miss a moment.

// scaleSpec is the managed pipeline of the scale tests; LIMIT differs
// between revisions (a compatible change: only the filter moves).
const scaleSpec = `name: temps
source: {mqtt: {topic: "scale/+/temp", qos: 1, topic_fields: {line: 1}}}
event_time: {field: ts, unit: ms}
key: [line]
filter: "temp < LIMIT"
window: {tumbling: 10s}
aggregates: {n: count(), hi: max(temp)}
`

func scaleRevision(limit int) string {
	return strings.Replace(scaleSpec, "LIMIT", fmt.Sprint(limit), 1)
}

// scaleExtraSpec is a second pipeline; the canary of TestFleetRolloutAtScale
// also has it as a local file, so it refuses a set that names it.
const scaleExtraSpec = `name: extra
source: {mqtt: {topic: "scale/+/humid", qos: 1}}
event_time: {field: ts, unit: ms}
key: [room]
window: {tumbling: 10s}
aggregates: {n: count()}
`

// scaleLogger discards, unless RUNNEL_SCALE_LOG names a level (debug,
// info, warn, error) to log at on stderr.
func scaleLogger() *slog.Logger {
	var lv slog.Level
	if v := os.Getenv("RUNNEL_SCALE_LOG"); v == "" || lv.UnmarshalText([]byte(v)) != nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))
}

// scaleGiven is a desired set the hub handed to an edge's stream.
type scaleGiven struct {
	at    time.Time
	gen   uint64
	pipes map[string]uint32 // name -> revision
}

// scaleReport is a status an edge sent (its Register's included).
type scaleReport struct {
	at       time.Time
	gen      uint64
	applyErr string
	pipes    map[string]scalePipe
}

type scalePipe struct {
	rev   uint32
	state string
}

// scaleRecorder is the fleet, seen from the server: it notes what goes to
// each edge and what each edge says, with the time, and otherwise passes
// every call through.
type scaleRecorder struct {
	server.FleetCore
	now func() time.Time
	// slow, when set, says how long the sets of an edge wait after they
	// are noted before the stream gets them: a slow link, so that an edge
	// reports running well after it was handed a set. Empty sets (an
	// edge's first) pass at once, so that the next one is noted when the
	// fleet hands it over.
	slow func(edgeID string) time.Duration

	mu      sync.Mutex
	given   map[string][]scaleGiven
	reports map[string][]scaleReport
	wg      sync.WaitGroup // the forwarders
}

func newScaleRecorder(fc server.FleetCore) *scaleRecorder {
	return &scaleRecorder{FleetCore: fc, now: time.Now, given: map[string][]scaleGiven{}, reports: map[string][]scaleReport{}}
}

// Connect passes the fleet's channel on through a forwarder, which notes
// each set when it takes it from the fleet (so no later than the server
// can send it) and closes its channel when the fleet closes the original.
func (r *scaleRecorder) Connect(ctx context.Context, edgeID string, reg *runnelv1.Register, notify func()) (<-chan *runnelv1.DesiredSet, error) {
	// The forwarder waits on the fleet's channel (no notify) and notifies
	// the server of each set it passes on.
	in, err := r.FleetCore.Connect(ctx, edgeID, reg, nil)
	if err != nil {
		return nil, err
	}
	if reg.GetStatus() != nil {
		r.noteStatus(edgeID, reg.GetStatus())
	}
	out := make(chan *runnelv1.DesiredSet, 1)
	r.wg.Go(func() {
		defer notify()
		defer close(out)
		for ds := range in {
			g := scaleGiven{at: r.now(), gen: ds.GetGeneration(), pipes: map[string]uint32{}}
			for _, p := range ds.GetPipelines() {
				g.pipes[p.GetName()] = p.GetRevision()
			}
			r.mu.Lock()
			r.given[edgeID] = append(r.given[edgeID], g)
			r.mu.Unlock()
			if r.slow != nil && r.slow(edgeID) > 0 && len(ds.GetPipelines()) > 0 {
				select {
				case <-time.After(r.slow(edgeID)):
				case <-ctx.Done():
				}
			}
			select {
			case out <- ds:
				notify()
			case <-ctx.Done():
				// The stream is ending; the fleet closes in soon.
			}
		}
	})
	return out, nil
}

func (r *scaleRecorder) Status(edgeID string, st *runnelv1.EdgeStatus) error {
	r.noteStatus(edgeID, st)
	return r.FleetCore.Status(edgeID, st)
}

func (r *scaleRecorder) noteStatus(edgeID string, st *runnelv1.EdgeStatus) {
	rep := scaleReport{at: r.now(), gen: st.GetAppliedGeneration(), applyErr: st.GetApplyError(), pipes: map[string]scalePipe{}}
	for _, p := range st.GetPipelines() {
		rep.pipes[p.GetName()] = scalePipe{p.GetRevision(), p.GetState()}
	}
	r.mu.Lock()
	r.reports[edgeID] = append(r.reports[edgeID], rep)
	r.mu.Unlock()
}

// firstGiven is the first set handed to the edge that ok accepts.
func (r *scaleRecorder) firstGiven(id string, ok func(scaleGiven) bool) (scaleGiven, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.given[id] {
		if ok(g) {
			return g, true
		}
	}
	return scaleGiven{}, false
}

// givenTo is every set handed to the edge, in order.
func (r *scaleRecorder) givenTo(id string) []scaleGiven {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.given[id])
}

// firstRunning is when the edge first reported generation gen or later
// applied without error, with pipeline name running revision rev.
func (r *scaleRecorder) firstRunning(id string, gen uint64, name string, rev uint32) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rep := range r.reports[id] {
		if rep.gen >= gen && rep.applyErr == "" && rep.pipes[name] == (scalePipe{rev, "running"}) {
			return rep.at, true
		}
	}
	return time.Time{}, false
}

// scaleHub is the hub of a scale test: store, fleet, server, recorder, and
// an admin client of its Fleet API.
type scaleHub struct {
	core   *hub.Hub
	fleet  *fleet.Fleet
	rec    *scaleRecorder
	srv    *server.Server
	conn   *grpc.ClientConn
	api    runnelv1.FleetClient
	tokens map[string]string
}

const scaleAdminToken = "scale-admin-token-0123456789"

func scaleToken(id string) string { return "scale-token-" + id + "-0123456789" }

// startScaleHub starts a hub that knows the edges' tokens. tick is the
// fleet's evaluation period.
func startScaleHub(tb testing.TB, dir string, ids []string, tick time.Duration) *scaleHub {
	tb.Helper()
	lg := scaleLogger()
	core, fl, err := fleet.OpenWithHub(dir, fleet.Options{Tick: tick, NoSync: true, Logger: lg},
		hub.Config{Dir: dir, CommitInterval: 10 * time.Millisecond, NoSync: true, Logger: lg})
	if err != nil {
		tb.Fatal(err)
	}
	h := &scaleHub{core: core, fleet: fl, rec: newScaleRecorder(fl), tokens: map[string]string{}}
	for _, id := range ids {
		h.tokens[id] = scaleToken(id)
	}
	h.srv, err = server.New(core, server.Config{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Insecure: true,
		EdgeTokens: h.tokens, APIToken: scaleAdminToken, Fleet: h.rec, Logger: lg})
	if err != nil {
		tb.Fatal(err)
	}
	if err := h.srv.Start(); err != nil {
		tb.Fatal(err)
	}
	h.conn, err = grpc.NewClient(h.srv.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(scaleBearer(scaleAdminToken)))
	if err != nil {
		tb.Fatal(err)
	}
	h.api = runnelv1.NewFleetClient(h.conn)
	return h
}

// close stops the server (ending every stream), then closes the fleet and
// the store. The edges must have stopped.
func (h *scaleHub) close(tb testing.TB) {
	tb.Helper()
	h.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		tb.Errorf("hub shutdown: %v", err)
	}
	h.rec.wg.Wait()
	if err := errors.Join(h.fleet.Close(), h.core.Close()); err != nil {
		tb.Errorf("hub close: %v", err)
	}
}

type scaleBearer string

func (b scaleBearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (scaleBearer) RequireTransportSecurity() bool { return false }

// scaleEdge is one in-process edge to run.
type scaleEdge struct {
	id     string
	labels map[string]string
	local  []*operators.Pipeline // pipelines of its own files
}

// scaleRunEdges starts the edges against h and broker, with the status and
// checkpoint intervals given, and returns a function that stops them all
// and reports how each one ended.
func scaleRunEdges(tb testing.TB, h *scaleHub, broker, dir string, edges []scaleEdge, status, checkpoint time.Duration) (stop func()) {
	tb.Helper()
	lg := scaleLogger()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(edges))
	for _, e := range edges {
		cfg := edge.NodeConfig{
			EdgeID: e.id, DataDir: filepath.Join(dir, e.id), Pipelines: e.local,
			Broker:             mqtt.Config{Brokers: []string{broker}, Logger: lg},
			CheckpointInterval: checkpoint, NoSync: true,
			// Small segments: the log's index is sized by them, and no
			// reading is published here.
			IngestLog: ingestlog.Options{SegmentSize: 1 << 20, Sync: ingestlog.SyncNever},
			Uplink: &uplink.Config{Hub: h.srv.GRPCAddr().String(), Token: h.tokens[e.id], Insecure: true,
				BackoffMin: 20 * time.Millisecond, BackoffMax: 500 * time.Millisecond, Logger: lg},
			Fleet:  &edge.FleetConfig{Labels: e.labels, Version: "scale", StatusInterval: status},
			Logger: lg,
		}
		wg.Go(func() {
			if err := edge.Run(ctx, cfg); err != nil {
				errs <- fmt.Errorf("edge %s: %w", cfg.EdgeID, err)
			}
		})
	}
	return func() {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			tb.Error(err)
		}
	}
}

// scaleWaitFleet polls the hub's edges (ListFleetEdges, all of them) until ok
// accepts them, or fails the test after d with what last did not.
func scaleWaitFleet(tb testing.TB, h *scaleHub, d time.Duration, what string, ok func([]*runnelv1.FleetEdge) string) []*runnelv1.FleetEdge {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := h.api.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{})
		cancel()
		why := ""
		if err != nil {
			why = err.Error()
		} else if why = ok(resp.GetEdges()); why == "" {
			return resp.GetEdges()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not after %s: %s", what, d, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scaleAllConnected accepts a fleet of exactly n edges, each connected with a
// status.
func scaleAllConnected(n int) func([]*runnelv1.FleetEdge) string {
	return func(es []*runnelv1.FleetEdge) string {
		up := 0
		for _, e := range es {
			if e.GetConnected() && e.GetStatus() != nil {
				up++
			}
		}
		if len(es) != n || up != n {
			return fmt.Sprintf("%d edges registered, %d connected with a status, want %d", len(es), up, n)
		}
		return ""
	}
}

// scaleRefs renders pipeline refs as name@rev, sorted.
func scaleRefs(rs []*runnelv1.PipelineRef) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%s@%d", r.GetName(), r.GetRevision()))
	}
	slices.Sort(s)
	return strings.Join(s, ",")
}

func scalePipes(m map[string]uint32) string {
	var s []string
	for _, n := range slices.Sorted(maps.Keys(m)) {
		s = append(s, fmt.Sprintf("%s@%d", n, m[n]))
	}
	return strings.Join(s, ",")
}

// scaleFleet is n edges with mixed labels: site plant-1…5, hw rpi4, cm4
// or x86, and one in seven legacy. picked is the ids, sorted, that the
// selector scaleSelector picks, decided here without the selector
// parser: the oracle.
func scaleFleet(n int) (edges []scaleEdge, picked []string) {
	hws := []string{"rpi4", "cm4", "x86"}
	for i := range n {
		e := scaleEdge{id: fmt.Sprintf("gw-%04d", i), labels: map[string]string{
			"site": fmt.Sprintf("plant-%d", i%5+1), "hw": hws[(i/5)%3]}}
		if i%7 == 3 {
			e.labels["legacy"] = "true"
		}
		edges = append(edges, e)
		site, hw, legacy := e.labels["site"], e.labels["hw"], e.labels["legacy"] != ""
		if (site == "plant-1" || site == "plant-2") && hw != "x86" && !legacy {
			picked = append(picked, e.id)
		}
	}
	return edges, picked
}

const scaleSelector = "site in (plant-1,plant-2),hw!=x86,!legacy"

// scaleSteps cuts sorted targets into a canary of canary edges and then
// batches of ceil(pct × targets / 100): the steps hub/fleet/doc.go
// promises.
func scaleSteps(targets []string, canary, pct int) [][]string {
	batch := (len(targets)*pct + 99) / 100
	steps := [][]string{targets[:min(canary, len(targets))]}
	for rest := targets[len(steps[0]):]; len(rest) > 0; {
		k := min(batch, len(rest))
		steps = append(steps, rest[:k])
		rest = rest[k:]
	}
	return steps
}

// scaleWatchRollout polls GetDeployment until the rollout of version ends
// (succeeded, failed, aborted), and returns the last answer and the steps
// seen while it progressed, in order.
func scaleWatchRollout(tb testing.TB, h *scaleHub, name string, version uint32, d time.Duration) (*runnelv1.Deployment, []uint32) {
	tb.Helper()
	var steps []uint32
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		dep, err := h.api.GetDeployment(ctx, &runnelv1.GetDeploymentRequest{Name: name})
		cancel()
		if err != nil {
			tb.Fatalf("GetDeployment %s: %v", name, err)
		}
		r := dep.GetRollout()
		if dep.GetVersion() != version {
			tb.Fatalf("deployment %s is at version %d, want %d", name, dep.GetVersion(), version)
		}
		if r.GetPhase() == "progressing" && (len(steps) == 0 || steps[len(steps)-1] != r.GetStep()) {
			steps = append(steps, r.GetStep())
		}
		switch r.GetPhase() {
		case "succeeded", "failed", "aborted":
			return dep, steps
		}
		if time.Now().After(deadline) {
			tb.Fatalf("deployment %s v%d still %s at step %d after %s (step started %s ago, healthy since %d): %s; edges behind:\n%s", name, version,
				r.GetPhase(), r.GetStep(), d, time.Since(time.UnixMilli(r.GetStepStartedMs())).Round(time.Millisecond), r.GetHealthySinceMs(),
				r.GetMessage(), scaleBehind(h))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// scaleBehind lists the edges whose status is not at their desired
// generation, or has an error, with what they report: for failures.
func scaleBehind(h *scaleHub) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := h.api.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range resp.GetEdges() {
		st := e.GetStatus()
		running := true
		for _, d := range e.GetDesired() {
			running = running && slices.ContainsFunc(st.GetPipelines(), func(p *runnelv1.PipelineStatus) bool {
				return p.GetName() == d.GetName() && p.GetRevision() == d.GetRevision() && p.GetState() == "running"
			})
		}
		if st.GetAppliedGeneration() == e.GetDesiredGeneration() && st.GetApplyError() == "" && running {
			continue
		}
		fmt.Fprintf(&b, "  %s: desired %s generation %d, connected %v, last seen %s ago; status %v\n", e.GetEdgeId(), scaleRefs(e.GetDesired()),
			e.GetDesiredGeneration(), e.GetConnected(), time.Since(time.UnixMilli(e.GetLastSeenMs())).Round(time.Millisecond), st)
	}
	return b.String()
}

// scaleCheckSteps checks, on the hub's records, that the steps got pipeline
// name at revision rev in order: every edge of a step was handed it before
// soak passed after the first of them reported it running (one step, not
// two), and no edge of step k+1 before every edge of step k reported it
// running and soak passed after the last of those reports.
func scaleCheckSteps(tb testing.TB, rec *scaleRecorder, steps [][]string, name string, rev uint32, since time.Time, soak time.Duration) {
	tb.Helper()
	ms := func(t time.Time) string { return fmt.Sprintf("+%dms", t.Sub(since).Milliseconds()) }
	var prevRun time.Time // the last report of running of the step before
	var prevLast string
	for k, ids := range steps {
		var first, last, run, firstRun time.Time
		var firstID, lastID, runID string
		for _, id := range ids {
			g, ok := rec.firstGiven(id, func(g scaleGiven) bool { return g.pipes[name] == rev })
			if !ok {
				tb.Errorf("step %d: edge %s was never handed %s@%d", k, id, name, rev)
				continue
			}
			if first.IsZero() || g.at.Before(first) {
				first, firstID = g.at, id
			}
			if g.at.After(last) {
				last, lastID = g.at, id
			}
			r, ok := rec.firstRunning(id, g.gen, name, rev)
			if !ok {
				tb.Errorf("step %d: edge %s never reported %s@%d running at generation %d", k, id, name, rev, g.gen)
				continue
			}
			if r.After(run) {
				run, runID = r, id
			}
			if firstRun.IsZero() || r.Before(firstRun) {
				firstRun = r
			}
		}
		if first.IsZero() {
			continue
		}
		// The fleet keeps times in whole milliseconds: its soak can end
		// up to 1 ms early in real time.
		if !firstRun.IsZero() && !last.Before(firstRun.Add(soak-time.Millisecond)) {
			tb.Errorf("step %d of %d edges: edge %s was handed %s@%d at %s, a soak after the step's first report of it running (%s): not one step",
				k, len(ids), lastID, name, rev, ms(last), ms(firstRun))
		}
		if k > 0 && first.Before(prevRun.Add(soak-time.Millisecond)) {
			tb.Errorf("step %d: edge %s was handed %s@%d at %s, before step %d's last edge %s reported it running (%s) and soaked %s",
				k, firstID, name, rev, ms(first), k-1, prevLast, ms(prevRun), soak)
		}
		tb.Logf("step %d: %d edges handed %s@%d at %s..%s, all running at %s (last %s)", k, len(ids), name, rev, ms(first), ms(last), ms(run), runID)
		prevRun, prevLast = run, runID
	}
}

// TestFleetRolloutAtScale: 120 in-process edges with mixed labels (site,
// hw, legacy) on one hub and one Mosquitto. Through the Fleet API, a
// staged deployment to "site in (plant-1,plant-2),hw!=x86,!legacy" (a
// canary of 2, batches of 30 %, 400 ms soak) reaches exactly the edges the
// selector picks (an oracle decides them apart from the selector parser),
// step by step: the hub's records show no edge of a step handed the
// revision before every edge of the step before ran it and the soak
// passed (the last edge of each step is behind a slow link, so the gate
// has to wait for it). Edges outside the selector are never handed a
// pipeline. Then a new version adds a pipeline that the first canary runs
// from a local file, so it refuses the set: the rollout fails at the
// canary, rolls back the edges it touched (the other canary, which
// applied it, runs revision 1 again), and no edge past the canary is
// handed the version.
func TestFleetRolloutAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("120 in-process edges")
	}
	// First registered, so run last: after the broker's cleanup.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	const (
		n      = 120
		canary = 2
		soak   = 400 * time.Millisecond
	)
	dir := t.TempDir()
	edges, targets := scaleFleet(n)
	steps := scaleSteps(targets, canary, 30)
	// The first canary has a local pipeline named like one a later
	// version adds.
	extra, err := operators.CompileYAML("extra.yaml", []byte(scaleExtraSpec))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range edges {
		ids[i] = edges[i].id
		if edges[i].id == targets[0] {
			edges[i].local = []*operators.Pipeline{extra}
		}
	}
	isTarget := map[string]bool{}
	for _, id := range targets {
		isTarget[id] = true
	}
	var sizes []int
	for _, st := range steps {
		sizes = append(sizes, len(st))
	}
	t.Logf("%d edges, %d picked by %q, in steps of %v", n, len(targets), scaleSelector, sizes)

	h := startScaleHub(t, filepath.Join(dir, "hub"), ids, 50*time.Millisecond)
	defer h.close(t)
	// The last edge of each step is behind a slow link: it runs a set
	// 200 ms after the hub handed it over, so a gate that did not wait
	// for it would start the next step too early by the records.
	slow := map[string]bool{}
	for _, s := range steps {
		slow[s[len(s)-1]] = true
	}
	h.rec.slow = func(id string) time.Duration {
		if slow[id] {
			return 200 * time.Millisecond
		}
		return 0
	}
	mosq := testbroker.Start(t)
	start := time.Now()
	stop := scaleRunEdges(t, h, mosq.Addr(), filepath.Join(dir, "edges"), edges, 2*time.Second, 100*time.Millisecond)
	defer stop()
	scaleWaitFleet(t, h, 2*time.Minute, "all edges connected", scaleAllConnected(n))
	t.Logf("%d edges connected with a status in %s", n, time.Since(start).Round(time.Millisecond))

	ctx := context.Background()
	if _, err := h.api.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: scaleRevision(1000), File: "temps.yaml"}); err != nil {
		t.Fatal(err)
	}
	sel, err := h.api.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{Selector: scaleSelector})
	if err != nil {
		t.Fatal(err)
	}
	var selected []string
	for _, e := range sel.GetEdges() {
		selected = append(selected, e.GetEdgeId())
	}
	if !slices.Equal(selected, targets) {
		t.Fatalf("the selector picks %v, the oracle %v", selected, targets)
	}

	strategy := &runnelv1.Strategy{Staged: true, Canary: canary, BatchPercent: 30, SoakMs: soak.Milliseconds(), RollbackOnFailure: true}
	t1 := time.Now()
	dep, err := h.api.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "temps",
		Selector: scaleSelector, Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}}, Strategy: strategy}})
	if err != nil {
		t.Fatal(err)
	}
	if dep.GetVersion() != 1 || dep.GetRollout().GetSteps() != uint32(len(steps)) || dep.GetRollout().GetTargeted() != uint32(len(targets)) {
		t.Fatalf("deployment v%d: %d steps of %d targets, want v1: %d steps of %d", dep.GetVersion(), dep.GetRollout().GetSteps(),
			dep.GetRollout().GetTargeted(), len(steps), len(targets))
	}
	dep, seen := scaleWatchRollout(t, h, "temps", 1, time.Minute)
	r := dep.GetRollout()
	if r.GetPhase() != "succeeded" || r.GetApplied() != uint32(len(targets)) || r.GetFailed() != 0 {
		t.Fatalf("rollout 1: %s, %d applied, %d failed of %d: %s", r.GetPhase(), r.GetApplied(), r.GetFailed(), len(targets), r.GetMessage())
	}
	// Polls can miss a short step on a loaded machine; the records
	// below see every one.
	if !slices.IsSorted(seen) || len(seen) == 0 || seen[len(seen)-1] >= uint32(len(steps)) {
		t.Errorf("steps seen through GetDeployment: %v, want increasing up to %d", seen, len(steps)-1)
	}
	t.Logf("rollout 1 succeeded in %s; GetDeployment showed steps %v", time.Since(t1).Round(time.Millisecond), seen)
	scaleCheckSteps(t, h.rec, steps, "temps", 1, t1, soak)
	byID := func(es []*runnelv1.FleetEdge) map[string]*runnelv1.FleetEdge {
		m := map[string]*runnelv1.FleetEdge{}
		for _, e := range es {
			m[e.GetEdgeId()] = e
		}
		return m
	}
	// The edges outside the selector: never handed a pipeline, no
	// generation.
	outside := func(es map[string]*runnelv1.FleetEdge) {
		t.Helper()
		for _, id := range ids {
			if isTarget[id] {
				continue
			}
			if e := es[id]; e.GetDesiredGeneration() != 0 || len(e.GetDesired()) != 0 {
				t.Errorf("edge %s outside the selector: desired generation %d, %s", id, e.GetDesiredGeneration(), scaleRefs(e.GetDesired()))
			}
			for _, g := range h.rec.givenTo(id) {
				if len(g.pipes) > 0 {
					t.Errorf("edge %s outside the selector was handed %s (generation %d)", id, scalePipes(g.pipes), g.gen)
				}
			}
		}
	}
	after1 := byID(scaleWaitFleet(t, h, 30*time.Second, "targets running temps@1", func(es []*runnelv1.FleetEdge) string {
		for _, e := range es {
			if isTarget[e.GetEdgeId()] && (scaleRefs(e.GetDesired()) != "temps@1" || e.GetStatus().GetAppliedGeneration() != e.GetDesiredGeneration()) {
				return fmt.Sprintf("edge %s: desired %s generation %d, applied %d", e.GetEdgeId(), scaleRefs(e.GetDesired()), e.GetDesiredGeneration(), e.GetStatus().GetAppliedGeneration())
			}
		}
		return ""
	}))
	outside(after1)

	// Version 2 adds pipeline extra, which the first canary runs from a
	// local file.
	for _, s := range []string{scaleRevision(2000), scaleExtraSpec} {
		if _, err := h.api.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: s}); err != nil {
			t.Fatal(err)
		}
	}
	strategy.BatchPercent = 40
	t2 := time.Now()
	if _, err := h.api.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "temps",
		Selector: scaleSelector, Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}, {Name: "extra"}}, Strategy: strategy}}); err != nil {
		t.Fatal(err)
	}
	dep, _ = scaleWatchRollout(t, h, "temps", 2, time.Minute)
	r = dep.GetRollout()
	t.Logf("rollout 2 ended in %s: %s at step %d, rolled back %v: %s", time.Since(t2).Round(time.Millisecond), r.GetPhase(), r.GetStep(), r.GetRolledBack(), r.GetMessage())
	if r.GetPhase() != "failed" || r.GetStep() != 0 || !r.GetRolledBack() || !slices.Equal(r.GetFailedEdges(), targets[:1]) ||
		!strings.Contains(r.GetMessage(), targets[0]) || !strings.Contains(r.GetMessage(), "managed by the hub") {
		t.Errorf("rollout 2: phase %s at step %d, rolled back %v, failed edges %v (want failed at the canary step, rolled back, failed edges [%s], naming the local pipeline): %s",
			r.GetPhase(), r.GetStep(), r.GetRolledBack(), r.GetFailedEdges(), targets[0], r.GetMessage())
	}
	// Every target runs revision 1 again at the generation the hub gave
	// it: the canaries were handed revision 1 back, the rest never changed.
	after2 := byID(scaleWaitFleet(t, h, 30*time.Second, "targets back on temps@1", func(es []*runnelv1.FleetEdge) string {
		for _, e := range es {
			st := e.GetStatus()
			if !isTarget[e.GetEdgeId()] {
				continue
			}
			var running []string
			for _, p := range st.GetPipelines() {
				if p.GetRevision() > 0 {
					running = append(running, fmt.Sprintf("%s@%d %s", p.GetName(), p.GetRevision(), p.GetState()))
				}
			}
			if scaleRefs(e.GetDesired()) != "temps@1" || st.GetAppliedGeneration() != e.GetDesiredGeneration() || st.GetApplyError() != "" ||
				!slices.Equal(running, []string{"temps@1 running"}) {
				return fmt.Sprintf("edge %s: desired %s generation %d; applied %d, running %v, apply error %q", e.GetEdgeId(), scaleRefs(e.GetDesired()),
					e.GetDesiredGeneration(), st.GetAppliedGeneration(), running, st.GetApplyError())
			}
		}
		return ""
	}))
	outside(after2)
	isNew := func(g scaleGiven) bool { return g.pipes["temps"] == 2 || g.pipes["extra"] != 0 }
	for i, id := range targets {
		g, touched := h.rec.firstGiven(id, isNew)
		switch {
		case i < canary && !touched:
			t.Errorf("canary %s was never handed version 2", id)
		case i < canary:
			if want := after1[id].GetDesiredGeneration() + 2; after2[id].GetDesiredGeneration() != want {
				t.Errorf("canary %s: generation %d after the rollback, want %d (version 2, then version 1 again)", id, after2[id].GetDesiredGeneration(), want)
			}
			if _, ok := h.rec.firstGiven(id, func(b scaleGiven) bool { return b.gen > g.gen && scalePipes(b.pipes) == "temps@1" }); !ok {
				t.Errorf("canary %s was not handed temps@1 back after version 2", id)
			}
		case touched:
			t.Errorf("edge %s of step %d was handed %s (generation %d) at +%dms", id, slices.IndexFunc(steps, func(s []string) bool { return slices.Contains(s, id) }),
				scalePipes(g.pipes), g.gen, g.at.Sub(t2).Milliseconds())
		case after2[id].GetDesiredGeneration() != after1[id].GetDesiredGeneration():
			t.Errorf("edge %s past the canary: generation %d, was %d", id, after2[id].GetDesiredGeneration(), after1[id].GetDesiredGeneration())
		}
	}
	// The second canary usually applied version 2 before the first one's
	// refusal failed the rollout; either way it runs revision 1 now.
	if at, ok := h.rec.firstRunning(targets[1], 0, "extra", 1); ok {
		t.Logf("the second canary %s ran version 2 from +%dms and was rolled back", targets[1], at.Sub(t2).Milliseconds())
	} else {
		t.Logf("the second canary %s was rolled back before it applied version 2", targets[1])
	}
}

// scaleRaiseFileLimit raises the soft limit on open files to the hard one:
// each in-process edge holds a few (state file, log segment, MQTT and gRPC
// sockets, and the hub's end of those).
func scaleRaiseFileLimit(tb testing.TB) uint64 {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatal(err)
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			tb.Fatal(err)
		}
	}
	return lim.Cur
}

// scalePercentile of sorted durations, nearest rank.
func scalePercentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// scaleWaitApplied waits until every edge reported pipeline temps at revision
// rev running, and returns how long after t0 each one did.
func scaleWaitApplied(tb testing.TB, rec *scaleRecorder, ids []string, rev uint32, t0 time.Time, d time.Duration) []time.Duration {
	tb.Helper()
	lat := make([]time.Duration, len(ids))
	left := slices.Clone(ids)
	deadline := time.Now().Add(d)
	for len(left) > 0 {
		left = slices.DeleteFunc(left, func(id string) bool {
			g, ok := rec.firstGiven(id, func(g scaleGiven) bool { return g.pipes["temps"] == rev })
			if !ok {
				return false
			}
			at, ok := rec.firstRunning(id, g.gen, "temps", rev)
			if ok {
				lat[slices.Index(ids, id)] = at.Sub(t0)
			}
			return ok
		})
		if len(left) > 0 {
			if time.Now().After(deadline) {
				tb.Fatalf("temps@%d: %d of %d edges do not run it after %s (%s first)", rev, len(left), len(ids), d, left[0])
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return lat
}

// BenchmarkFleetApply1k: a config change (a new revision of pipeline
// temps, deployed all at once as a new version of its deployment) reaches
// 1,000 connected in-process edges and each applies it (at a checkpoint
// barrier, keeping its window state: a compatible change). An op is one
// change: ApplyPipeline, ApplyDeployment, and every edge reporting the
// new revision running (seen at the hub, by the recorder). p50, p99 and
// max are the edges' times from ApplyDeployment to that report, over
// every op. Run it with -benchtime=Nx: each op takes seconds.
func BenchmarkFleetApply1k(b *testing.B) {
	const n = 1000
	limit := scaleRaiseFileLimit(b)
	dir := b.TempDir()
	edges := make([]scaleEdge, n)
	ids := make([]string, n)
	for i := range edges {
		ids[i] = fmt.Sprintf("gw-%04d", i)
		edges[i] = scaleEdge{id: ids[i], labels: map[string]string{"site": fmt.Sprintf("plant-%d", i%5+1)}}
	}
	h := startScaleHub(b, filepath.Join(dir, "hub"), ids, 20*time.Millisecond)
	defer h.close(b)
	mosq := testbroker.Start(b)
	start := time.Now()
	// Status and checkpoints at their defaults (10 s, 1 s), as in the
	// field: a change does not wait for either.
	stop := scaleRunEdges(b, h, mosq.Addr(), filepath.Join(dir, "edges"), edges, 0, 0)
	defer stop()
	scaleWaitFleet(b, h, 3*time.Minute, "all edges connected", scaleAllConnected(n))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.Logf("%d edges connected in %s; %d goroutines, heap %d MiB (%d KiB an edge); open files limit %d", n, time.Since(start).Round(time.Millisecond),
		runtime.NumGoroutine(), ms.HeapAlloc>>20, ms.HeapAlloc/n>>10, limit)

	ctx := context.Background()
	rev := uint32(0)
	change := func() []time.Duration {
		resp, err := h.api.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: scaleRevision(1000 + int(rev) + 1), File: "temps.yaml"})
		if err != nil {
			b.Fatal(err)
		}
		rev = resp.GetRevision().GetRevision()
		t0 := time.Now()
		if _, err := h.api.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "temps",
			Pipelines: []*runnelv1.PipelineRef{{Name: "temps", Revision: rev}}}}); err != nil {
			b.Fatal(err)
		}
		return scaleWaitApplied(b, h.rec, ids, rev, t0, time.Minute)
	}
	// The first deployment starts the pipeline on every edge; the changes
	// measured replace it.
	first := change()
	slices.Sort(first)
	b.Logf("first deployment (start temps@1): p50 %s, max %s", scalePercentile(first, 50), first[len(first)-1])

	var all []time.Duration
	for b.Loop() {
		all = append(all, change()...)
	}
	slices.Sort(all)
	b.ReportMetric(float64(scalePercentile(all, 50).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(scalePercentile(all, 99).Milliseconds()), "p99-ms")
	b.ReportMetric(float64(all[len(all)-1].Milliseconds()), "max-ms")
	b.ReportMetric(n, "edges")
}

// scaleProcStat reads a process's CPU time (utime + stime) and resident set
// from /proc: fields 14 and 15 of /proc/PID/stat, in ticks of 1/100 s
// (fields counted after the command name, which may hold spaces), and
// VmRSS and VmHWM of /proc/PID/status.
func scaleProcStat(tb testing.TB, pid int) (cpu time.Duration, rss, peak int64) {
	tb.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // f[0] is field 3
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, rss, peak
}

// scaleSim is a simulated edge: a control stream with its edge token,
// that registers, applies each desired set at once (reports it running)
// and sends a typical status every interval.
type scaleSim struct {
	id   string
	conn *grpc.ClientConn
	// uplink: the edge also holds its uplink stream, idle after the
	// Resume (a real edge between two windows' batches).
	uplink bool
}

// scaleSimStatus is a typical report: the pipelines of the applied set
// running, a few entries in the outbox, disk in use, rates that wander.
func scaleSimStatus(ds *runnelv1.DesiredSet, rng *rand.Rand) *runnelv1.EdgeStatus {
	now := time.Now().UnixMilli()
	st := &runnelv1.EdgeStatus{AppliedGeneration: ds.GetGeneration(), AtMs: now,
		OutboxEntries: uint64(rng.IntN(20)), OldestUnsentMs: int64(rng.IntN(2000)),
		DiskUsedBytes: 40<<20 + rng.Int64N(1<<20), DiskCapBytes: 1 << 30,
		RecordsPerMin: 600 + float64(rng.IntN(60)), LatePerMin: float64(rng.IntN(3))}
	for _, p := range ds.GetPipelines() {
		lag := 1000 + rng.Int64N(1000)
		st.Pipelines = append(st.Pipelines, &runnelv1.PipelineStatus{Name: p.GetName(), Revision: p.GetRevision(), State: "running",
			WatermarkMs: now - lag, WatermarkLagMs: lag})
	}
	return st
}

// run keeps the edge's control stream until ctx ends; the first status
// goes after offset, then one every interval. sent counts statuses.
func (s *scaleSim) run(ctx context.Context, offset, interval time.Duration, sent *atomic.Int64) error {
	if s.uplink {
		up, err := runnelv1.NewUplinkClient(s.conn).Sync(ctx, grpc.PerRPCCredentials(scaleBearer(scaleToken(s.id))))
		if err != nil {
			return err
		}
		if err := up.Send(&runnelv1.SyncRequest{Msg: &runnelv1.SyncRequest_Hello{Hello: &runnelv1.Hello{EdgeId: s.id, Epoch: 1, NextSeq: 1}}}); err != nil {
			return err
		}
		if _, err := up.Recv(); err != nil {
			return fmt.Errorf("uplink: %w", err)
		}
		defer up.CloseSend()
	}
	stream, err := runnelv1.NewControlClient(s.conn).Connect(ctx, grpc.PerRPCCredentials(scaleBearer(scaleToken(s.id))))
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(uint64(len(s.id)), uint64(offset)))
	ds := &runnelv1.DesiredSet{}
	hws := []string{"rpi4", "cm4", "x86"}
	n, _ := strconv.Atoi(strings.TrimPrefix(s.id, "sim-"))
	reg := &runnelv1.Register{EdgeId: s.id, Version: "v1.4.2", Os: "linux", Arch: "arm64", Status: scaleSimStatus(ds, rng),
		Labels: map[string]string{"site": fmt.Sprintf("plant-%d", n%50), "hw": hws[n%3], "ring": fmt.Sprint(n % 4)}}
	if err := stream.Send(&runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Register{Register: reg}}); err != nil {
		return err
	}
	desired := make(chan *runnelv1.DesiredSet, 1)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case <-desired: // only the newest counts
			default:
			}
			desired <- m.GetDesired()
		}
	}()
	timer := time.NewTimer(offset)
	defer timer.Stop()
	send := func() error {
		sent.Add(1)
		return stream.Send(&runnelv1.ControlRequest{Msg: &runnelv1.ControlRequest_Status{Status: scaleSimStatus(ds, rng)}})
	}
	for {
		select {
		case d := <-desired:
			ds = d
			if err := send(); err != nil {
				return err
			}
		case <-timer.C:
			timer.Reset(interval)
			if err := send(); err != nil {
				return err
			}
		case err := <-recvErr:
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-ctx.Done():
			stream.CloseSend()
			<-recvErr
			return nil
		}
	}
}

// BenchmarkHub10kEdges: a runnel-hub process (fleet enabled, edge tokens
// from a file) holds 10,000 simulated edges, each a control stream with
// its own token, sending a typical status every 10 s (staggered), all of
// them running a deployment of one pipeline. An op is a window of steady
// state (RUNNEL_HUB_WINDOW, default 1m): the hub's CPU over it (utime +
// stime of the hub process, from /proc: the simulator's own CPU is not in
// it) as a percentage of one core; its RSS, sampled every second (the
// most and the mean); the most above its RSS at start, per edge; and the
// time of a /metrics scrape after it. perconn=1 is the field: each edge
// on a connection of its own, which pings as the edge's uplink does
// (uplink.Keepalive); perconn=100 puts 100 edges' streams on one connection, which
// tells the connections' share of the cost from the streams'. With
// ",uplink" each edge also holds its uplink stream, idle after its
// Resume, as a real edge does between two windows' batches.
// perconn=1,tls is the field over TLS (the hub's certificate from
// internal/testcert, verified by the clients). Run with
// -benchtime=1x; RUNNEL_HUB_EDGES changes the 10,000. RUNNEL_HUB_PROFILE
// names a directory: the hub is built with -tags runnelpprof, and after
// the window its heap profile (after a collection) and goroutine profile
// are saved there, and a CPU profile of 30 s after it:
// hub-CASE-heap.pb.gz, -goroutine.pb.gz and -profile.pb.gz (CASE:
// perconn=1 and so on), and a heap profile before the window,
// -heap0.pb.gz (go tool pprof -sample_index=alloc_space -base
// heap0 heap: what the window allocated).
// RUNNEL_HUB_ENV adds NAME=value pairs (space-separated) to the hub's
// environment, such as GOGC=50.
func BenchmarkHub10kEdges(b *testing.B) {
	n := 10000
	if s := os.Getenv("RUNNEL_HUB_EDGES"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			b.Fatalf("RUNNEL_HUB_EDGES=%q: want a count of edges", s)
		}
	}
	window := time.Minute
	if s := os.Getenv("RUNNEL_HUB_WINDOW"); s != "" {
		var err error
		if window, err = time.ParseDuration(s); err != nil || window <= 0 {
			b.Fatalf("RUNNEL_HUB_WINDOW=%q: want a duration", s)
		}
	}
	scaleRaiseFileLimit(b)
	bin := b.TempDir()
	profDir := os.Getenv("RUNNEL_HUB_PROFILE")
	if profDir != "" {
		testproc.Build(b, bin, "-tags=runnelpprof", "../../cmd/runnel-hub")
	} else {
		testproc.Build(b, bin, "../../cmd/runnel-hub")
	}
	ca, err := testcert.Write(bin)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		perConn     int
		tls, uplink bool
	}{{1, false, false}, {1, false, true}, {100, false, false}, {1, true, false}, {1, true, true}} {
		name := fmt.Sprintf("perconn=%d", c.perConn)
		var files *testcert.Files
		if c.tls {
			name, files = name+",tls", &ca
		}
		if c.uplink {
			name += ",uplink"
		}
		b.Run(name, func(b *testing.B) {
			benchHubEdges(b, filepath.Join(bin, "runnel-hub"), n, c.perConn, c.uplink, window, profDir, files)
		})
	}
}

// benchHubEdges runs one case of BenchmarkHub10kEdges; with ca, the hub
// serves TLS with its certificate and the clients verify it.
func benchHubEdges(b *testing.B, hubBin string, n, perConn int, withUplink bool, window time.Duration, profDir string, ca *testcert.Files) {
	const interval = 10 * time.Second
	dir := b.TempDir()
	var tokens strings.Builder
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("sim-%05d", i)
		fmt.Fprintf(&tokens, "%s %s\n", ids[i], scaleToken(ids[i]))
	}
	tokFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokFile, []byte(tokens.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	addr, httpAddr := scaleFreeAddr(b), scaleFreeAddr(b)
	pprofAddr := ""
	if profDir != "" {
		pprofAddr = scaleFreeAddr(b)
		b.Setenv("RUNNEL_HUB_PPROF", pprofAddr)
	}
	// The Go runtime reads GOGC and GODEBUG when a process starts: set
	// here, they apply to the hub's process, not to this one.
	for _, kv := range strings.Fields(os.Getenv("RUNNEL_HUB_ENV")) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			b.Fatalf("RUNNEL_HUB_ENV: %q is not NAME=value", kv)
		}
		b.Setenv(k, v)
	}
	hubProc := &testproc.Proc{Name: "hub", Args: []string{hubBin, "--data-dir", filepath.Join(dir, "hub"),
		"--grpc-addr", addr, "--http-addr", httpAddr, "--edge-tokens-file", tokFile, "--api-token", scaleAdminToken}}
	creds, web := insecure.NewCredentials(), http.DefaultClient
	scheme := "http://"
	if ca != nil {
		hubProc.Args = append(hubProc.Args, "--tls-cert-file", ca.Cert, "--tls-key-file", ca.Key)
		pem, err := os.ReadFile(ca.CA)
		if err != nil {
			b.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(pem)
		cfg := &tls.Config{RootCAs: roots}
		creds, web, scheme = credentials.NewTLS(cfg), &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}, "https://"
	}
	metricsURL := scheme + httpAddr + "/metrics"
	hubProc.Start(b)
	defer hubProc.Kill()
	hubProc.WaitLog(b, "runnel-hub: ready")
	pid := hubProc.Cmd.Process.Pid
	time.Sleep(time.Second)
	_, rss0, _ := scaleProcStat(b, pid)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	var firstErr atomic.Value
	var conns []*grpc.ClientConn
	defer func() {
		cancel()
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for i, id := range ids {
		if i%perConn == 0 {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
				// As the edge's uplink dials.
				grpc.WithKeepaliveParams(uplink.Keepalive),
				// The simulator's side of 10,000 connections: small buffers.
				grpc.WithReadBufferSize(4<<10), grpc.WithWriteBufferSize(4<<10))
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, conn)
		}
		sim := &scaleSim{id: id, conn: conns[len(conns)-1], uplink: withUplink}
		offset := interval * time.Duration(i) / time.Duration(n)
		wg.Go(func() {
			if err := sim.run(ctx, offset, interval, &sent); err != nil && ctx.Err() == nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Errorf("%s: %w", id, err))
			}
		})
		if i%200 == 199 {
			time.Sleep(50 * time.Millisecond) // a ramp, not a stampede
		}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds), grpc.WithPerRPCCredentials(scaleBearer(scaleAdminToken)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	api := runnelv1.NewFleetClient(conn)
	waitAPI := func(what string, ok func() (string, error)) {
		b.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			why, err := ok()
			if err != nil {
				b.Fatalf("%s: %v", what, err)
			}
			if why == "" {
				return
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: %s", what, why)
			}
			if f := failed.Load(); f > 0 {
				b.Fatalf("%s: %d simulated edges failed, first %v", what, f, firstErr.Load())
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	waitAPI("registration", func() (string, error) {
		es, err := api.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{}, grpc.MaxCallRecvMsgSize(1<<30))
		if err != nil {
			return "", err
		}
		up := 0
		for _, e := range es.GetEdges() {
			if e.GetConnected() {
				up++
			}
		}
		if up < n {
			return fmt.Sprintf("%d of %d connected", up, n), nil
		}
		return "", nil
	})
	b.Logf("%d simulated edges on %d connections connected in %s", n, len(conns), time.Since(start).Round(time.Millisecond))
	if _, err := api.ApplyPipeline(ctx, &runnelv1.ApplyPipelineRequest{Spec: scaleRevision(1000)}); err != nil {
		b.Fatal(err)
	}
	if _, err := api.ApplyDeployment(ctx, &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "temps",
		Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}}}}); err != nil {
		b.Fatal(err)
	}
	waitAPI("deployment", func() (string, error) {
		d, err := api.GetDeployment(ctx, &runnelv1.GetDeploymentRequest{Name: "temps"})
		if err != nil {
			return "", err
		}
		if r := d.GetRollout(); r.GetPhase() != "succeeded" || r.GetApplied() != uint32(n) {
			return fmt.Sprintf("%s, %d of %d applied", r.GetPhase(), r.GetApplied(), r.GetTargeted()), nil
		}
		return "", nil
	})
	// Steady state: a whole status round after the deployment.
	time.Sleep(interval + time.Second)

	var cpuPct, rssMB, meanMB, perEdge, statusRate, scrapeMs float64
	for b.Loop() {
		if pprofAddr != "" { // the window's allocations: pprof -base heap0 heap
			name := fmt.Sprintf("hub-%s-heap0.pb.gz", strings.TrimPrefix(b.Name(), "BenchmarkHub10kEdges/"))
			scaleSaveProfile(b, "http://"+pprofAddr+"/debug/pprof/heap?gc=1", filepath.Join(profDir, name))
		}
		// The Go runtime's counters at the start (a scrape before the
		// window, so that its CPU is not in it).
		before := scaleScrape(b, web, metricsURL)
		cpu0, _, _ := scaleProcStat(b, pid)
		sent0, t0 := sent.Load(), time.Now()
		// RSS goes up and down with the garbage collector: sampled every
		// second, the most is what the hub needs.
		var most, sum, samples int64
		for time.Since(t0) < window {
			time.Sleep(min(time.Second, window-time.Since(t0)))
			_, rss, _ := scaleProcStat(b, pid)
			most, sum, samples = max(most, rss), sum+rss, samples+1
		}
		cpu1, _, peak := scaleProcStat(b, pid)
		el := time.Since(t0)
		if f := failed.Load(); f > 0 {
			b.Fatalf("%d simulated edges failed, first %v", f, firstErr.Load())
		}
		cpuPct = 100 * float64(cpu1-cpu0) / float64(el)
		rssMB, meanMB = float64(most)/(1<<20), float64(sum/samples)/(1<<20)
		perEdge = float64(most-rss0) / float64(n)
		statusRate = float64(sent.Load()-sent0) / el.Seconds()
		b.Logf("hub over %s: CPU %s (%.2f%% of a core), RSS at most %.1f MiB, %.1f on average (%.1f at start, peak ever %.1f), %.0f statuses/s",
			el.Round(time.Millisecond), cpu1-cpu0, cpuPct, rssMB, meanMB, float64(rss0)/(1<<20), float64(peak)/(1<<20), statusRate)
		// A Prometheus scrape (fleet.edge_metrics at its default: at
		// 10,000 edges, aggregates only).
		t1 := time.Now()
		body := scaleScrape(b, web, metricsURL)
		scrapeMs = float64(time.Since(t1).Microseconds()) / 1e3
		b.Logf("a scrape of /metrics: %.1f ms, %d bytes, %d lines", scrapeMs, len(body), bytes.Count(body, []byte("\n")))
		mb := func(name string) float64 { return scaleGauge(body, name) / (1 << 20) }
		delta := func(name string) float64 { return scaleGauge(body, name) - scaleGauge(before, name) }
		b.Logf("hub's Go runtime: heap in use %.1f MiB (%.1f allocated, next collection at %.1f), idle %.1f (%.1f of it returned to the OS), "+
			"stacks %.1f MiB, runtime metadata %.1f (spans %.1f, GC %.1f), %.0f goroutines, %.1f MiB from the OS; "+
			"over the window %.0f collections, %.2f MiB/s allocated",
			mb("go_memstats_heap_inuse_bytes"), mb("go_memstats_heap_alloc_bytes"), mb("go_memstats_next_gc_bytes"),
			mb("go_memstats_heap_idle_bytes"), mb("go_memstats_heap_released_bytes"), mb("go_memstats_stack_inuse_bytes"),
			mb("go_memstats_mspan_sys_bytes")+mb("go_memstats_mcache_sys_bytes")+mb("go_memstats_gc_sys_bytes")+mb("go_memstats_other_sys_bytes")+mb("go_memstats_buck_hash_sys_bytes"),
			mb("go_memstats_mspan_sys_bytes"), mb("go_memstats_gc_sys_bytes"),
			scaleGauge(body, "go_goroutines"), mb("go_memstats_sys_bytes"),
			delta("go_gc_duration_seconds_count"), delta("go_memstats_alloc_bytes_total")/(1<<20)/el.Seconds())
		if pprofAddr != "" {
			for _, p := range []string{"heap?gc=1", "goroutine", "profile?seconds=30"} {
				what, _, _ := strings.Cut(p, "?")
				name := fmt.Sprintf("hub-%s-%s.pb.gz", strings.TrimPrefix(b.Name(), "BenchmarkHub10kEdges/"), what)
				scaleSaveProfile(b, "http://"+pprofAddr+"/debug/pprof/"+p, filepath.Join(profDir, name))
			}
		}
	}
	b.ReportMetric(scrapeMs, "scrape-ms")
	b.ReportMetric(cpuPct, "hub-cpu-%")
	b.ReportMetric(rssMB, "hub-rss-MiB")
	b.ReportMetric(meanMB, "hub-rss-mean-MiB")
	b.ReportMetric(perEdge, "bytes/edge")
	b.ReportMetric(statusRate, "statuses/s")
}

// scaleScrape is the hub's /metrics, at url.
func scaleScrape(tb testing.TB, web *http.Client, url string) []byte {
	tb.Helper()
	resp, err := web.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return body
}

// scaleGauge is the value of an unlabelled metric in a Prometheus text
// exposition, or NaN if it has none.
func scaleGauge(body []byte, name string) float64 {
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return f
			}
		}
	}
	return math.NaN()
}

// scaleSaveProfile saves the profile url answers to path.
func scaleSaveProfile(tb testing.TB, url, path string) {
	tb.Helper()
	resp, err := http.Get(url)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		tb.Fatalf("%s: %d %v", url, resp.StatusCode, err)
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("profile saved to %s", path)
}

func scaleFreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
