package fleet

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/runnel-io/runnel/hub/fleet/selector"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// deploymentNameRE: deployment names appear in URLs and metric labels,
// like pipeline names, and follow the same rule.
var deploymentNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

const maxDeploymentName = 64

// checkDeployment checks a spec in itself, listing every problem.
func checkDeployment(sp *runnelv1.DeploymentSpec) (selector.Selector, strategy, []ref, error) {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	switch {
	case sp.Name == "":
		bad("name is empty")
	case len(sp.Name) > maxDeploymentName:
		bad("name is %d characters, at most %d", len(sp.Name), maxDeploymentName)
	case !deploymentNameRE.MatchString(sp.Name):
		bad("name %q: use lower-case letters, digits, _ and -, starting with a letter or digit", sp.Name)
	}
	sel, err := selector.Parse(sp.Selector)
	if err != nil {
		bad("%v", err)
	}
	var refs []ref
	seen := map[string]bool{}
	for i, p := range sp.Pipelines {
		switch {
		case p == nil || p.Name == "":
			bad("pipelines[%d]: no name", i)
			continue
		case seen[p.Name]:
			bad("pipelines[%d]: %s is listed twice", i, p.Name)
			continue
		}
		seen[p.Name] = true
		refs = append(refs, ref{Name: p.Name, Revision: p.Revision})
	}
	slices.SortFunc(refs, func(a, b ref) int { return strings.Compare(a.Name, b.Name) })
	var s strategy
	if st := sp.Strategy; st != nil {
		s = strategy{
			Staged: st.Staged, Canary: st.Canary, CanaryPercent: st.CanaryPercent,
			Batch: st.Batch, BatchPercent: st.BatchPercent, SoakMs: st.SoakMs,
			MaxDeadLetterRate: st.MaxDeadLetterRate, RollbackOnFailure: st.RollbackOnFailure,
			ProgressDeadlineMs: st.ProgressDeadlineMs,
		}
	}
	for _, pc := range []struct {
		name string
		v    uint32
	}{{"canary_percent", s.CanaryPercent}, {"batch_percent", s.BatchPercent}} {
		if pc.v > 100 {
			bad("strategy.%s is %d, at most 100", pc.name, pc.v)
		}
	}
	if s.Staged {
		switch {
		case s.Canary > 0 && s.CanaryPercent > 0:
			bad("strategy: set canary or canary_percent, not both")
		case s.Canary == 0 && s.CanaryPercent == 0:
			bad("strategy: a staged rollout needs canary or canary_percent above 0")
		}
		switch {
		case s.Batch > 0 && s.BatchPercent > 0:
			bad("strategy: set batch or batch_percent, not both")
		case s.Batch == 0 && s.BatchPercent == 0:
			bad("strategy: a staged rollout needs batch or batch_percent above 0")
		}
	} else if s.Canary != 0 || s.CanaryPercent != 0 || s.Batch != 0 || s.BatchPercent != 0 {
		bad("strategy: canary and batch apply to a staged rollout; set staged, or leave them out for all at once")
	}
	if s.SoakMs < 0 {
		bad("strategy.soak_ms is %d, at least 0", s.SoakMs)
	}
	if s.ProgressDeadlineMs < 0 {
		bad("strategy.progress_deadline_ms is %d, at least 0 (0: no deadline)", s.ProgressDeadlineMs)
	}
	if r := s.MaxDeadLetterRate; math.IsNaN(r) || r < 0 || r > 1 {
		bad("strategy.max_dead_letter_rate is %v, between 0 and 1 (0: %v)", r, DefaultMaxDeadLetterRate)
	}
	if len(probs) > 0 {
		what := "deployment"
		if sp.Name != "" {
			what = fmt.Sprintf("deployment %q", sp.Name)
		}
		return selector.Selector{}, strategy{}, nil, fmt.Errorf("fleet: %s: %s: %w", what, strings.Join(probs, "; "), ErrInvalid)
	}
	return sel, s, refs, nil
}

