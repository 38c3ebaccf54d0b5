package fleet_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/hub/fleet"
	"github.com/runnel-io/runnel/hub/fleet/selector"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// world is a fleet of simulated edges around one harness.
type world struct {
	t     testing.TB
	h     *harness
	edges []*simEdge
	byID  map[string]*simEdge
}

// newWorld makes n edges with mixed random labels (site, hw, a legacy
// flag on about one in eight), connected.
func newWorld(t testing.TB, seed uint64, n int) *world {
	t.Helper()
	w := &world{t: t, h: newHarness(t, nil), byID: map[string]*simEdge{}}
	r := rand.New(rand.NewPCG(seed, 1))
	sites := []string{"a", "b", "c", "d"}
	hws := []string{"rpi4", "cm4", "x86"}
	for i := range n {
		labels := map[string]string{"site": sites[r.IntN(len(sites))], "hw": hws[r.IntN(len(hws))]}
		if r.IntN(8) == 0 {
			labels["legacy"] = "true"
		}
		w.add(newSimEdge(fmt.Sprintf("e-%03d", i), labels))
	}
	t.Cleanup(func() {
		for _, e := range w.edges {
			e.disconnect()
		}
	})
	return w
}

func (w *world) add(e *simEdge) *simEdge {
	w.edges = append(w.edges, e)
	w.byID[e.id] = e
	e.connect(w.t, w.h.Fleet)
	return e
}

// settle lets every edge apply what it was sent and report, until none
// has anything new.
func (w *world) settle() {
	w.t.Helper()
	for more := true; more; {
		more = false
		for _, e := range w.edges {
			if !e.offline && e.ch != nil && e.poll(w.t, w.h.Fleet) {
				more = true
			}
		}
	}
}

// reconnect connects every edge again, with the status it last reported,
// as edges do after a hub restart.
func (w *world) reconnect() {
	w.t.Helper()
	for _, e := range w.edges {
		if !e.offline {
			e.connect(w.t, w.h.Fleet)
		}
	}
}

func (w *world) matching(sel string) []*simEdge {
	w.t.Helper()
	s, err := selector.Parse(sel)
	if err != nil {
		w.t.Fatal(err)
	}
	var out []*simEdge
	for _, e := range w.edges {
		fe, err := w.h.GetEdge(e.id)
		if err != nil {
			w.t.Fatal(err)
		}
		if s.Matches(fe.Labels) {
			out = append(out, e)
		}
	}
	return out
}

// ever reports whether the edge was ever sent the pipeline revision.
func (e *simEdge) ever(name string, rev uint32) bool {
	for _, ds := range e.history {
		for _, p := range ds.Pipelines {
			if p.Name == name && p.Revision == rev {
				return true
			}
		}
	}
	return false
}

// wantEnds is the step plan written out from the rule, apart from the
// code under test.
func wantEnds(n int, s *runnelv1.Strategy) []int {
	if n == 0 {
		return nil
	}
	if !s.Staged {
		return []int{n}
	}
	size := func(count, pct uint32) int {
		if pct > 0 {
			return int(math.Ceil(float64(pct) * float64(n) / 100))
		}
		return int(count)
	}
	canary := max(1, min(size(s.Canary, s.CanaryPercent), n))
	batch := max(1, size(s.Batch, s.BatchPercent))
	ends := []int{canary}
	for ends[len(ends)-1] < n {
		ends = append(ends, min(ends[len(ends)-1]+batch, n))
	}
	return ends
}

const prodSelector = "hw in (rpi4,cm4),!legacy"

func tempsAt(rev uint32) []*runnelv1.PipelineRef {
	return []*runnelv1.PipelineRef{{Name: "temps", Revision: rev}}
}

