package fleet_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/hub/fleet"
	"github.com/runnel-io/runnel/hub/server"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The server serves the Fleet through this interface; hub/server does not
// import this package.
var _ server.FleetCore = (*fleet.Fleet)(nil)

// Specs of one pipeline: rev2 changes only the filter (compatible with
// rev1), rev3 the window (incompatible).
const (
	tempsV1 = `name: temps
source: {mqtt: {topic: "t/+"}}
event_time: {field: ts}
key: [device]
window: {tumbling: 1m}
aggregates:
  n: count()
  hi: max(v)
`
	tempsV2 = `name: temps
source: {mqtt: {topic: "t/+"}}
event_time: {field: ts}
key: [device]
filter: "v > -40"
window: {tumbling: 1m}
aggregates:
  n: count()
  hi: max(v)
`
	tempsV3 = `name: temps
source: {mqtt: {topic: "t/+"}}
event_time: {field: ts}
key: [device]
filter: "v > -40"
window: {tumbling: 5m}
aggregates:
  n: count()
  hi: max(v)
`
	humidV1 = `name: humid
source: {mqtt: {topic: "h/+"}}
event_time: {field: ts}
key: [device]
window: {tumbling: 1m}
aggregates:
  n: count()
`
)

// clock is the fleet's simulated wall clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.UnixMilli(1_700_000_000_000)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// harness opens Fleets on one directory with a simulated clock and no
// background goroutine: the test calls Evaluate.
type harness struct {
	t     testing.TB
	dir   string
	clock *clock
	opts  fleet.Options
	*fleet.Fleet
}

func newHarness(t testing.TB, tweak func(*fleet.Options)) *harness {
	t.Helper()
	h := &harness{t: t, dir: t.TempDir(), clock: newClock()}
	h.opts = fleet.Options{Now: h.clock.Now, Tick: -1, NoSync: true}
	if tweak != nil {
		tweak(&h.opts)
	}
	h.open()
	t.Cleanup(func() {
		if h.Fleet != nil {
			h.Fleet.Close()
		}
	})
	return h
}

func (h *harness) open() {
	h.t.Helper()
	f, err := fleet.Open(h.dir, h.opts)
	if err != nil {
		h.t.Fatalf("Open: %v", err)
	}
	h.Fleet = f
}

// reopen closes the Fleet cleanly and opens it again.
func (h *harness) reopen() {
	h.t.Helper()
	if err := h.Fleet.Close(); err != nil {
		h.t.Fatalf("Close: %v", err)
	}
	h.open()
}

// crash copies the store as it is on disk now (every commit so far, as
// after a SIGKILL: nothing of what Close would still write), abandons the
// running Fleet and opens the copy in its place.
func (h *harness) crash() {
	h.t.Helper()
	dir := h.t.TempDir()
	copyFile(h.t, filepath.Join(h.dir, "fleet.db"), filepath.Join(dir, "fleet.db"))
	old := h.Fleet
	h.dir = dir
	h.open()
	// The old one must not write to its file again; it is closed only to
	// release the file and its goroutines.
	old.Close()
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) evaluate() {
	h.t.Helper()
	if err := h.Evaluate(); err != nil {
		h.t.Fatalf("Evaluate: %v", err)
	}
}

func (h *harness) applyPipeline(yaml string) *runnelv1.PipelineRevision {
	h.t.Helper()
	resp, err := h.ApplyPipeline("alice", &runnelv1.ApplyPipelineRequest{Spec: yaml, File: "p.yaml"})
	if err != nil {
		h.t.Fatalf("ApplyPipeline: %v", err)
	}
	return resp.Revision
}

func (h *harness) applyDeployment(spec *runnelv1.DeploymentSpec) *runnelv1.Deployment {
	h.t.Helper()
	d, err := h.ApplyDeployment("alice", &runnelv1.ApplyDeploymentRequest{Spec: spec})
	if err != nil {
		h.t.Fatalf("ApplyDeployment: %v", err)
	}
	return d
}

func (h *harness) deployment(name string) *runnelv1.Deployment {
	h.t.Helper()
	d, err := h.GetDeployment(name)
	if err != nil {
		h.t.Fatalf("GetDeployment: %v", err)
	}
	return d
}

func (h *harness) rollout(name, action string) *runnelv1.Deployment {
	h.t.Helper()
	d, err := h.Rollout("bob", name, action)
	if err != nil {
		h.t.Fatalf("Rollout %s: %v", action, err)
	}
	return d
}