// resolve checks that every pipeline and revision exists and resolves
// revision 0 to the latest.
func (f *Fleet) resolve(dep string, refs []ref) ([]ref, error) {
	var probs []string
	out := make([]ref, 0, len(refs))
	for _, r := range refs {
		p := f.pipelines[r.Name]
		switch {
		case p == nil:
			probs = append(probs, fmt.Sprintf("pipeline %q does not exist", r.Name))
		case r.Revision == 0:
			out = append(out, ref{Name: r.Name, Revision: p.latest().Num})
		case p.rev(r.Revision) == nil:
			probs = append(probs, fmt.Sprintf("pipeline %q has no revision %d (it has %d to %d)", r.Name, r.Revision, p.revs[0].Num, p.latest().Num))
		default:
			out = append(out, r)
		}
	}
	if len(probs) > 0 {
		return nil, fmt.Errorf("fleet: deployment %q: %s: %w", dep, strings.Join(probs, "; "), ErrNotFound)
	}
	return out, nil
}

// checkUsers refuses pipelines another deployment uses.
func (f *Fleet) checkUsers(dep string, refs []ref) error {
	var probs []string
	for _, r := range refs {
		if users := f.pipelineUsers(r.Name, dep); len(users) > 0 {
			probs = append(probs, fmt.Sprintf("pipeline %q is deployed by %s", r.Name, strings.Join(users, ", ")))
		}
	}
	if len(probs) > 0 {
		return fmt.Errorf("fleet: deployment %q: %s; a pipeline belongs to one deployment: %w", dep, strings.Join(probs, "; "), ErrConflict)
	}
	return nil
}

// ApplyDeployment creates a deployment or a new version of it and starts
// its rollout (the previous version's rollout, if under way, is
// superseded). The spec is refused with every problem when it is wrong
// in itself (ErrInvalid: name, selector, strategy), when a pipeline or
// revision does not exist (ErrNotFound), or when a pipeline belongs to
// another deployment (ErrConflict). A spec whose selector (canonical
// form), resolved revisions and strategy equal the current version's
// adds none and returns it. DryRun returns the version it would create
// and stores nothing.
func (f *Fleet) ApplyDeployment(who string, req *runnelv1.ApplyDeploymentRequest) (*runnelv1.Deployment, error) {
	if req == nil || req.Spec == nil {
		return nil, fmt.Errorf("fleet: apply deployment: no spec: %w", ErrInvalid)
	}
	sp := req.Spec
	sel, strat, refs, err := checkDeployment(sp)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	resolved, err := f.resolve(sp.Name, refs)
	if err != nil {
		return nil, err
	}
	if err := f.checkUsers(sp.Name, resolved); err != nil {
		return nil, err
	}
	rec := versionRecord{Selector: sp.Selector, Pipelines: refs, Strategy: strat, Resolved: resolved, Author: who, CreatedMs: f.nowMs()}
	d := f.deps[sp.Name]
	if d != nil {
		if cur := d.current(); sameVersion(cur, &rec, sel) {
			return f.deploymentProto(d, cur), nil
		}
	}
	if req.DryRun {
		return f.preview(d, sp.Name, rec, sel), nil
	}
	c := newChanges()
	before := ""
	if d != nil {
		before = fmt.Sprintf("version %d", d.current().rec.Num)
	}
	d, v := f.newVersion(c, d, sp.Name, rec, sel)
	f.addAudit(c, who, "deployment.apply", "deployment/"+sp.Name, before, versionText(v))
	if err := f.commit(c); err != nil {
		return nil, err
	}
	f.kickEval()
	return f.deploymentProto(d, v), nil
}

// versionText describes a version for the audit log.
func versionText(v *version) string {
	var ps []string
	for _, r := range v.rec.Resolved {
		ps = append(ps, fmt.Sprintf("%s@%d", r.Name, r.Revision))
	}
	how := "all at once"
	if v.rec.Strategy.Staged {
		how = fmt.Sprintf("staged in %d steps", len(v.rec.Ends))
	}
	return fmt.Sprintf("version %d: %s to %q (%d edges), %s", v.rec.Num, strings.Join(ps, ","), v.sel.String(), len(v.rec.Targets), how)
}

func sameVersion(cur *version, rec *versionRecord, sel selector.Selector) bool {
	return cur.sel.String() == sel.String() && slices.Equal(cur.rec.Resolved, rec.Resolved) && cur.rec.Strategy == rec.Strategy
}

