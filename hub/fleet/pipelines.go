package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/runnel-io/runnel/internal/linediff"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// MaxSpecBytes bounds a pipeline spec.
const MaxSpecBytes = 1 << 20

// ApplyPipeline validates a spec as an edge does (operators.CompileYAML)
// and stores it as the next revision of the pipeline its name names,
// creating the pipeline. A spec with problems is refused with a
// *SpecError listing every one, and nothing is stored. A spec equal to
// the latest revision (same SHA-256) adds none (created false). DryRun
// reports the revision and diff it would store and stores nothing. The
// revision's compat_class is the previous revision's when
// operators.Compatible holds between them, else its own number.
func (f *Fleet) ApplyPipeline(who string, req *runnelv1.ApplyPipelineRequest) (*runnelv1.ApplyPipelineResponse, error) {
	if req == nil {
		return nil, fmt.Errorf("fleet: apply pipeline: no request: %w", ErrInvalid)
	}
	file := req.File
	if file == "" {
		file = "spec"
	}
	if len(req.Spec) > MaxSpecBytes {
		return nil, &SpecError{Problems: []spec.Problem{{File: file, Msg: fmt.Sprintf("the spec is %d bytes, at most %d", len(req.Spec), MaxSpecBytes)}}}
	}
	compiled, err := operators.CompileYAML(file, []byte(req.Spec))
	if err != nil {
		return nil, specError(file, err)
	}
	if probs := fileOutputs(file, compiled.Spec); len(probs) > 0 {
		return nil, &SpecError{Problems: probs}
	}
	if slices.Contains(f.opts.LocalPipelines, compiled.Name) {
		return nil, fmt.Errorf("fleet: pipeline %s is configured in the hub's own pipeline files; a pipeline managed through the fleet API needs another name: %w", compiled.Name, ErrConflict)
	}
	sum := sha256.Sum256([]byte(req.Spec))
	hash := hex.EncodeToString(sum[:])

	f.mu.Lock()
	unlock := f.mu.Unlock
	defer func() { unlock() }()
	if err := f.usable(); err != nil {
		return nil, err
	}
	now := f.nowMs()
	name := compiled.Name
	p := f.pipelines[name]
	first := f.tombs[name] + 1 // 1, or after the revisions of a deleted pipeline of the name
	rev := &revision{Name: name, Num: first, Spec: req.Spec, Author: who, CreatedMs: now, Hash: hash, Class: first}
	diff := ""
	before := ""
	if p != nil {
		latest := p.latest()
		if latest.Hash == hash {
			return &runnelv1.ApplyPipelineResponse{Revision: latest.proto()}, nil
		}
		rev.Num = latest.Num + 1
		rev.Class = rev.Num
		if prev := f.compiledLatest(p); prev != nil {
			if ok, _ := operators.Compatible(prev, compiled); ok {
				rev.Class = latest.Class
			}
		}
		diff = linediff.Unified(fmt.Sprintf("%s@%d", name, latest.Num), fmt.Sprintf("%s@%d", name, rev.Num), latest.Spec, req.Spec)
		before = fmt.Sprintf("revision %d", latest.Num)
	}
	if req.DryRun {
		return &runnelv1.ApplyPipelineResponse{Revision: rev.proto(), Diff: diff}, nil
	}
	c := newChanges()
	if p == nil {
		p = &pipeline{rec: pipelineRecord{Name: name, CreatedMs: now}, desired: map[uint32]*runnelv1.DesiredPipeline{}}
		f.pipelines[name] = p
		delete(f.tombs, name)
	}
	p.rec.UpdatedMs = now
	p.revs = append(p.revs, rev)
	p.compiled = compiled
	c.pipelines[p] = struct{}{}
	c.revs = append(c.revs, rev)
	f.addAudit(c, who, "pipeline.apply", "pipeline/"+name, before, fmt.Sprintf("revision %d", rev.Num))
	if err := f.commit(c); err != nil {
		return nil, err
	}
	resp := &runnelv1.ApplyPipelineResponse{Revision: rev.proto(), Created: true, Diff: diff}
	if f.opts.OnRevision != nil {
		// Called outside f.mu, in revision order (cbMu is taken before
		// f.mu is let go).
		f.cbMu.Lock()
		f.mu.Unlock()
		unlock = func() {}
		defer f.cbMu.Unlock()
		f.opts.OnRevision(rev.proto(), compiled)
	}
	return resp, nil
}