// baseline deploys temps@1 to prodSelector all at once and checks that
// exactly the selected edges run it.
func (w *world) baseline() []*simEdge {
	w.t.Helper()
	h := w.h
	h.applyPipeline(tempsV1)
	h.applyPipeline(tempsV2)
	h.applyPipeline(tempsV3)
	d := h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(1)})
	targets := w.matching(prodSelector)
	if d.Rollout.Targeted != uint32(len(targets)) || d.Rollout.Steps != 1 {
		w.t.Fatalf("v1: %v, want %d targets in one step", d.Rollout, len(targets))
	}
	w.settle()
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Phase != fleet.PhaseSucceeded || d.Rollout.Applied != uint32(len(targets)) {
		w.t.Fatalf("v1 rollout: %v", d.Rollout)
	}
	for _, e := range w.edges {
		want := ""
		if slices.Contains(targets, e) {
			want = "temps@1"
		}
		if e.running() != want {
			w.t.Fatalf("%s runs %q, want %q", e.id, e.running(), want)
		}
	}
	return targets
}

// TestRolloutStaged: a staged rollout to a selector reaches exactly the
// selected edges, in the configured steps, each after the one before was
// healthy for the soak time; edges outside never get it.
func TestRolloutStaged(t *testing.T) {
	strategies := []*runnelv1.Strategy{
		{Staged: true, Canary: 3, Batch: 10, SoakMs: 30_000},
		{Staged: true, CanaryPercent: 5, BatchPercent: 30, SoakMs: 10_000},
		{Staged: true, Canary: 1, BatchPercent: 100, SoakMs: 0},
	}
	for seed := range uint64(6) {
		s := strategies[seed%uint64(len(strategies))]
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			w := newWorld(t, seed, 100+int(seed)*7)
			h := w.h
			targets := w.baseline()
			if len(targets) < 30 {
				t.Fatalf("only %d targets: the labels are not mixed enough", len(targets))
			}
			d := h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(2), Strategy: s})
			ends := wantEnds(len(targets), s)
			if d.Version != 2 || d.Rollout.Steps != uint32(len(ends)) || d.Rollout.Phase != fleet.PhaseProgressing {
				t.Fatalf("v2: %v, want %d steps", d.Rollout, len(ends))
			}
			for k := range ends {
				// The step's edges have their sets, and have not said
				// yet: the rollout says what it waits for.
				h.evaluate()
				want := fmt.Sprintf("step %d of %d waits for", k+1, len(ends))
				if m := h.deployment("prod").Rollout.Message; !strings.HasPrefix(m, want) || !strings.Contains(m, "edge ") {
					t.Fatalf("step %d: message %q, want %q and the edges", k, m, want)
				}
				w.settle()
				// Exactly the targets of steps 0..k run revision 2.
				for i, e := range targets {
					want := "temps@1"
					if i < ends[k] {
						want = "temps@2"
					}
					if e.running() != want {
						t.Fatalf("step %d: %s (target %d) runs %q, want %q", k, e.id, i, e.running(), want)
					}
				}
				h.evaluate()
				d := h.deployment("prod")
				if s.SoakMs > 0 {
					if d.Rollout.Step != uint32(k) || d.Rollout.Phase != fleet.PhaseProgressing || d.Rollout.HealthySinceMs != h.clock.Now().UnixMilli() {
						t.Fatalf("step %d before the soak: %v", k, d.Rollout)
					}
					h.clock.Advance(time.Duration(s.SoakMs-1) * time.Millisecond)
					h.evaluate()
					if d := h.deployment("prod"); d.Rollout.Step != uint32(k) || d.Rollout.Phase != fleet.PhaseProgressing {
						t.Fatalf("step %d advanced before its soak: %v", k, d.Rollout)
					} else if want := fmt.Sprintf("step %d of %d healthy", k+1, len(ends)); !strings.HasPrefix(d.Rollout.Message, want) || !strings.Contains(d.Rollout.Message, "soaking 100ms more") {
						t.Fatalf("step %d soaking: message %q", k, d.Rollout.Message)
					}
					h.clock.Advance(time.Millisecond)
					h.evaluate()
				}
				d = h.deployment("prod")
				if k < len(ends)-1 {
					if d.Rollout.Step != uint32(k+1) || d.Rollout.Phase != fleet.PhaseProgressing || d.Rollout.StepStartedMs != h.clock.Now().UnixMilli() {
						t.Fatalf("after step %d: %v", k, d.Rollout)
					}
					if d.Rollout.Applied != uint32(ends[k]) || d.Rollout.Pending != uint32(len(targets)-ends[k]) {
						t.Fatalf("after step %d: applied %d pending %d, want %d and %d", k, d.Rollout.Applied, d.Rollout.Pending, ends[k], len(targets)-ends[k])
					}
				}
			}
			w.settle()
			h.evaluate()
			d = h.deployment("prod")
			if d.Rollout.Phase != fleet.PhaseSucceeded || d.Rollout.Applied != uint32(len(targets)) || d.Rollout.Targeted != uint32(len(targets)) {
				t.Fatalf("end: %v", d.Rollout)
			}
			for _, e := range w.edges {
				in := slices.Contains(targets, e)
				if want := map[bool]string{true: "temps@2", false: ""}[in]; e.running() != want {
					t.Errorf("%s runs %q, want %q", e.id, e.running(), want)
				}
				if !in && (e.ever("temps", 1) || e.ever("temps", 2)) {
					t.Errorf("%s, outside the selector, was sent temps", e.id)
				}
			}
		})
	}
}

