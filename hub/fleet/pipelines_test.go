package fleet_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/runnel-io/runnel/hub/fleet"
	"github.com/runnel-io/runnel/hub/fleet/fleeterr"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func TestApplyPipelineRevisions(t *testing.T) {
	var seen []string
	h := newHarness(t, func(o *fleet.Options) {
		o.OnRevision = func(rev *runnelv1.PipelineRevision, p *operators.Pipeline) {
			if p.Name != rev.Name {
				t.Errorf("OnRevision: pipeline %s for revision of %s", p.Name, rev.Name)
			}
			seen = append(seen, rev.Name+"@"+string(rune('0'+rev.Revision)))
		}
	})
	r1 := h.applyPipeline(tempsV1)
	sum := sha256.Sum256([]byte(tempsV1))
	if r1.Revision != 1 || r1.CompatClass != 1 || r1.Author != "alice" || r1.Hash != hex.EncodeToString(sum[:]) || r1.Spec != tempsV1 || r1.CreatedMs != h.clock.Now().UnixMilli() {
		t.Fatalf("revision 1: %v", r1)
	}
	// The same spec again adds nothing.
	resp, err := h.ApplyPipeline("bob", &runnelv1.ApplyPipelineRequest{Spec: tempsV1})
	if err != nil || resp.Created || resp.Revision.Revision != 1 || resp.Diff != "" {
		t.Fatalf("same spec: %v, %v", resp, err)
	}
	// Dry run: the revision it would be, the diff, nothing stored.
	resp, err = h.ApplyPipeline("bob", &runnelv1.ApplyPipelineRequest{Spec: tempsV2, DryRun: true})
	if err != nil || resp.Created || resp.Revision.Revision != 2 || !strings.Contains(resp.Diff, "+filter: \"v > -40\"") {
		t.Fatalf("dry run: %v, %v", resp, err)
	}
	if revs, _ := h.ListRevisions("temps"); len(revs) != 1 {
		t.Fatalf("dry run stored a revision: %v", revs)
	}
	// A compatible change keeps the class, an incompatible one starts its own.
	h.clock.Advance(time.Second)
	resp, err = h.ApplyPipeline("bob", &runnelv1.ApplyPipelineRequest{Spec: tempsV2})
	if err != nil || !resp.Created || resp.Revision.Revision != 2 || resp.Revision.CompatClass != 1 || resp.Revision.Author != "bob" {
		t.Fatalf("revision 2: %v, %v", resp, err)
	}
	wantDiff := "--- temps@1\n+++ temps@2\n@@ -2,6 +2,7 @@\n source: {mqtt: {topic: \"t/+\"}}\n event_time: {field: ts}\n key: [device]\n+filter: \"v > -40\"\n window: {tumbling: 1m}\n aggregates:\n   n: count()\n"
	if resp.Diff != wantDiff {
		t.Errorf("diff:\n%s\nwant:\n%s", resp.Diff, wantDiff)
	}
	r3 := h.applyPipeline(tempsV3)
	if r3.Revision != 3 || r3.CompatClass != 3 {
		t.Fatalf("revision 3: %v", r3)
	}
	// Back to revision 2's text: a new revision, incompatible with 3.
	r4 := h.applyPipeline(tempsV2)
	if r4.Revision != 4 || r4.CompatClass != 4 {
		t.Fatalf("revision 4: %v", r4)
	}
	h.applyPipeline(humidV1)

	p, err := h.GetPipeline("temps")
	if err != nil || p.Latest != 4 || p.LatestRevision.Revision != 4 || p.UpdatedMs <= p.CreatedMs {
		t.Fatalf("GetPipeline: %v, %v", p, err)
	}
	if ps := h.ListPipelines(); len(ps) != 2 || ps[0].Name != "humid" || ps[1].Name != "temps" {
		t.Fatalf("ListPipelines: %v", ps)
	}
	if _, err := h.GetPipeline("nope"); !errors.Is(err, fleet.ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("GetPipeline(nope): %v", err)
	}
	if want := []string{"temps@1", "temps@2", "temps@3", "temps@4", "humid@1"}; strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Errorf("OnRevision saw %v, want %v", seen, want)
	}
	if all := h.AllRevisions(); len(all) != 5 || all[0].Name != "humid" || all[4].Revision != 4 {
		t.Errorf("AllRevisions: %v", all)
	}

	// Revisions survive a restart, and numbering goes on.
	h.reopen()
	revs, err := h.ListRevisions("temps")
	if err != nil || len(revs) != 4 || revs[1].Spec != tempsV2 || revs[1].Author != "bob" {
		t.Fatalf("after reopen: %v, %v", revs, err)
	}
	if r := h.applyPipeline(tempsV1); r.Revision != 5 || r.CompatClass != 4 { // compatible with 4
		t.Fatalf("revision 5: %v", r)
	}
}