// specError turns what CompileYAML returned into a *SpecError with every
// problem.
func specError(file string, err error) *SpecError {
	var probs spec.Problems
	var one spec.Problem
	switch {
	case errors.As(err, &probs):
		return &SpecError{Problems: slices.Clone(probs)}
	case errors.As(err, &one):
		return &SpecError{Problems: []spec.Problem{one}}
	}
	return &SpecError{Problems: []spec.Problem{{File: file, Msg: err.Error()}}}
}

// compiledLatest returns p's latest revision compiled, or nil when it no
// longer compiles (the spec language changed): then the next revision
// starts a class of its own.
func (f *Fleet) compiledLatest(p *pipeline) *operators.Pipeline {
	if p.compiled == nil {
		latest := p.latest()
		c, err := operators.CompileYAML(p.rec.Name, []byte(latest.Spec))
		if err != nil {
			f.log.Warn("fleet: a stored revision no longer compiles", "pipeline", p.rec.Name, "revision", latest.Num, "err", err)
			return nil
		}
		p.compiled = c
	}
	return p.compiled
}

func (r *revision) proto() *runnelv1.PipelineRevision {
	return &runnelv1.PipelineRevision{
		Name: r.Name, Revision: r.Num, Spec: r.Spec, Author: r.Author,
		CreatedMs: r.CreatedMs, Hash: r.Hash, CompatClass: r.Class,
	}
}

func (f *Fleet) managedPipeline(p *pipeline) *runnelv1.ManagedPipeline {
	return &runnelv1.ManagedPipeline{
		Name:           p.rec.Name,
		Latest:         p.latest().Num,
		CreatedMs:      p.rec.CreatedMs,
		UpdatedMs:      p.rec.UpdatedMs,
		Deployments:    f.deploymentsNaming(p.rec.Name),
		LatestRevision: p.latest().proto(),
	}
}

// deploymentsNaming returns the deployments whose current version names
// the pipeline, sorted.
func (f *Fleet) deploymentsNaming(name string) []string {
	var out []string
	for _, dn := range f.depNames {
		if names(f.deps[dn].current().rec.Resolved, name) {
			out = append(out, dn)
		}
	}
	return out
}

func names(refs []ref, name string) bool {
	return slices.ContainsFunc(refs, func(r ref) bool { return r.Name == name })
}

// pipelineUsers returns the deployments that use the pipeline: their
// current version names it, or edges are still given a version of theirs
// that names it (a rollout under way). except is left out.
func (f *Fleet) pipelineUsers(name, except string) []string {
	var out []string
	for _, dn := range f.depNames {
		if dn == except {
			continue
		}
		d := f.deps[dn]
		used := names(d.current().rec.Resolved, name)
		for vn, n := range d.assigned {
			if used {
				break
			}
			used = n > 0 && names(d.versions[vn-1].rec.Resolved, name)
		}
		if used {
			out = append(out, dn)
		}
	}
	return out
}

// GetPipeline returns a pipeline with its latest revision.
func (f *Fleet) GetPipeline(name string) (*runnelv1.ManagedPipeline, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	p := f.pipelines[name]
	if p == nil {
		return nil, fmt.Errorf("fleet: pipeline %q: %w", name, ErrNotFound)
	}
	return f.managedPipeline(p), nil
}

// ListPipelines returns every pipeline, sorted by name.
func (f *Fleet) ListPipelines() []*runnelv1.ManagedPipeline {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.usable() != nil {
		return nil
	}
	out := make([]*runnelv1.ManagedPipeline, 0, len(f.pipelines))
	for _, name := range sortedKeys(f.pipelines) {
		out = append(out, f.managedPipeline(f.pipelines[name]))
	}
	return out
}

// ListRevisions returns a pipeline's revisions, oldest first.
func (f *Fleet) ListRevisions(name string) ([]*runnelv1.PipelineRevision, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	p := f.pipelines[name]
	if p == nil {
		return nil, fmt.Errorf("fleet: pipeline %q: %w", name, ErrNotFound)
	}
	out := make([]*runnelv1.PipelineRevision, len(p.revs))
	for i, r := range p.revs {
		out[i] = r.proto()
	}
	return out, nil
}

// AllRevisions returns every stored revision of every pipeline, by
// pipeline name and oldest first: what a hub learns at start before
// OnRevision tells it of new ones.
func (f *Fleet) AllRevisions() []*runnelv1.PipelineRevision {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.usable() != nil {
		return nil
	}
	var out []*runnelv1.PipelineRevision
	for _, name := range sortedKeys(f.pipelines) {
		for _, r := range f.pipelines[name].revs {
			out = append(out, r.proto())
		}
	}
	return out
}