// TestRolloutCanaryFails: a canary edge whose apply fails stops the
// rollout; with rollback_on_failure the edges it touched get their prior
// version back, and no edge past the canary ever saw the new one.
func TestRolloutCanaryFails(t *testing.T) {
	for _, c := range []struct {
		name     string
		rollback bool
		how      string // "apply" (the set is refused) or "run" (the pipeline fails)
	}{
		{"refused/rollback", true, "apply"},
		{"refused/no rollback", false, "apply"},
		{"pipeline failed/rollback", true, "run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, 42, 120)
			h := w.h
			targets := w.baseline()
			bad := targets[2]
			if c.how == "apply" {
				bad.failOn["temps@2"] = true
			} else {
				bad.failRun = map[string]string{"temps@2": "decoder: field ts missing"}
			}
			s := &runnelv1.Strategy{Staged: true, Canary: 4, Batch: 20, SoakMs: 1000, RollbackOnFailure: c.rollback}
			h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(2), Strategy: s})
			w.settle()
			h.evaluate()
			d := h.deployment("prod")
			r := d.Rollout
			if r.Phase != fleet.PhaseFailed || r.Step != 0 || !slices.Equal(r.FailedEdges, []string{bad.id}) || r.RolledBack != c.rollback {
				t.Fatalf("rollout: %v", r)
			}
			wantMsg := "temps@2: refused"
			if c.how == "run" {
				wantMsg = "pipeline temps revision 2 failed: decoder: field ts missing"
			}
			if !strings.Contains(r.Message, "edge "+bad.id) || !strings.Contains(r.Message, wantMsg) || !strings.Contains(r.Message, "step 1 of") {
				t.Errorf("message %q does not name the edge and its error", r.Message)
			}
			// Nothing advances any more.
			h.clock.Advance(time.Hour)
			h.evaluate()
			w.settle()
			h.evaluate()
			if d := h.deployment("prod"); d.Rollout.Phase != fleet.PhaseFailed || d.Rollout.Step != 0 {
				t.Fatalf("a failed rollout moved: %v", d.Rollout)
			}
			for i, e := range targets {
				want := "temps@1"
				switch {
				case i < 4 && !c.rollback && e != bad:
					want = "temps@2" // touched and left on it
				}
				if e.running() != want {
					t.Errorf("%s (target %d) runs %q, want %q", e.id, i, e.running(), want)
				}
				if i >= 4 && e.ever("temps", 2) {
					t.Errorf("%s, past the canary, was sent temps@2", e.id)
				}
			}
			audit := h.Audit(0, 0)
			last := audit[len(audit)-1]
			wantAction := map[bool]string{true: "rollout.rollback", false: "rollout.fail"}[c.rollback]
			if last.Who != fleet.SystemAuthor || last.Action != wantAction || last.Object != "deployment/prod" || !strings.Contains(last.After, bad.id) {
				t.Errorf("audit: %v", last)
			}
			// A new version after the failure rolls out again.
			delete(bad.failOn, "temps@2")
			bad.failRun = nil
			d = h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(3), Strategy: &runnelv1.Strategy{}})
			w.settle()
			h.evaluate()
			if d := h.deployment("prod"); d.Version != 3 || d.Rollout.Phase != fleet.PhaseSucceeded {
				t.Fatalf("v3: %v", d.Rollout)
			}
			for _, e := range targets {
				if e.running() != "temps@3" {
					t.Errorf("%s runs %q after v3", e.id, e.running())
				}
			}
		})
	}
}