// targetsOf returns the edges sel picks, sorted by id.
func (f *Fleet) targetsOf(sel selector.Selector) []string {
	var out []string
	for _, id := range f.edgeIDs {
		if sel.Matches(f.edges[id].labels) {
			out = append(out, id)
		}
	}
	return out
}

// preview is the Deployment a dry run would create.
func (f *Fleet) preview(d *deployment, name string, rec versionRecord, sel selector.Selector) *runnelv1.Deployment {
	rec.Num = 1
	if d != nil {
		rec.Num = d.current().rec.Num + 1
	}
	rec.Targets = f.targetsOf(sel)
	rec.Ends = planSteps(len(rec.Targets), rec.Strategy)
	v := &version{dep: name, rec: rec, sel: sel, ro: rolloutRecord{Phase: PhaseProgressing, StepStartedMs: rec.CreatedMs}}
	if len(rec.Ends) == 0 {
		v.ro.Phase = PhaseSucceeded
	}
	out := versionProto(name, v)
	out.Rollout.Targeted = uint32(len(rec.Targets))
	out.Rollout.Pending = uint32(len(rec.Targets))
	out.Rollout.Message = "dry run: nothing stored"
	return out
}

// newVersion creates the next version of d (d nil: a new deployment) and
// starts its rollout: targets fixed, edges the selector no longer picks
// lose the deployment, the first step given the version.
func (f *Fleet) newVersion(c *changes, d *deployment, name string, rec versionRecord, sel selector.Selector) (*deployment, *version) {
	now := rec.CreatedMs
	if d == nil {
		d = &deployment{rec: deploymentRecord{Name: name, CreatedMs: now}, assigned: map[uint32]int{}}
		f.deps[name] = d
		i, _ := slices.BinarySearch(f.depNames, name)
		f.depNames = slices.Insert(f.depNames, i, name)
		c.deps[d] = struct{}{}
	} else if cur := d.current(); cur.ro.Phase == PhaseProgressing || cur.ro.Phase == PhasePaused {
		cur.ro.Phase = PhaseSuperseded
		cur.ro.HealthySinceMs = 0
		cur.ro.Message = fmt.Sprintf("superseded by version %d at step %d of %d", cur.rec.Num+1, cur.ro.Step+1, len(cur.rec.Ends))
		c.rollouts[cur] = struct{}{}
	}
	rec.Num = uint32(len(d.versions) + 1)
	rec.Targets = f.targetsOf(sel)
	rec.Ends = planSteps(len(rec.Targets), rec.Strategy)
	v := &version{dep: name, rec: rec, sel: sel, ro: rolloutRecord{Phase: PhaseProgressing, StepStartedMs: now}}
	v.indexSteps()
	d.versions = append(d.versions, v)
	c.versions = append(c.versions, v)
	for _, id := range f.edgeIDs {
		e := f.edges[id]
		if _, has := e.rec.Assign[name]; has && !sel.Matches(e.labels) {
			f.assign(c, e, d, assignment{}, false)
		}
	}
	if len(rec.Ends) == 0 {
		v.ro.Phase = PhaseSucceeded
		v.ro.Message = "the selector picks no edge"
		return d, v
	}
	f.startStep(c, d, v)
	f.admitJoiners(c, d, v)
	return d, v
}

// GetDeployment returns a deployment's current version with its rollout.
func (f *Fleet) GetDeployment(name string) (*runnelv1.Deployment, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	d := f.deps[name]
	if d == nil {
		return nil, fmt.Errorf("fleet: deployment %q: %w", name, ErrNotFound)
	}
	return f.deploymentProto(d, d.current()), nil
}

// ListDeployments returns every deployment's current version, sorted by
// name.
func (f *Fleet) ListDeployments() []*runnelv1.Deployment {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.usable() != nil {
		return nil
	}
	out := make([]*runnelv1.Deployment, 0, len(f.depNames))
	for _, dn := range f.depNames {
		d := f.deps[dn]
		out = append(out, f.deploymentProto(d, d.current()))
	}
	return out
}