// simEdge is an in-memory edge agent: it holds a control stream, applies
// each desired set it receives and reports its status.
type simEdge struct {
	id     string
	labels map[string]string
	cancel context.CancelFunc
	ch     <-chan *runnelv1.DesiredSet
	// applied is the last set applied; history every generation seen.
	applied *runnelv1.DesiredSet
	history []*runnelv1.DesiredSet
	status  *runnelv1.EdgeStatus
	// failOn makes the apply of a pipeline revision fail ("temps@2");
	// failRun makes it apply, then fail running, with the error given.
	failOn  map[string]bool
	failRun map[string]string
	// deadRate is the fraction of records it dead-letters.
	deadRate float64
	// offline: not reachable; it does not poll and does not reconnect.
	offline bool
}

func newSimEdge(id string, labels map[string]string) *simEdge {
	return &simEdge{id: id, labels: labels, failOn: map[string]bool{}}
}

func (e *simEdge) connect(t testing.TB, f *fleet.Fleet) {
	t.Helper()
	if e.cancel != nil {
		e.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := f.Connect(ctx, e.id, &runnelv1.Register{EdgeId: e.id, Labels: e.labels, Version: "v1.0.0", Os: "linux", Arch: "arm64", Status: e.status}, nil)
	if err != nil {
		cancel()
		t.Fatalf("Connect %s: %v", e.id, err)
	}
	e.cancel, e.ch = cancel, ch
}

func (e *simEdge) disconnect() {
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
	}
}

// poll applies the newest set waiting, if any, and reports; it returns
// whether there was one.
func (e *simEdge) poll(t testing.TB, f *fleet.Fleet) bool {
	t.Helper()
	var ds *runnelv1.DesiredSet
	for done := false; !done; {
		select {
		case next, ok := <-e.ch:
			if !ok {
				e.ch = nil
				done = true
			} else {
				ds = next
			}
		default:
			done = true
		}
	}
	return ds != nil && e.apply(t, f, ds)
}

func (e *simEdge) apply(t testing.TB, f *fleet.Fleet, ds *runnelv1.DesiredSet) bool {
	t.Helper()
	if e.applied != nil && ds.Generation == e.applied.Generation {
		return false
	}
	e.history = append(e.history, ds)
	st := &runnelv1.EdgeStatus{AppliedGeneration: ds.Generation, RecordsPerMin: 100, DeadPerMin: 100 * e.deadRate}
	var errs []string
	for _, p := range ds.Pipelines {
		key := fmt.Sprintf("%s@%d", p.Name, p.Revision)
		if e.failOn[key] {
			errs = append(errs, key+": refused")
		}
	}
	if len(errs) > 0 {
		// Refused: keeps running what it had, reports the error.
		st.ApplyError = strings.Join(errs, "\n")
		if e.status != nil {
			st.Pipelines = e.status.Pipelines
		}
	} else {
		e.applied = ds
		for _, p := range ds.Pipelines {
			ps := &runnelv1.PipelineStatus{Name: p.Name, Revision: p.Revision, State: "running"}
			if msg, ok := e.failRun[fmt.Sprintf("%s@%d", p.Name, p.Revision)]; ok {
				ps.State, ps.Error = "failed", msg
			}
			st.Pipelines = append(st.Pipelines, ps)
		}
	}
	e.status = st
	if err := f.Status(e.id, proto.Clone(st).(*runnelv1.EdgeStatus)); err != nil {
		t.Fatalf("Status %s: %v", e.id, err)
	}
	return true
}

// running returns what the edge runs: "temps@2,humid@1" sorted by name.
func (e *simEdge) running() string {
	if e.applied == nil {
		return ""
	}
	var s []string
	for _, p := range e.applied.Pipelines {
		s = append(s, fmt.Sprintf("%s@%d", p.Name, p.Revision))
	}
	return strings.Join(s, ",")
}

// snapshot reads the whole state back through the API, for comparisons.
// Times of the last contact and connection flags are left out: they
// describe the streams, not the state.
func snapshot(t testing.TB, f *fleet.Fleet) string {
	t.Helper()
	var b strings.Builder
	m := prototext.MarshalOptions{}
	add := func(label string, msg proto.Message) {
		b.WriteString(label)
		b.WriteString(": ")
		b.WriteString(m.Format(msg))
		b.WriteByte('\n')
	}
	for _, p := range f.ListPipelines() {
		add("pipeline", p)
		revs, err := f.ListRevisions(p.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range revs {
			add("  revision", r)
		}
	}
	edges, err := f.ListEdges("")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edges {
		e.LastSeenMs, e.Connected = 0, false
		add("edge", e)
	}
	for _, d := range f.ListDeployments() {
		vs, err := f.DeploymentVersions(d.Spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			add("deployment", v)
		}
	}
	for _, a := range f.Audit(0, fleet.MaxAuditLimit) {
		add("audit", a)
	}
	for _, tk := range f.ListTokens() {
		add("token", tk)
	}
	return b.String()
}