// TestRolloutGateHealth: the gate waits for the dead-letter rate to be
// under the bound, and a step that stays unhealthy past the progress
// deadline fails the rollout.
func TestRolloutGateHealth(t *testing.T) {
	w := newWorld(t, 7, 100)
	h := w.h
	targets := w.baseline()
	canary := targets[0]
	canary.deadRate = 0.2
	s := &runnelv1.Strategy{Staged: true, Canary: 1, Batch: 1000, SoakMs: 5000, MaxDeadLetterRate: 0.1, ProgressDeadlineMs: 60_000}
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(2), Strategy: s})
	w.settle()
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.HealthySinceMs != 0 || d.Rollout.Applied != 0 || d.Rollout.Pending != uint32(len(targets)) {
		t.Fatalf("healthy with 20%% dead letters: %v", d.Rollout)
	}
	// Under the bound: healthy, the soak starts.
	h.clock.Advance(10 * time.Second)
	canary.status.DeadPerMin = 5
	if err := h.Status(canary.id, canary.status); err != nil {
		t.Fatal(err)
	}
	h.evaluate()
	since := h.clock.Now().UnixMilli()
	if d := h.deployment("prod"); d.Rollout.HealthySinceMs != since || d.Rollout.Applied != 1 {
		t.Fatalf("not healthy at 5%% dead letters: %v", d.Rollout)
	}
	// A break resets the soak.
	h.clock.Advance(4 * time.Second)
	if err := h.Status(canary.id, &runnelv1.EdgeStatus{AppliedGeneration: canary.status.AppliedGeneration, Pipelines: canary.status.Pipelines, RecordsPerMin: 10, DeadPerMin: 5}); err != nil {
		t.Fatal(err)
	}
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.HealthySinceMs != 0 {
		t.Fatalf("healthy at 50%% dead letters: %v", d.Rollout)
	}
	// Past the deadline with the gate not met: failed, naming why.
	h.clock.Advance(47 * time.Second) // 61 s after the step started
	h.evaluate()
	d := h.deployment("prod")
	if d.Rollout.Phase != fleet.PhaseFailed || !strings.Contains(d.Rollout.Message, "progress deadline") || !strings.Contains(d.Rollout.Message, "dead-letters 50.0%") || !slices.Equal(d.Rollout.FailedEdges, []string{canary.id}) {
		t.Fatalf("after the deadline: %v", d.Rollout)
	}
	// No records at all is healthy; an edge that never applies fails the
	// deadline too.
	canary.deadRate = 0
	silent := targets[1]
	silent.disconnect()
	silent.ch = nil
	s = &runnelv1.Strategy{Staged: true, Canary: 2, Batch: 1000, ProgressDeadlineMs: 60_000}
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(3), Strategy: s})
	w.settle()
	if err := h.Status(canary.id, &runnelv1.EdgeStatus{AppliedGeneration: canary.status.AppliedGeneration, Pipelines: canary.status.Pipelines}); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(60 * time.Second)
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Phase != fleet.PhaseProgressing {
		t.Fatalf("failed at the deadline, not past it: %v", d.Rollout)
	}
	h.clock.Advance(time.Millisecond)
	h.evaluate()
	d = h.deployment("prod")
	if d.Rollout.Phase != fleet.PhaseFailed || !slices.Equal(d.Rollout.FailedEdges, []string{silent.id}) || !strings.Contains(d.Rollout.Message, "edge "+silent.id+": applied generation") {
		t.Fatalf("silent edge: %v", d.Rollout)
	}
}

