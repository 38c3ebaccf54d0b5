package fleet

import (
	"fmt"
	"slices"
	"strings"
	"time"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// The phases of a rollout (RolloutStatus.phase); doc.go has the state
// machine.
const (
	PhaseProgressing = "progressing"
	PhasePaused      = "paused"
	PhaseSucceeded   = "succeeded"
	PhaseFailed      = "failed"
	PhaseAborted     = "aborted"
	PhaseSuperseded  = "superseded"
)

// The actions of Rollout.
const (
	ActionPause  = "pause"
	ActionResume = "resume"
	ActionAbort  = "abort"
	ActionUndo   = "undo"
)

// DefaultMaxDeadLetterRate is the gate's dead-letter bound when a
// strategy sets none.
const DefaultMaxDeadLetterRate = 0.05

// SystemAuthor is the "who" of the changes the Fleet makes on its own
// (automatic rollbacks) in the audit log.
const SystemAuthor = "fleet"

// maxReasons bounds how many edges a rollout message names.
const maxReasons = 5

// active: a rollout that admits joiners to its version.
func active(phase string) bool {
	return phase == PhaseProgressing || phase == PhasePaused || phase == PhaseSucceeded
}

// planSteps returns the end (exclusive) of each step over n targets.
func planSteps(n int, s strategy) []int {
	if n == 0 {
		return nil
	}
	if !s.Staged {
		return []int{n}
	}
	canary := int(s.Canary)
	if s.CanaryPercent > 0 {
		canary = ceilPercent(n, s.CanaryPercent)
	}
	canary = min(max(canary, 1), n)
	batch := int(s.Batch)
	if s.BatchPercent > 0 {
		batch = ceilPercent(n, s.BatchPercent)
	}
	batch = max(batch, 1)
	ends := []int{canary}
	for end := canary; end < n; {
		end = min(end+batch, n)
		ends = append(ends, end)
	}
	return ends
}

func ceilPercent(n int, pct uint32) int { return (n*int(pct) + 99) / 100 }

// stepEdges returns the targets of step k.
func (v *version) stepEdges(k int) []string {
	start := 0
	if k > 0 {
		start = v.rec.Ends[k-1]
	}
	return v.rec.Targets[start:v.rec.Ends[k]]
}

func (v *version) maxDeadRate() float64 {
	if r := v.rec.Strategy.MaxDeadLetterRate; r > 0 {
		return r
	}
	return DefaultMaxDeadLetterRate
}

// assign gives e version a.Version of d (ok false: none), recomputes its
// desired set and records the generation the gate waits for.
func (f *Fleet) assign(c *changes, e *edge, d *deployment, a assignment, ok bool) {
	name := d.rec.Name
	if old, had := e.rec.Assign[name]; had {
		if d.assigned[old.Version]--; d.assigned[old.Version] <= 0 {
			delete(d.assigned, old.Version)
		}
	}
	if ok {
		if e.rec.Assign == nil {
			e.rec.Assign = map[string]assignment{}
		}
		e.rec.Assign[name] = a
		d.assigned[a.Version]++
	} else {
		delete(e.rec.Assign, name)
		if len(e.rec.Assign) == 0 {
			e.rec.Assign = nil
		}
	}
	f.refresh(c, e)
	if ok {
		a.Gen = e.rec.Generation
		e.rec.Assign[name] = a
	}
	c.edges[e] = struct{}{}
}

// refresh recomputes e's desired set from its assignments; a change bumps
// the generation and is delivered after the commit.
func (f *Fleet) refresh(c *changes, e *edge) {
	var next []ref
	seen := map[string]string{}
	for _, dn := range f.depNames {
		a, ok := e.rec.Assign[dn]
		if !ok {
			continue
		}
		for _, r := range f.deps[dn].versions[a.Version-1].rec.Resolved {
			if other, dup := seen[r.Name]; dup {
				// ApplyDeployment refuses a pipeline another deployment
				// uses, so this is a store written otherwise.
				f.log.Warn("fleet: a pipeline is given by two deployments; the first wins", "edge", e.rec.ID, "pipeline", r.Name, "kept", other, "dropped", dn)
				continue
			}
			seen[r.Name] = dn
			next = append(next, r)
		}
	}
	slices.SortFunc(next, func(a, b ref) int { return strings.Compare(a.Name, b.Name) })
	if slices.Equal(next, e.rec.Desired) {
		return
	}
	e.rec.Desired = next
	e.rec.Generation++
	c.edges[e] = struct{}{}
	c.notify[e] = struct{}{}
}

// lastSucceeded returns d's latest version whose rollout succeeded, or 0.
func (d *deployment) lastSucceeded() uint32 {
	for i := len(d.versions) - 1; i >= 0; i-- {
		if d.versions[i].ro.Phase == PhaseSucceeded {
			return d.versions[i].rec.Num
		}
	}
	return 0
}

// joinVersion is the joiner rule: the version of d an edge is given when
// the selector of v (d's current version) newly picks it. v itself when
// its rollout has reached the edge (a target of a started step) or admits
// joiners (all at once, succeeded, or past its canary step), while it is
// progressing, paused or succeeded; otherwise d's last succeeded version,
// or 0 for none.
func (f *Fleet) joinVersion(d *deployment, v *version, id string) uint32 {
	if active(v.ro.Phase) {
		if s, ok := v.stepOf[id]; ok {
			if s <= v.ro.Step {
				return v.rec.Num
			}
		} else if admitsJoiners(v) {
			return v.rec.Num
		}
	}
	return d.lastSucceeded()
}

func admitsJoiners(v *version) bool {
	return active(v.ro.Phase) && (!v.rec.Strategy.Staged || v.ro.Phase == PhaseSucceeded || v.ro.Step >= 1)
}

// startStep gives v to the targets of its current step that the selector
// still picks.
func (f *Fleet) startStep(c *changes, d *deployment, v *version) {
	for _, id := range v.stepEdges(v.ro.Step) {
		e := f.edges[id]
		if e == nil || !v.sel.Matches(e.labels) {
			continue
		}
		f.giveVersion(c, e, d, v)
	}
}

// giveVersion assigns v to e, remembering what e had for a rollback.
func (f *Fleet) giveVersion(c *changes, e *edge, d *deployment, v *version) {
	a, had := e.rec.Assign[d.rec.Name]
	if had && a.Version == v.rec.Num {
		return
	}
	prior := uint32(0)
	if had {
		prior = a.Version
	}
	f.assign(c, e, d, assignment{Version: v.rec.Num, By: v.rec.Num, Prior: prior}, true)
}

// admitJoiners gives v, once it admits joiners, to every edge its
// selector picks that is not a target of a step yet to start.
func (f *Fleet) admitJoiners(c *changes, d *deployment, v *version) {
	if !admitsJoiners(v) {
		return
	}
	for _, id := range f.edgeIDs {
		e := f.edges[id]
		if !v.sel.Matches(e.labels) {
			continue
		}
		if s, ok := v.stepOf[id]; ok && s > v.ro.Step {
			continue
		}
		f.giveVersion(c, e, d, v)
	}
}

// rollback puts every edge that v's rollout gave v back on the version it
// had before (none, if it had none). It returns how many.
func (f *Fleet) rollback(c *changes, d *deployment, v *version) int {
	n := 0
	for _, id := range f.edgeIDs {
		e := f.edges[id]
		a, ok := e.rec.Assign[d.rec.Name]
		if !ok || a.Version != v.rec.Num || a.By != v.rec.Num {
			continue
		}
		if a.Prior == 0 {
			f.assign(c, e, d, assignment{}, false)
		} else {
			f.assign(c, e, d, assignment{Version: a.Prior}, true)
		}
		n++
	}
	return n
}

type health uint8

const (
	pending health = iota
	healthy
	broken
)

// verdict judges one edge of a step against the gate: healthy, broken
// (fails the rollout) or pending, with the reason when explain is set
// (the counts of GetDeployment do without, for 10,000 edges).
func (f *Fleet) verdict(e *edge, a assignment, v *version, explain bool) (health, string) {
	h, why := f.judge(e, a, v)
	if !explain || why == nil {
		return h, ""
	}
	return h, why()
}

func (f *Fleet) judge(e *edge, a assignment, v *version) (health, func() string) {
	st := e.status
	if st == nil {
		return pending, func() string { return "no status yet" }
	}
	if st.AppliedGeneration >= a.Gen && st.ApplyError != "" {
		return broken, func() string { return "apply error: " + firstLineOf(st.ApplyError) }
	}
	var wait func() string
	for _, r := range v.rec.Resolved {
		ps := findPipeline(st.Pipelines, r.Name)
		switch {
		case ps != nil && ps.Revision == r.Revision && ps.State == "failed":
			return broken, func() string {
				return fmt.Sprintf("pipeline %s revision %d failed: %s", r.Name, r.Revision, firstLineOf(ps.Error))
			}
		case wait != nil:
		case ps == nil:
			wait = func() string { return fmt.Sprintf("pipeline %s not reported", r.Name) }
		case ps.Revision != r.Revision || ps.State != "running":
			wait = func() string {
				return fmt.Sprintf("pipeline %s is at revision %d (%s), not %d running", r.Name, ps.Revision, ps.State, r.Revision)
			}
		}
	}
	if st.AppliedGeneration < a.Gen {
		return pending, func() string { return fmt.Sprintf("applied generation %d of %d", st.AppliedGeneration, a.Gen) }
	}
	if wait != nil {
		return pending, wait
	}
	if st.DeadPerMin > 0 {
		rate := st.DeadPerMin / max(st.RecordsPerMin, st.DeadPerMin)
		if limit := v.maxDeadRate(); rate > limit {
			return pending, func() string {
				return fmt.Sprintf("dead-letters %.1f%% of its records, above %.1f%%", 100*rate, 100*limit)
			}
		}
	}
	return healthy, nil
}

func findPipeline(ps []*runnelv1.PipelineStatus, name string) *runnelv1.PipelineStatus {
	for _, p := range ps {
		if p.GetName() == name {
			return p
		}
	}
	return nil
}

func firstLineOf(s string) string {
	line, _, more := strings.Cut(s, "\n")
	if more {
		line += " (…)"
	}
	return line
}

// reasons joins per-edge reasons, naming at most maxReasons edges.
func reasons(rs []string) string {
	if len(rs) <= maxReasons {
		return strings.Join(rs, "; ")
	}
	return strings.Join(rs[:maxReasons], "; ") + fmt.Sprintf("; and %d more", len(rs)-maxReasons)
}

// Evaluate evaluates every progressing rollout at the Fleet's clock:
// fails a step whose edges report errors or that passed its progress
// deadline, tracks when the step's gate became healthy, and starts the
// next step once it has been for the soak time. Evaluating twice at the
// same time changes nothing the second time. The background goroutine
// calls it every Tick and after statuses that could change a gate; with
// Options.Tick negative only callers do.
func (f *Fleet) Evaluate() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	now := f.nowMs()
	c := newChanges()
	for _, dn := range f.depNames {
		d := f.deps[dn]
		f.evaluate(c, d, d.current(), now)
	}
	return f.commit(c)
}