// DiffRevisions returns a unified diff of two revisions' specs and
// whether to may take over from's state and merge with it
// (operators.Compatible). to 0 means the latest; from 0 the revision
// before to (the empty text before the first revision).
func (f *Fleet) DiffRevisions(name string, from, to uint32) (*runnelv1.DiffRevisionsResponse, error) {
	f.mu.RLock()
	p := f.pipelines[name]
	var a, b *revision
	err := f.usable()
	if err == nil && p == nil {
		err = fmt.Errorf("fleet: pipeline %q: %w", name, ErrNotFound)
	}
	if err == nil {
		if to == 0 {
			to = p.latest().Num
		}
		fromGiven := from != 0
		if !fromGiven {
			from = to - 1
		}
		b = p.rev(to)
		a = p.rev(from)
		switch {
		case b == nil:
			err = fmt.Errorf("fleet: pipeline %q has no revision %d (it has %d to %d): %w", name, to, p.revs[0].Num, p.latest().Num, ErrNotFound)
		case a == nil && fromGiven:
			err = fmt.Errorf("fleet: pipeline %q has no revision %d (it has %d to %d): %w", name, from, p.revs[0].Num, p.latest().Num, ErrNotFound)
		}
	}
	f.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	if a == nil {
		return &runnelv1.DiffRevisionsResponse{
			Diff:   linediff.Unified("/dev/null", fmt.Sprintf("%s@%d", name, b.Num), "", b.Spec),
			Reason: fmt.Sprintf("revision %d is the first: there is nothing to be compatible with", b.Num),
		}, nil
	}
	resp := &runnelv1.DiffRevisionsResponse{Diff: linediff.Unified(fmt.Sprintf("%s@%d", name, a.Num), fmt.Sprintf("%s@%d", name, b.Num), a.Spec, b.Spec)}
	pa, errA := operators.CompileYAML(name, []byte(a.Spec))
	pb, errB := operators.CompileYAML(name, []byte(b.Spec))
	switch {
	case errA != nil:
		resp.Reason = fmt.Sprintf("revision %d no longer compiles: %v", a.Num, firstLine(errA))
	case errB != nil:
		resp.Reason = fmt.Sprintf("revision %d no longer compiles: %v", b.Num, firstLine(errB))
	default:
		resp.Compatible, resp.Reason = operators.Compatible(pa, pb)
	}
	return resp, nil
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// DeletePipeline deletes a pipeline and all its revisions. It is refused
// (ErrConflict) while a deployment's current version names it, or while
// edges are still given an older version that does.
func (f *Fleet) DeletePipeline(who, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return err
	}
	p := f.pipelines[name]
	if p == nil {
		return fmt.Errorf("fleet: pipeline %q: %w", name, ErrNotFound)
	}
	if users := f.pipelineUsers(name, ""); len(users) > 0 {
		return fmt.Errorf("fleet: pipeline %q is deployed by %s; change the deployment first: %w", name, strings.Join(users, ", "), ErrConflict)
	}
	c := newChanges()
	delete(f.pipelines, name)
	now := f.nowMs()
	f.tombs[name] = p.latest().Num
	c.dropPipes = append(c.dropPipes, pipelineRecord{Name: name, CreatedMs: p.rec.CreatedMs, UpdatedMs: now, Deleted: true, Last: p.latest().Num})
	f.addAudit(c, who, "pipeline.delete", "pipeline/"+name, fmt.Sprintf("revision %d", p.latest().Num), "")
	return f.commit(c)
}

// fileOutputs refuses the file outputs of a managed pipeline: the hub
// would choose paths on every gateway's disk, and edges refuse them (edge
// managed.go). Every one is listed at its position.
func fileOutputs(file string, p *spec.Pipeline) []spec.Problem {
	var probs []spec.Problem
	add := func(field string, o *spec.Output) {
		if o != nil && o.Kind == spec.OutputFile {
			probs = append(probs, spec.Problem{File: file, Pos: p.Where(field), Field: field,
				Msg: "a pipeline managed by the hub may not write files on the gateways; use mqtt, stdout or the hub"})
		}
	}
	for i := range p.Outputs {
		add(fmt.Sprintf("outputs[%d].file", i), &p.Outputs[i])
	}
	add("late_output.file", p.LateOutput)
	add("dead_letter.file", p.DeadLetter)
	return probs
}