// TestRolloutActions: pause holds the steps, resume restarts the soak,
// abort puts the touched edges back, undo rolls the previous content out
// at once; other transitions are refused.
func TestRolloutActions(t *testing.T) {
	w := newWorld(t, 3, 100)
	h := w.h
	targets := w.baseline()
	s := &runnelv1.Strategy{Staged: true, Canary: 5, Batch: 10, SoakMs: 10_000}
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(2), Strategy: s})
	w.settle()
	h.evaluate() // canary healthy: soak starts
	if _, err := h.Rollout("bob", "prod", fleet.ActionResume); !errors.Is(err, fleet.ErrConflict) || !strings.Contains(err.Error(), "progressing, not paused") {
		t.Errorf("resume of a progressing rollout: %v", err)
	}
	if d := h.rollout("prod", fleet.ActionPause); d.Rollout.Phase != fleet.PhasePaused || d.Rollout.HealthySinceMs != 0 {
		t.Fatalf("pause: %v", d.Rollout)
	}
	if _, err := h.Rollout("bob", "prod", fleet.ActionPause); !errors.Is(err, fleet.ErrConflict) {
		t.Errorf("pause of a paused rollout: %v", err)
	}
	h.clock.Advance(time.Minute)
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Phase != fleet.PhasePaused || d.Rollout.Step != 0 {
		t.Fatalf("a paused rollout moved: %v", d.Rollout)
	}
	d := h.rollout("prod", fleet.ActionResume)
	if d.Rollout.Phase != fleet.PhaseProgressing || d.Rollout.StepStartedMs != h.clock.Now().UnixMilli() {
		t.Fatalf("resume: %v", d.Rollout)
	}
	h.evaluate() // soak restarts now
	h.clock.Advance(9 * time.Second)
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Step != 0 {
		t.Fatalf("resume did not restart the soak: %v", d.Rollout)
	}
	h.clock.Advance(time.Second)
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Step != 1 {
		t.Fatalf("no step after the soak: %v", d.Rollout)
	}
	w.settle()
	// Abort: the 15 touched edges go back to temps@1.
	d = h.rollout("prod", fleet.ActionAbort)
	if d.Rollout.Phase != fleet.PhaseAborted || !d.Rollout.RolledBack || !strings.Contains(d.Rollout.Message, "15 edges back") {
		t.Fatalf("abort: %v", d.Rollout)
	}
	w.settle()
	for i, e := range targets {
		if e.running() != "temps@1" {
			t.Errorf("after abort, %s (target %d) runs %q", e.id, i, e.running())
		}
		if e.ever("temps", 2) != (i < 15) {
			t.Errorf("%s (target %d): sent temps@2 = %v", e.id, i, e.ever("temps", 2))
		}
	}
	for _, a := range []string{fleet.ActionAbort, fleet.ActionPause, fleet.ActionResume} {
		if _, err := h.Rollout("bob", "prod", a); !errors.Is(err, fleet.ErrConflict) {
			t.Errorf("%s of an aborted rollout: %v", a, err)
		}
	}
	if _, err := h.Rollout("bob", "prod", "restart"); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("unknown action: %v", err)
	}
	if _, err := h.Rollout("bob", "nope", fleet.ActionPause); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("pause of an unknown deployment: %v", err)
	}
	// Undo: version 3 with version 1's content, all at once.
	d = h.rollout("prod", fleet.ActionUndo)
	if d.Version != 3 || d.Spec.Strategy.Staged || d.Resolved[0].Revision != 1 || d.Author != "bob" {
		t.Fatalf("undo: %v", d)
	}
	w.settle()
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Phase != fleet.PhaseSucceeded {
		t.Fatalf("undo rollout: %v", d.Rollout)
	}
	// Undo again: version 2's content (temps@2), the latest that differs.
	d = h.rollout("prod", fleet.ActionUndo)
	if d.Version != 4 || d.Resolved[0].Revision != 2 || d.Spec.Strategy.SoakMs != s.SoakMs {
		t.Fatalf("second undo: %v", d)
	}
	w.settle()
	h.evaluate()
	h.clock.Advance(10 * time.Second) // version 2's soak, kept by the undo
	h.evaluate()
	for _, e := range targets {
		if e.running() != "temps@2" {
			t.Errorf("after the second undo %s runs %q", e.id, e.running())
		}
	}
	vs, _ := h.DeploymentVersions("prod")
	var phases []string
	for _, v := range vs {
		phases = append(phases, v.Rollout.Phase)
	}
	if got := strings.Join(phases, ","); got != "succeeded,aborted,succeeded,succeeded" {
		t.Errorf("history phases: %s", got)
	}
	var actions []string
	for _, a := range h.Audit(0, 0) {
		if strings.HasPrefix(a.Action, "rollout.") {
			actions = append(actions, a.Action+" "+a.Before+" → "+a.After)
		}
	}
	if len(actions) != 5 || !strings.HasPrefix(actions[0], "rollout.pause version 2 progressing → version 2 paused") || !strings.Contains(actions[3], "the content of version 1") {
		t.Errorf("audit: %q", actions)
	}
	// A version that supersedes a rollout under way.
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(3), Strategy: s})
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(1), Strategy: s})
	vs, _ = h.DeploymentVersions("prod")
	if vs[4].Rollout.Phase != fleet.PhaseSuperseded || !strings.Contains(vs[4].Rollout.Message, "superseded by version 6") {
		t.Errorf("version 5: %v", vs[4].Rollout)
	}
}

