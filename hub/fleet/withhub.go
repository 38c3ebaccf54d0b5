package fleet

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/operators"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// OpenWithHub opens the fleet store in dir and the hub core of hc, wired
// together: the hub opens knowing every stored revision (hub.Config's
// Revisions, so that partials it parked for them apply), and each revision
// created later is defined in the hub once it is durable (hub.Define, so
// that the edges' partials of it merge and those parked apply). This is
// how runnel-hub and the demo open a hub with its control plane. Close the
// hub after the fleet.
func OpenWithHub(dir string, opts Options, hc hub.Config) (*hub.Hub, *Fleet, error) {
	var (
		mu      sync.Mutex
		h       *hub.Hub
		pending []hub.Revision // created before the hub was open
	)
	for _, p := range hc.Pipelines {
		if !slices.Contains(opts.LocalPipelines, p.Name) {
			opts.LocalPipelines = append(opts.LocalPipelines, p.Name)
		}
	}
	user := opts.OnRevision
	lg := opts.Logger
	opts.OnRevision = func(rev *runnelv1.PipelineRevision, p *operators.Pipeline) {
		r := hubRevision(rev, p)
		mu.Lock()
		hh := h
		if hh == nil {
			pending = append(pending, r)
		}
		mu.Unlock()
		if hh != nil {
			if err := hh.Define(r); err != nil && lg != nil {
				lg.Error("fleet: the hub refused a new revision; its partials stay parked", "pipeline", r.Name, "revision", r.Revision, "err", err)
			}
		}
		if user != nil {
			user(rev, p)
		}
	}
	f, err := Open(dir, opts)
	if err != nil {
		return nil, nil, err
	}
	revs, err := compiledRevisions(f.AllRevisions())
	if err != nil {
		return nil, nil, errors.Join(err, f.Close())
	}
	hc.Revisions = append(hc.Revisions, revs...)
	core, err := hub.Open(hc)
	if err != nil {
		return nil, nil, errors.Join(err, f.Close())
	}
	mu.Lock()
	h, late := core, pending
	mu.Unlock()
	for _, r := range late {
		if err := core.Define(r); err != nil {
			return nil, nil, errors.Join(err, f.Close(), core.Close())
		}
	}
	return core, f, nil
}

func hubRevision(rev *runnelv1.PipelineRevision, p *operators.Pipeline) hub.Revision {
	return hub.Revision{Name: rev.GetName(), Revision: rev.GetRevision(), Class: rev.GetCompatClass(), Pipeline: p}
}

// compiledRevisions compiles stored revisions for the hub. A stored one
// that no longer compiles (a binary that no longer takes it) is an error:
// the hub could not merge what edges send of it.
func compiledRevisions(revs []*runnelv1.PipelineRevision) ([]hub.Revision, error) {
	out := make([]hub.Revision, 0, len(revs))
	var errs []error
	for _, rev := range revs {
		p, err := operators.CompileYAML(fmt.Sprintf("%s@%d", rev.GetName(), rev.GetRevision()), []byte(rev.GetSpec()))
		if err != nil {
			errs = append(errs, fmt.Errorf("fleet: stored revision %d of %s does not compile: %w", rev.GetRevision(), rev.GetName(), err))
			continue
		}
		out = append(out, hubRevision(rev, p))
	}
	return out, errors.Join(errs...)
}