func TestDiffRevisions(t *testing.T) {
	h := newHarness(t, nil)
	h.applyPipeline(tempsV1)
	h.applyPipeline(tempsV2)
	h.applyPipeline(tempsV3)
	d, err := h.DiffRevisions("temps", 1, 2)
	if err != nil || !d.Compatible || d.Reason != "" || !strings.HasPrefix(d.Diff, "--- temps@1\n+++ temps@2\n") {
		t.Fatalf("1→2: %v, %v", d, err)
	}
	d, err = h.DiffRevisions("temps", 0, 0) // 2 → 3
	if err != nil || d.Compatible || !strings.Contains(d.Reason, "window changed") || !strings.Contains(d.Diff, "-window: {tumbling: 1m}\n+window: {tumbling: 5m}\n") {
		t.Fatalf("latest: %v, %v", d, err)
	}
	d, err = h.DiffRevisions("temps", 0, 1) // nothing → 1
	if err != nil || d.Compatible || !strings.HasPrefix(d.Diff, "--- /dev/null\n+++ temps@1\n@@ -0,0 +1,8 @@\n+name: temps\n") {
		t.Fatalf("0→1: %v, %v", d, err)
	}
	for _, c := range [][2]uint32{{1, 9}, {9, 1}} {
		if _, err := h.DiffRevisions("temps", c[0], c[1]); !errors.Is(err, fleet.ErrNotFound) || !strings.Contains(err.Error(), "no revision 9") {
			t.Errorf("DiffRevisions %v: %v", c, err)
		}
	}
	if _, err := h.DiffRevisions("nope", 1, 2); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("DiffRevisions nope: %v", err)
	}
}