// TestRolloutJoiners: an edge the selector picks later gets the version
// being rolled out when the rollout is all at once, succeeded or past its
// canary, else the last succeeded one; an edge that leaves loses the
// deployment's pipelines.
func TestRolloutJoiners(t *testing.T) {
	w := newWorld(t, 11, 100)
	h := w.h
	targets := w.baseline()
	s := &runnelv1.Strategy{Staged: true, Canary: 2, Batch: 50, SoakMs: 1000}
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(2), Strategy: s})
	w.settle()
	outside := w.matching("hw=x86,!legacy")
	// During the canary: a new edge and a relabelled one get temps@1.
	j1 := w.add(newSimEdge("j-1", map[string]string{"hw": "rpi4"}))
	if _, err := h.LabelEdge("ops", &runnelv1.LabelEdgeRequest{EdgeId: outside[0].id, Set: map[string]string{"hw": "cm4"}}); err != nil {
		t.Fatal(err)
	}
	w.settle()
	if j1.running() != "temps@1" || outside[0].running() != "temps@1" {
		t.Fatalf("joiners during the canary run %q and %q, want temps@1", j1.running(), outside[0].running())
	}
	// A target that leaves loses the pipeline.
	leaver := targets[len(targets)-1]
	if _, err := h.LabelEdge("ops", &runnelv1.LabelEdgeRequest{EdgeId: leaver.id, Set: map[string]string{"legacy": "yes"}}); err != nil {
		t.Fatal(err)
	}
	w.settle()
	if leaver.running() != "" {
		t.Fatalf("an edge that left the selector runs %q", leaver.running())
	}
	// Past the canary: the joiners get the version, new ones at once.
	h.evaluate()
	h.clock.Advance(time.Second)
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Step != 1 {
		t.Fatalf("not past the canary: %v", d.Rollout)
	}
	w.settle()
	if j1.running() != "temps@2" || outside[0].running() != "temps@2" {
		t.Fatalf("joiners past the canary run %q and %q, want temps@2", j1.running(), outside[0].running())
	}
	j2 := w.add(newSimEdge("j-2", map[string]string{"hw": "cm4"}))
	w.settle()
	if j2.running() != "temps@2" {
		t.Fatalf("a joiner past the canary runs %q", j2.running())
	}
	// The leaver comes back: its step has started, it gets temps@2.
	if _, err := h.LabelEdge("ops", &runnelv1.LabelEdgeRequest{EdgeId: leaver.id, Remove: []string{"legacy"}}); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		w.settle()
		h.evaluate()
		h.clock.Advance(time.Second)
	}
	if d := h.deployment("prod"); d.Rollout.Phase != fleet.PhaseSucceeded || d.Rollout.Targeted != uint32(len(targets)+3) || d.Rollout.Applied != d.Rollout.Targeted {
		t.Fatalf("end: %v", d.Rollout)
	}
	for _, e := range w.matching(prodSelector) {
		if e.running() != "temps@2" {
			t.Errorf("%s runs %q after success", e.id, e.running())
		}
	}
	// After a failed canary, joiners get the last succeeded version.
	bad := targets[0]
	bad.failOn["temps@3"] = true
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(3), Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, Batch: 10, RollbackOnFailure: true}})
	w.settle()
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Phase != fleet.PhaseFailed {
		t.Fatalf("v3: %v", d.Rollout)
	}
	j3 := w.add(newSimEdge("j-3", map[string]string{"hw": "rpi4"}))
	w.settle()
	if j3.running() != "temps@2" {
		t.Fatalf("a joiner after a failure runs %q, want the last succeeded temps@2", j3.running())
	}
	// All at once: a joiner gets the version at once, even while it is
	// progressing.
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(1)})
	j4 := w.add(newSimEdge("j-4", map[string]string{"hw": "rpi4"}))
	w.settle()
	if j4.running() != "temps@1" {
		t.Fatalf("a joiner of an all-at-once rollout runs %q", j4.running())
	}
	// A deployment with no edge yet: the first edge gets it at once.
	h.applyPipeline(humidV1)
	d := h.applyDeployment(&runnelv1.DeploymentSpec{Name: "lab", Selector: "site=lab", Pipelines: []*runnelv1.PipelineRef{{Name: "humid"}}, Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, Batch: 1}})
	if d.Rollout.Phase != fleet.PhaseSucceeded || d.Rollout.Steps != 0 {
		t.Fatalf("empty rollout: %v", d.Rollout)
	}
	lab := w.add(newSimEdge("lab-1", map[string]string{"site": "lab", "hw": "cm4"}))
	w.settle()
	if lab.running() != "humid@1,temps@1" {
		t.Fatalf("lab edge runs %q", lab.running())
	}
}