// edgesN is "1 edge", "2 edges".
func edgesN(n int) string {
	if n == 1 {
		return "1 edge"
	}
	return fmt.Sprintf("%d edges", n)
}

// progressing reports whether a deployment's current rollout is
// progressing (a step waits for its edges' health). Caller holds f.mu.
func (f *Fleet) progressing() bool {
	for _, dn := range f.depNames {
		if v := f.deps[dn].current(); v != nil && v.ro.Phase == PhaseProgressing {
			return true
		}
	}
	return false
}

func (f *Fleet) evaluate(c *changes, d *deployment, v *version, now int64) {
	for v.ro.Phase == PhaseProgressing {
		steps := len(v.rec.Ends)
		if v.ro.Step >= steps {
			v.ro.Phase = PhaseSucceeded
			v.ro.HealthySinceMs = 0
			v.ro.Message = fmt.Sprintf("every step healthy; %d edges targeted", len(v.rec.Targets))
			c.rollouts[v] = struct{}{}
			f.admitJoiners(c, d, v)
			f.log.Info("fleet: rollout succeeded", "deployment", d.rec.Name, "version", v.rec.Num)
			return
		}
		var failed, failedIDs, waiting, waitingIDs []string
		stepEdges := v.stepEdges(v.ro.Step)
		for _, id := range stepEdges {
			e := f.edges[id]
			if e == nil {
				continue
			}
			a, ok := e.rec.Assign[d.rec.Name]
			if !ok || a.Version != v.rec.Num {
				continue // the selector no longer picks it
			}
			switch h, why := f.verdict(e, a, v, true); h {
			case broken:
				failed = append(failed, fmt.Sprintf("edge %s: %s", id, why))
				failedIDs = append(failedIDs, id)
			case pending:
				waiting = append(waiting, fmt.Sprintf("edge %s: %s", id, why))
				waitingIDs = append(waitingIDs, id)
			}
		}
		if len(failed) > 0 {
			f.fail(c, d, v, fmt.Sprintf("step %d of %d failed: %s", v.ro.Step+1, steps, reasons(failed)), failedIDs)
			return
		}
		if len(waiting) > 0 {
			v.progress = fmt.Sprintf("step %d of %d waits for %d of its %s: %s", v.ro.Step+1, steps, len(waiting), edgesN(len(stepEdges)), reasons(waiting))
			if v.ro.HealthySinceMs != 0 {
				v.ro.HealthySinceMs = 0
				c.rollouts[v] = struct{}{}
			}
			if dl := v.rec.Strategy.ProgressDeadlineMs; dl > 0 && now-v.ro.StepStartedMs > dl {
				f.fail(c, d, v, fmt.Sprintf("step %d of %d not healthy within the progress deadline of %d ms: %s", v.ro.Step+1, steps, dl, reasons(waiting)), waitingIDs)
			}
			return
		}
		if v.ro.HealthySinceMs == 0 {
			v.ro.HealthySinceMs = now
			c.rollouts[v] = struct{}{}
		}
		if left := v.rec.Strategy.SoakMs - (now - v.ro.HealthySinceMs); left > 0 {
			v.progress = fmt.Sprintf("step %d of %d healthy (%s); soaking %s more", v.ro.Step+1, steps, edgesN(len(stepEdges)),
				time.Duration((left+99)/100*100)*time.Millisecond) // rounded up to 0.1 s
			return
		}
		v.ro.Step++
		v.ro.StepStartedMs = now
		v.ro.HealthySinceMs = 0
		c.rollouts[v] = struct{}{}
		if v.ro.Step < steps {
			f.startStep(c, d, v)
			f.log.Info("fleet: rollout step", "deployment", d.rec.Name, "version", v.rec.Num, "step", v.ro.Step+1, "of", steps)
		}
		f.admitJoiners(c, d, v)
	}
}

// fail ends v's rollout as failed and, when its strategy says so, rolls
// back the edges it touched.
func (f *Fleet) fail(c *changes, d *deployment, v *version, msg string, edges []string) {
	before := fmt.Sprintf("version %d %s at step %d of %d", v.rec.Num, v.ro.Phase, v.ro.Step+1, len(v.rec.Ends))
	v.ro.Phase = PhaseFailed
	v.ro.HealthySinceMs = 0
	v.ro.Message = msg
	v.ro.FailedEdges = slices.Sorted(slices.Values(edges))
	c.rollouts[v] = struct{}{}
	action, after := "rollout.fail", fmt.Sprintf("version %d failed: %s", v.rec.Num, msg)
	if v.rec.Strategy.RollbackOnFailure {
		n := f.rollback(c, d, v)
		v.ro.RolledBack = true
		action = "rollout.rollback"
		after = fmt.Sprintf("version %d failed, %d edges back on their prior version: %s", v.rec.Num, n, msg)
	}
	f.addAudit(c, SystemAuthor, action, "deployment/"+d.rec.Name, before, after)
	f.log.Warn("fleet: rollout failed", "deployment", d.rec.Name, "version", v.rec.Num, "rolled_back", v.ro.RolledBack, "reason", msg)
}