// DeploymentVersions returns a deployment's versions, oldest first. Only
// the current one carries the edge counts (targeted, pending, applied,
// failed); earlier ones carry how their rollout ended.
func (f *Fleet) DeploymentVersions(name string) ([]*runnelv1.Deployment, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	d := f.deps[name]
	if d == nil {
		return nil, fmt.Errorf("fleet: deployment %q: %w", name, ErrNotFound)
	}
	out := make([]*runnelv1.Deployment, len(d.versions))
	for i, v := range d.versions {
		if v == d.current() {
			out[i] = f.deploymentProto(d, v)
		} else {
			out[i] = versionProto(name, v)
		}
	}
	return out, nil
}

// versionProto renders a version and its rollout without edge counts.
func versionProto(name string, v *version) *runnelv1.Deployment {
	s := v.rec.Strategy
	sp := &runnelv1.DeploymentSpec{
		Name:     name,
		Selector: v.rec.Selector,
		Strategy: &runnelv1.Strategy{
			Staged: s.Staged, Canary: s.Canary, CanaryPercent: s.CanaryPercent,
			Batch: s.Batch, BatchPercent: s.BatchPercent, SoakMs: s.SoakMs,
			MaxDeadLetterRate: s.MaxDeadLetterRate, RollbackOnFailure: s.RollbackOnFailure,
			ProgressDeadlineMs: s.ProgressDeadlineMs,
		},
	}
	for _, r := range v.rec.Pipelines {
		sp.Pipelines = append(sp.Pipelines, &runnelv1.PipelineRef{Name: r.Name, Revision: r.Revision})
	}
	steps := len(v.rec.Ends)
	step := min(v.ro.Step, max(steps-1, 0))
	msg := v.ro.Message
	if v.ro.Phase == PhaseProgressing && v.progress != "" {
		msg = v.progress
	}
	out := &runnelv1.Deployment{
		Spec:      sp,
		Version:   v.rec.Num,
		Author:    v.rec.Author,
		CreatedMs: v.rec.CreatedMs,
		Rollout: &runnelv1.RolloutStatus{
			Phase:          v.ro.Phase,
			Step:           uint32(step),
			Steps:          uint32(steps),
			Targeted:       uint32(len(v.rec.Targets)),
			Message:        msg,
			StepStartedMs:  v.ro.StepStartedMs,
			HealthySinceMs: v.ro.HealthySinceMs,
			RolledBack:     v.ro.RolledBack,
			FailedEdges:    slices.Clone(v.ro.FailedEdges),
		},
	}
	for _, r := range v.rec.Resolved {
		out.Resolved = append(out.Resolved, &runnelv1.PipelineRef{Name: r.Name, Revision: r.Revision})
	}
	return out
}

// deploymentProto renders the current version with the edge counts:
// targeted = edges the selector picks now (joiners included), applied =
// those running the version healthily (the gate's test), failed = those
// whose apply of it failed, pending = the rest.
func (f *Fleet) deploymentProto(d *deployment, v *version) *runnelv1.Deployment {
	out := versionProto(d.rec.Name, v)
	var targeted, applied, failed uint32
	for _, id := range f.edgeIDs {
		e := f.edges[id]
		if !v.sel.Matches(e.labels) {
			continue
		}
		targeted++
		if a, ok := e.rec.Assign[d.rec.Name]; ok && a.Version == v.rec.Num {
			switch h, _ := f.verdict(e, a, v, false); h {
			case healthy:
				applied++
			case broken:
				failed++
			}
		}
	}
	r := out.Rollout
	r.Targeted, r.Applied, r.Failed, r.Pending = targeted, applied, failed, targeted-applied-failed
	return out
}