// TestDeploymentRefusals: refused deployments change nothing.
func TestDeploymentRefusals(t *testing.T) {
	w := newWorld(t, 5, 10)
	h := w.h
	w.baseline()
	h.applyPipeline(humidV1)
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "lab", Selector: "site=a", Pipelines: []*runnelv1.PipelineRef{{Name: "humid"}}})
	before := snapshot(t, h.Fleet)
	for _, c := range []struct {
		name string
		spec *runnelv1.DeploymentSpec
		is   error
		want []string
	}{
		{"bad selector", &runnelv1.DeploymentSpec{Name: "prod", Selector: "hw in rpi4", Pipelines: tempsAt(2)}, fleet.ErrInvalid, []string{`column 7: expected "("`}},
		{"bad name", &runnelv1.DeploymentSpec{Name: "Prod!", Pipelines: tempsAt(2)}, fleet.ErrInvalid, []string{`name "Prod!"`}},
		{"every problem", &runnelv1.DeploymentSpec{Name: "", Selector: "!", Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}, {Name: "temps"}, {}}, Strategy: &runnelv1.Strategy{Staged: true, CanaryPercent: 101, SoakMs: -1, MaxDeadLetterRate: 1.5, ProgressDeadlineMs: -1}},
			fleet.ErrInvalid, []string{"name is empty", "label key after", "listed twice", "pipelines[2]: no name", "canary_percent is 101", "needs batch", "soak_ms is -1", "max_dead_letter_rate is 1.5", "progress_deadline_ms is -1"}},
		{"both canary", &runnelv1.DeploymentSpec{Name: "prod", Pipelines: tempsAt(2), Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, CanaryPercent: 5, Batch: 1}}, fleet.ErrInvalid, []string{"canary or canary_percent, not both"}},
		{"canary not staged", &runnelv1.DeploymentSpec{Name: "prod", Pipelines: tempsAt(2), Strategy: &runnelv1.Strategy{Canary: 1}}, fleet.ErrInvalid, []string{"apply to a staged rollout"}},
		{"NaN rate", &runnelv1.DeploymentSpec{Name: "prod", Pipelines: tempsAt(2), Strategy: &runnelv1.Strategy{MaxDeadLetterRate: math.NaN()}}, fleet.ErrInvalid, []string{"max_dead_letter_rate is NaN"}},
		{"unknown pipeline", &runnelv1.DeploymentSpec{Name: "prod", Pipelines: []*runnelv1.PipelineRef{{Name: "nope"}, {Name: "temps", Revision: 9}}}, fleet.ErrNotFound, []string{`pipeline "nope" does not exist`, `"temps" has no revision 9 (it has 1 to 3)`}},
		{"pipeline of another", &runnelv1.DeploymentSpec{Name: "prod", Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}, {Name: "humid"}}}, fleet.ErrConflict, []string{`pipeline "humid" is deployed by lab`}},
	} {
		_, err := h.ApplyDeployment("alice", &runnelv1.ApplyDeploymentRequest{Spec: c.spec})
		if !errors.Is(err, c.is) {
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
			continue
		}
		for _, s := range c.want {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %q does not say %q", c.name, err, s)
			}
		}
	}
	if _, err := h.ApplyDeployment("alice", nil); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("nil request: %v", err)
	}
	// A dry run and an unchanged spec store nothing either.
	d, err := h.ApplyDeployment("alice", &runnelv1.ApplyDeploymentRequest{DryRun: true, Spec: &runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(2), Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, Batch: 2}}})
	if err != nil || d.Version != 2 || d.Rollout.Targeted == 0 || d.Rollout.Steps == 0 {
		t.Fatalf("dry run: %v, %v", d, err)
	}
	d, err = h.ApplyDeployment("alice", &runnelv1.ApplyDeploymentRequest{Spec: &runnelv1.DeploymentSpec{Name: "prod", Selector: "!legacy , hw in (cm4, rpi4)", Pipelines: tempsAt(1)}})
	if err != nil || d.Version != 1 {
		t.Fatalf("unchanged spec: %v, %v", d, err)
	}
	if after := snapshot(t, h.Fleet); after != before {
		t.Errorf("refusals changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	h.reopen()
	w.reconnect()
	if after := snapshot(t, h.Fleet); after != before {
		t.Errorf("refusals changed the store")
	}
}

// TestGateWaitsForGeneration: a step whose change only removes a pipeline
// is healthy once the edges applied the new set, not before: the gate
// reads applied_generation, not only the revisions running.
func TestGateWaitsForGeneration(t *testing.T) {
	w := newWorld(t, 8, 100)
	h := w.h
	h.applyPipeline(tempsV1)
	h.applyPipeline(humidV1)
	both := []*runnelv1.PipelineRef{{Name: "temps"}, {Name: "humid"}}
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: both})
	w.settle()
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Phase != fleet.PhaseSucceeded {
		t.Fatalf("v1: %v", d.Rollout)
	}
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(0),
		Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, Batch: 1000}})
	h.evaluate() // the canary still runs temps@1 (and humid): not applied yet
	if d := h.deployment("prod"); d.Rollout.Step != 0 || d.Rollout.HealthySinceMs != 0 || d.Rollout.Applied != 0 {
		t.Fatalf("healthy before the canary applied: %v", d.Rollout)
	}
	w.settle()
	h.evaluate()
	if d := h.deployment("prod"); d.Rollout.Step != 1 {
		t.Fatalf("no step once applied: %v", d.Rollout)
	}
}