func TestApplyPipelineRefusesBadSpec(t *testing.T) {
	h := newHarness(t, nil)
	h.applyPipeline(tempsV1)
	before := snapshot(t, h.Fleet)
	bad := `name: temps
source: {mqtt: {topic: "t/+"}}
event_time: {field: ts}
window: {tumbling: soon}
aggregates:
  n: count()
  hi: maxx(v)
extra: 1
`
	_, err := h.ApplyPipeline("alice", &runnelv1.ApplyPipelineRequest{Spec: bad, File: "temps.yaml"})
	var se *fleeterr.SpecError
	if !errors.As(err, &se) || !errors.Is(err, fleet.ErrInvalid) {
		t.Fatalf("ApplyPipeline(bad) = %v, want a *SpecError", err)
	}
	if len(se.Problems) < 3 {
		t.Fatalf("problems: %v, want every one (window, aggregate, unknown field)", se.Problems)
	}
	for _, want := range []string{"window", "hi", "extra"} {
		found := false
		for _, p := range se.Problems {
			if p.File != "temps.yaml" || p.Pos.Line == 0 {
				t.Errorf("problem without file and line: %+v", p)
			}
			found = found || strings.Contains(p.Field+p.Msg, want)
		}
		if !found {
			t.Errorf("no problem names %q: %v", want, se.Problems)
		}
	}
	if !strings.Contains(err.Error(), "temps.yaml:4:") {
		t.Errorf("error %q does not name file:line", err)
	}
	// Dry run refuses the same way; an oversized spec too.
	if _, err := h.ApplyPipeline("alice", &runnelv1.ApplyPipelineRequest{Spec: bad, DryRun: true}); !errors.As(err, &se) {
		t.Errorf("dry run of a bad spec: %v", err)
	}
	if _, err := h.ApplyPipeline("alice", &runnelv1.ApplyPipelineRequest{Spec: strings.Repeat("#", fleet.MaxSpecBytes+1)}); !errors.As(err, &se) || !strings.Contains(err.Error(), "at most") {
		t.Errorf("oversized spec: %v", err)
	}
	if _, err := h.ApplyPipeline("alice", nil); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("nil request: %v", err)
	}
	if after := snapshot(t, h.Fleet); after != before {
		t.Errorf("a refused spec changed the state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	h.reopen()
	if after := snapshot(t, h.Fleet); after != before {
		t.Errorf("a refused spec changed the store:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestDeletePipeline(t *testing.T) {
	h := newHarness(t, nil)
	h.applyPipeline(tempsV1)
	h.applyPipeline(tempsV2)
	h.applyPipeline(humidV1)
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "web", Pipelines: []*runnelv1.PipelineRef{{Name: "temps"}}})
	before := snapshot(t, h.Fleet)
	err := h.DeletePipeline("alice", "temps")
	if !errors.Is(err, fleet.ErrConflict) || !strings.Contains(err.Error(), "web") {
		t.Fatalf("delete of a deployed pipeline: %v", err)
	}
	if after := snapshot(t, h.Fleet); after != before {
		t.Errorf("a refused delete changed the state")
	}
	if err := h.DeletePipeline("alice", "nope"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("delete nope: %v", err)
	}
	if err := h.DeletePipeline("alice", "humid"); err != nil {
		t.Fatalf("delete humid: %v", err)
	}
	if _, err := h.GetPipeline("humid"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("humid after delete: %v", err)
	}
	// A pipeline created again under the name numbers on: revision 1 of
	// humid keeps naming the spec it named.
	h.reopen()
	if _, err := h.GetPipeline("humid"); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("humid after reopen: %v", err)
	}
	if r := h.applyPipeline(humidV1); r.Revision != 2 || r.CompatClass != 2 {
		t.Errorf("humid again: %v, want revision 2", r)
	}
	revs, _ := h.ListRevisions("humid")
	if len(revs) != 1 || revs[0].Revision != 2 {
		t.Errorf("humid revisions: %v", revs)
	}
	if _, err := h.DiffRevisions("humid", 1, 2); !errors.Is(err, fleet.ErrNotFound) {
		t.Errorf("diff from a deleted revision: %v", err)
	}
	// Moving the deployment off temps frees it once no edge runs it.
	h.applyDeployment(&runnelv1.DeploymentSpec{Name: "web", Pipelines: []*runnelv1.PipelineRef{{Name: "humid"}}})
	if err := h.DeletePipeline("alice", "temps"); err != nil {
		t.Errorf("delete temps once undeployed: %v", err)
	}
	var actions []string
	for _, a := range h.Audit(0, 0) {
		actions = append(actions, a.Action+" "+a.Object)
	}
	want := "pipeline.apply pipeline/temps,pipeline.apply pipeline/temps,pipeline.apply pipeline/humid,deployment.apply deployment/web,pipeline.delete pipeline/humid,pipeline.apply pipeline/humid,deployment.apply deployment/web,pipeline.delete pipeline/temps"
	if got := strings.Join(actions, ","); got != want {
		t.Errorf("audit:\n%s\nwant:\n%s", got, want)
	}
}

// TestApplyPipelineRefusesFileOutputs: a managed pipeline may not write
// files on the gateways; each file output is a problem at its position,
// and nothing is stored.
func TestApplyPipelineRefusesFileOutputs(t *testing.T) {
	f := newHarness(t, nil)
	spec := tempsV1 + "outputs: [{hub: {}}, {file: {path: /tmp/x.jsonl}}]\ndead_letter: {file: {path: /tmp/dead.jsonl}}\n"
	_, err := f.ApplyPipeline("op", &runnelv1.ApplyPipelineRequest{Spec: spec, File: "a.yaml"})
	var se *fleeterr.SpecError
	if !errors.As(err, &se) || len(se.Problems) != 2 {
		t.Fatalf("ApplyPipeline = %v, want two problems", err)
	}
	for i, want := range []string{"outputs[1].file", "dead_letter.file"} {
		if p := se.Problems[i]; p.Field != want || p.Pos.Line == 0 || p.File != "a.yaml" {
			t.Errorf("problem %d = %+v, want field %s with a line", i, p, want)
		}
	}
	if len(f.ListPipelines()) != 0 {
		t.Error("a refused spec was stored")
	}
}

// TestApplyPipelineRefusesLocalName: a pipeline the hub merges from its
// own files cannot also be managed; nothing is stored.
func TestApplyPipelineRefusesLocalName(t *testing.T) {
	f := newHarness(t, func(o *fleet.Options) { o.LocalPipelines = []string{"temps"} })
	_, err := f.ApplyPipeline("op", &runnelv1.ApplyPipelineRequest{Spec: tempsV1})
	if !errors.Is(err, fleeterr.ErrConflict) || !strings.Contains(err.Error(), "hub's own pipeline files") {
		t.Fatalf("ApplyPipeline = %v, want a conflict", err)
	}
	if len(f.ListPipelines()) != 0 {
		t.Error("a refused spec was stored")
	}
}