// Rollout controls a deployment's current rollout:
//   - pause: progressing → paused; steps do not advance.
//   - resume: paused → progressing; the step's soak and progress
//     deadline start again.
//   - abort: progressing or paused → aborted; every edge the rollout gave
//     the version goes back to what it had (rolled_back).
//   - undo: a new version with the content (selector and resolved
//     revisions) of the latest earlier version whose content differs
//     from the current one, rolled out all at once.
//
// Any other transition is refused (ErrConflict); an unknown action is
// ErrInvalid.
func (f *Fleet) Rollout(who, name, action string) (*runnelv1.Deployment, error) {
	switch action {
	case ActionPause, ActionResume, ActionAbort, ActionUndo:
	default:
		return nil, fmt.Errorf("fleet: deployment %q: rollout action %q: use pause, resume, abort or undo: %w", name, action, ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	d := f.deps[name]
	if d == nil {
		return nil, fmt.Errorf("fleet: deployment %q: %w", name, ErrNotFound)
	}
	v := d.current()
	now := f.nowMs()
	c := newChanges()
	before := fmt.Sprintf("version %d %s", v.rec.Num, v.ro.Phase)
	refuse := func(want string) error {
		return fmt.Errorf("fleet: deployment %q: cannot %s version %d: its rollout is %s, not %s: %w", name, action, v.rec.Num, v.ro.Phase, want, ErrConflict)
	}
	switch action {
	case ActionPause:
		if v.ro.Phase != PhaseProgressing {
			return nil, refuse(PhaseProgressing)
		}
		v.ro.Phase = PhasePaused
		v.ro.HealthySinceMs = 0
		v.ro.Message = "paused by " + who
	case ActionResume:
		if v.ro.Phase != PhasePaused {
			return nil, refuse(PhasePaused)
		}
		// The soak starts again: pause cleared healthy_since, and a
		// paused rollout is not evaluated.
		v.ro.Phase = PhaseProgressing
		v.ro.StepStartedMs = now
		v.ro.Message = "resumed by " + who
	case ActionAbort:
		if v.ro.Phase != PhaseProgressing && v.ro.Phase != PhasePaused {
			return nil, refuse("progressing or paused")
		}
		n := f.rollback(c, d, v)
		v.ro.Phase = PhaseAborted
		v.ro.HealthySinceMs = 0
		v.ro.RolledBack = true
		v.ro.Message = fmt.Sprintf("aborted by %s at step %d of %d; %d edges back on their prior version", who, v.ro.Step+1, len(v.rec.Ends), n)
	case ActionUndo:
		prev := previousContent(d)
		if prev == nil {
			return nil, fmt.Errorf("fleet: deployment %q: cannot undo: no earlier version differs from version %d: %w", name, v.rec.Num, ErrConflict)
		}
		for _, r := range prev.rec.Resolved {
			if p := f.pipelines[r.Name]; p == nil || p.rev(r.Revision) == nil {
				return nil, fmt.Errorf("fleet: deployment %q: cannot undo to version %d: pipeline %s revision %d was deleted: %w", name, prev.rec.Num, r.Name, r.Revision, ErrConflict)
			}
		}
		if err := f.checkUsers(name, prev.rec.Resolved); err != nil {
			return nil, err
		}
		s := prev.rec.Strategy
		s.Staged, s.Canary, s.CanaryPercent, s.Batch, s.BatchPercent = false, 0, 0, 0, 0
		rec := versionRecord{Selector: prev.rec.Selector, Pipelines: slices.Clone(prev.rec.Resolved), Strategy: s, Resolved: slices.Clone(prev.rec.Resolved), Author: who, CreatedMs: now}
		_, nv := f.newVersion(c, d, name, rec, prev.sel)
		f.addAudit(c, who, "rollout.undo", "deployment/"+name, fmt.Sprintf("version %d", v.rec.Num), fmt.Sprintf("%s (the content of version %d)", versionText(nv), prev.rec.Num))
		if err := f.commit(c); err != nil {
			return nil, err
		}
		f.kickEval()
		return f.deploymentProto(d, nv), nil
	}
	c.rollouts[v] = struct{}{}
	f.addAudit(c, who, "rollout."+action, "deployment/"+name, before, fmt.Sprintf("version %d %s", v.rec.Num, v.ro.Phase))
	if err := f.commit(c); err != nil {
		return nil, err
	}
	f.kickEval()
	return f.deploymentProto(d, v), nil
}

// previousContent returns the latest version before the current one
// whose selector or resolved revisions differ from it.
func previousContent(d *deployment) *version {
	cur := d.current()
	for i := len(d.versions) - 2; i >= 0; i-- {
		v := d.versions[i]
		if v.sel.String() != cur.sel.String() || !slices.Equal(v.rec.Resolved, cur.rec.Resolved) {
			return v
		}
	}
	return nil
}
