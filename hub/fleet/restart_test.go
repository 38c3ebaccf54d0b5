package fleet_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

const humidV2 = `name: humid
source: {mqtt: {topic: "h/+"}}
event_time: {field: ts}
key: [device]
filter: "v >= 0"
window: {tumbling: 1m}
aggregates:
  n: count()
`

const (
	scenarioTicks  = 42
	scenarioPoints = 3 // per tick: the action, the edges' reports, Evaluate
)

// runScenario plays one story of rollouts on 100 edges, tick by tick:
// deployments, pause and resume, a failing canary rolled back, joiners,
// an edge that leaves, one offline for a while, abort and undo. At point
// restartAt (-1: never) the hub restarts: "reopen" closes and opens it,
// "crash" opens a copy of its file taken there (what a SIGKILL leaves);
// the online edges then connect again. It returns the state at the end
// and what each action returned.
func runScenario(t *testing.T, restartAt int, mode string) string {
	w := newWorld(t, 99, 100)
	h := w.h
	var events []string
	note := func(what string, err error) {
		events = append(events, fmt.Sprintf("%s: %v", what, err))
	}
	prod := w.matching(prodSelector)
	labs := w.matching("site in (a,b)")
	labs[1].failOn["humid@1"] = true
	offline := prod[6] // in prod v2's first batch
	var outsider *simEdge
	for _, e := range w.edges {
		if e.labels["hw"] == "x86" && e.labels["legacy"] == "" {
			outsider = e
			break
		}
	}
	apply := func(spec *runnelv1.DeploymentSpec) {
		_, err := h.ApplyDeployment("alice", &runnelv1.ApplyDeploymentRequest{Spec: spec})
		note("apply "+spec.Name, err)
	}
	rollout := func(name, action string) {
		_, err := h.Rollout("bob", name, action)
		note(action+" "+name, err)
	}
	label := func(e *simEdge, set map[string]string) {
		_, err := h.LabelEdge("ops", &runnelv1.LabelEdgeRequest{EdgeId: e.id, Set: set})
		note("label "+e.id, err)
	}
	action := func(tick int) {
		switch tick {
		case 0:
			for _, s := range []string{tempsV1, tempsV2, tempsV3, humidV1} {
				_, err := h.ApplyPipeline("alice", &runnelv1.ApplyPipelineRequest{Spec: s})
				note("pipeline", err)
			}
			apply(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(1)})
		case 2:
			apply(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(2),
				Strategy: &runnelv1.Strategy{Staged: true, Canary: 5, BatchPercent: 20, SoakMs: 10_000, RollbackOnFailure: true}})
		case 3:
			offline.disconnect()
			offline.offline = true
		case 4:
			w.add(newSimEdge("j-1", map[string]string{"hw": "rpi4", "site": "a"}))
		case 5:
			label(outsider, map[string]string{"hw": "cm4"})
		case 7:
			rollout("prod", "pause")
		case 9:
			rollout("prod", "resume")
		case 11:
			apply(&runnelv1.DeploymentSpec{Name: "lab", Selector: "site in (a,b)", Pipelines: []*runnelv1.PipelineRef{{Name: "humid"}},
				Strategy: &runnelv1.Strategy{Staged: true, Canary: 2, Batch: 5, SoakMs: 5000, RollbackOnFailure: true}})
		case 14:
			label(prod[10], map[string]string{"legacy": "yes"})
		case 16:
			w.add(newSimEdge("j-2", map[string]string{"hw": "cm4", "site": "b"}))
		case 18:
			offline.offline = false
			offline.connect(t, h.Fleet)
		case 20:
			_, err := h.ApplyPipeline("alice", &runnelv1.ApplyPipelineRequest{Spec: humidV2})
			note("pipeline", err)
			apply(&runnelv1.DeploymentSpec{Name: "lab", Selector: "site in (a,b)", Pipelines: []*runnelv1.PipelineRef{{Name: "humid"}},
				Strategy: &runnelv1.Strategy{Staged: true, Canary: 2, Batch: 10, SoakMs: 5000}})
		case 24:
			apply(&runnelv1.DeploymentSpec{Name: "prod", Selector: prodSelector, Pipelines: tempsAt(3),
				Strategy: &runnelv1.Strategy{Staged: true, Canary: 3, BatchPercent: 50, SoakMs: 5000}})
		case 26:
			rollout("prod", "abort")
		case 28:
			rollout("prod", "undo")
		case 30:
			rollout("prod", "pause")
		case 31:
			rollout("prod", "pause") // refused: paused already
		case 33:
			rollout("prod", "resume")
		case 37:
			// A wider selector: edges of site c are targets of steps to
			// come, with nothing of lab until then.
			apply(&runnelv1.DeploymentSpec{Name: "lab", Selector: "site in (a,b,c)", Pipelines: []*runnelv1.PipelineRef{{Name: "humid", Revision: 1}},
				Strategy: &runnelv1.Strategy{Staged: true, Canary: 1, Batch: 5, SoakMs: 60_000}})
		}
	}
	point := 0
	for tick := range scenarioTicks {
		for p := range scenarioPoints {
			if point == restartAt {
				if mode == "reopen" {
					h.reopen()
				} else {
					h.crash()
				}
				w.reconnect()
			}
			point++
			switch p {
			case 0:
				action(tick)
			case 1:
				w.settle()
			case 2:
				h.evaluate()
				h.clock.Advance(5 * time.Second)
			}
		}
	}
	var b strings.Builder
	for _, e := range events {
		b.WriteString(e + "\n")
	}
	for _, e := range w.edges {
		fmt.Fprintf(&b, "%s runs %s\n", e.id, e.running())
	}
	b.WriteString(snapshot(t, h.Fleet))
	return b.String()
}

// TestRestartMidRollout: a hub restarted at any point of a rollout,
// cleanly or from the file a SIGKILL leaves, resumes it and ends in the
// same state as a hub that never restarted.
func TestRestartMidRollout(t *testing.T) {
	want := runScenario(t, -1, "")
	flat := strings.Join(strings.Fields(want), " ") // prototext varies its spacing
	for _, s := range []string{"phase:\"failed\"", "rolled_back:true", "phase:\"aborted\"", "phase:\"succeeded\"", "j-2 runs humid@", "rollout.undo", "version:3 author:\"alice\" created_ms:1700000185000"} {
		if !strings.Contains(flat, s) {
			t.Fatalf("the scenario does not reach %q:\n%s", s, want)
		}
	}
	r := rand.New(rand.NewPCG(2024, 6))
	points := []int{0, 1, 2, 8, 39 * scenarioPoints, scenarioTicks*scenarioPoints - 1}
	for range 6 {
		points = append(points, r.IntN(scenarioTicks*scenarioPoints))
	}
	for _, mode := range []string{"reopen", "crash"} {
		for _, at := range points {
			t.Run(fmt.Sprintf("%s@%d", mode, at), func(t *testing.T) {
				if got := runScenario(t, at, mode); got != want {
					t.Errorf("ends otherwise than without a restart:\n%s", lineDiff(want, got))
				}
			})
		}
	}
}

// lineDiff lists the lines of want and got that differ, for a readable
// failure.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(wl), len(gl)) {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			fmt.Fprintf(&b, "line %d\n  want %s\n  got  %s\n", i+1, w, g)
		}
	}
	return b.String()
}
