package edge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
	"github.com/runnel-io/runnel/state"
)

// Managed pipelines (docs/fleet.md, "The edge agent"). Besides the
// pipelines of its local files, a node runs the pipeline revisions the
// hub's fleet API deploys to it: the applied set, stored in the state
// file (bucket "fleet", key "applied", a runnelv1.DesiredSet) in the
// transaction of the checkpoint that switched to it. A node that restarts
// without a network runs that set.
//
// A change applies at a checkpoint barrier, in the pump (reconfigure):
// every record before the barrier counts under the old set, every record
// after it under the new. A revision Compatible with the one it replaces
// takes over its window state; otherwise, and for a pipeline the set no
// longer holds, the old revision's open windows fire as final results
// (Runtime.EndOfInput) before the barrier, and its state is deleted in the
// barrier's commit.

const (
	bucketFleet = "fleet"
	keyApplied  = "applied"
)

// pipeDef is one pipeline a node runs: a local file's (rev 0) or a
// managed revision.
type pipeDef struct {
	p     *operators.Pipeline
	rev   uint32
	class uint32
	hash  string
	spec  string // a managed revision's spec text
}

func (d pipeDef) managed() bool { return d.rev > 0 }

// same reports whether d and o run the same thing.
func (d pipeDef) same(o pipeDef) bool {
	if !d.managed() || !o.managed() {
		return d.p == o.p
	}
	return d.p.Name == o.p.Name && d.rev == o.rev && d.hash == o.hash
}

// pipeDefs returns what the node runs at open: the local pipelines and the
// stored applied set. A managed pipeline named like a local one is refused:
// the hub manages it.
func (n *node) pipeDefs() ([]pipeDef, error) {
	var defs []pipeDef
	for _, p := range n.cfg.Pipelines {
		defs = append(defs, pipeDef{p: p})
	}
	set, err := n.loadApplied()
	if err != nil || set == nil {
		return defs, err
	}
	managed, problems := compileSet(set)
	for _, pr := range problems {
		// The set compiled when it was applied: a binary that no longer
		// takes it (a downgrade) runs the rest and reports the problem.
		n.lg.Error("edge: a managed pipeline of the applied set does not compile; it is not run", "err", pr)
		n.fleet.startProblems = append(n.fleet.startProblems, pr.Error())
	}
	if errs := conflictsWithLocal(n.cfg.Pipelines, managed); len(errs) > 0 {
		var err error
		for _, e := range errs {
			err = errors.Join(err, e.err)
		}
		return nil, err
	}
	n.fleet.applied.Store(set)
	return append(defs, managed...), nil
}

// conflictsWithLocal refuses a managed pipeline named like a local one.
func conflictsWithLocal(local []*operators.Pipeline, managed []pipeDef) []setProblem {
	var errs []setProblem
	for _, d := range managed {
		for _, p := range local {
			if p.Name == d.p.Name {
				errs = append(errs, setProblem{p.Name, fmt.Errorf("edge: pipeline %s of %s is managed by the hub (revision %d is deployed to this edge): remove the local file, or the pipeline from the hub's deployment",
					p.Name, p.Spec.File, d.rev)})
			}
		}
	}
	return errs
}

// setProblem is why one pipeline of a desired set cannot run.
type setProblem struct {
	name string
	err  error
}

func (p setProblem) Error() string { return p.err.Error() }

// compileSet compiles every pipeline of a desired set. It returns the
// ones that compile and a problem per one that does not, naming it.
func compileSet(set *runnelv1.DesiredSet) ([]pipeDef, []setProblem) {
	var defs []pipeDef
	var errs []setProblem
	seen := map[string]bool{}
	for _, dp := range set.GetPipelines() {
		switch {
		case dp.GetRevision() == 0:
			errs = append(errs, problem(dp, fmt.Errorf("pipeline %s: revision 0", dp.GetName())))
			continue
		case seen[dp.GetName()]:
			errs = append(errs, problem(dp, fmt.Errorf("pipeline %s: named twice", dp.GetName())))
			continue
		}
		seen[dp.GetName()] = true
		file := fmt.Sprintf("%s@%d", dp.GetName(), dp.GetRevision())
		p, err := operators.CompileYAML(file, []byte(dp.GetSpec()))
		if err != nil {
			errs = append(errs, problem(dp, err))
			continue
		}
		if p.Name != dp.GetName() {
			errs = append(errs, problem(dp, fmt.Errorf("%s: the spec names pipeline %s", file, p.Name)))
			continue
		}
		if err := managedOutputs(file, p); err != nil {
			errs = append(errs, problem(dp, err))
			continue
		}
		defs = append(defs, pipeDef{p: p, rev: dp.GetRevision(), class: dp.GetCompatClass(), hash: dp.GetHash(), spec: dp.GetSpec()})
	}
	return defs, errs
}

func problem(dp *runnelv1.DesiredPipeline, err error) setProblem {
	return setProblem{dp.GetName(), err}
}

// managedOutputs refuses outputs a pipeline from the hub may not have:
// files (the hub would choose paths on the gateway's disk).
func managedOutputs(file string, p *operators.Pipeline) error {
	outs := slices.Clone(p.Spec.Outputs)
	for _, o := range []*spec.Output{p.Spec.LateOutput, p.Spec.DeadLetter} {
		if o != nil {
			outs = append(outs, *o)
		}
	}
	for _, o := range outs {
		if o.Kind == spec.OutputFile {
			return fmt.Errorf("%s: a pipeline deployed by the hub may not write files (output file %s): use mqtt, stdout or the hub", file, o.Path)
		}
	}
	return nil
}

func (n *node) loadApplied() (*runnelv1.DesiredSet, error) {
	var set *runnelv1.DesiredSet
	err := n.store.View(func(tx *state.Tx) error {
		b, err := tx.Bucket(bucketFleet)
		if err != nil {
			return err
		}
		v, err := b.Get([]byte(keyApplied))
		if err != nil || v == nil {
			return err
		}
		set = &runnelv1.DesiredSet{}
		if err := proto.Unmarshal(v, set); err != nil {
			return fmt.Errorf("edge: the applied pipeline set in the state file does not decode: %w", err)
		}
		return nil
	})
	return set, err
}

// newPipe builds and starts a pipeline of the node; restore loads its
// operator state from the store.
func (n *node) newPipe(ctx context.Context, d pipeDef, restore bool) (*pipe, error) {
	p := d.p
	outs, err := openOutputs(p)
	if err != nil {
		return nil, err
	}
	side, err := openSideWriters(n, p)
	if err != nil {
		outs.close()
		return nil, err
	}
	ps := &pipe{def: d, p: p, match: newTopicMatch(p), outs: outs, side: side, state: newPipeState(n.store.Path(), p.Name, n.store.KeyGroups())}
	for _, o := range p.Spec.Outputs {
		switch o.Kind {
		case spec.OutputHub:
			ps.toHub = true
		case spec.OutputMQTT:
			ps.mqtt = append(ps.mqtt, o)
		}
	}
	ps.sink = &stagingSink{p: p, rev: d.rev, local: !ps.toHub, parts: n.parts, groups: n.store.KeyGroups()}
	opts := n.cfg.Runtime
	// The runtime's key groups are the store's: a restore reads them one
	// by one, which lets eviction work during it (operators.Options.Restore).
	opts.KeyGroups = n.store.KeyGroups()
	if restore {
		opts.Restore = func(fn func(uint64, []byte, []byte) error) error { return ps.state.restore(n.store, fn) }
	}
	if opts.MaxResident > 0 {
		opts.KeyStore = newKeyReader(n.store, p.Name)
	}
	rt, err := operators.Start(context.WithoutCancel(ctx), p, ps.sink, opts)
	if err != nil {
		outs.close()
		side.close()
		return nil, fmt.Errorf("edge: pipeline %s: %w", p.Name, err)
	}
	ps.rt = rt
	return ps, nil
}

// publishPipes makes n.pipes what other goroutines see (n.pipe, metrics,
// the agent's status) and derives what depends on the set. The pump and
// the writer use n.pipes itself: they change it only while the other
// waits (reconfigure).
func (n *node) publishPipes() {
	ps := slices.Clone(n.pipes)
	n.pipeView.Store(&ps)
	var h int64
	for _, ps := range n.pipes {
		if d := ps.p.IdleHorizon(); d > 0 {
			h = max(h, d.Milliseconds()+clockEvery)
		}
	}
	n.idleHorizon.Store(h)
}

// subscriptions returns the topic filters the pipelines read.
func (n *node) subscriptions() []mqtt.Subscription {
	var subs []mqtt.Subscription
	seen := map[string]bool{}
	for _, ps := range n.pipes {
		if m := ps.p.Spec.Source.MQTT; m != nil && !seen[m.Topic] {
			seen[m.Topic] = true
			subs = append(subs, mqtt.Subscription{Filter: m.Topic, QoS: byte(m.QoS)})
		}
	}
	return subs
}

// applyReq asks the pump to switch to a desired set.
type applyReq struct {
	set  *runnelv1.DesiredSet
	defs []pipeDef // the set's pipelines, compiled
	done chan error
}

// apply hands a compiled desired set to the pump and waits until the node
// runs it (or the switch failed). The set must not name a local pipeline.
func (n *node) apply(ctx context.Context, set *runnelv1.DesiredSet, defs []pipeDef) error {
	req := applyReq{set: set, defs: defs, done: make(chan error, 1)}
	select {
	case n.applyReqs <- req:
	case <-n.closing:
		return errors.New("edge: stopping")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-n.closing:
		return errors.New("edge: stopping")
	}
}

// plan is how a reconfiguration treats each running pipeline.
type plan struct {
	keep    []*pipe   // running on, unchanged
	carry   []*pipe   // replaced by a compatible revision: its state goes on
	end     []*pipe   // replaced by an incompatible revision, or gone: windows fire, state is deleted
	start   []pipeDef // to start, in set order, with their predecessors' state where carried
	carried map[string]bool
}

func planFor(running []*pipe, defs []pipeDef) plan {
	pl := plan{carried: map[string]bool{}}
	want := map[string]pipeDef{}
	for _, d := range defs {
		want[d.p.Name] = d
	}
	for _, ps := range running {
		if !ps.def.managed() {
			pl.keep = append(pl.keep, ps)
			continue
		}
		d, ok := want[ps.p.Name]
		switch {
		case !ok:
			pl.end = append(pl.end, ps)
		case d.same(ps.def):
			pl.keep = append(pl.keep, ps)
			delete(want, ps.p.Name)
		default:
			if ok, _ := operators.Compatible(ps.p, d.p); ok {
				pl.carry = append(pl.carry, ps)
				pl.carried[ps.p.Name] = true
			} else {
				pl.end = append(pl.end, ps)
			}
		}
	}
	for _, d := range defs {
		if _, ok := want[d.p.Name]; ok {
			pl.start = append(pl.start, d)
		}
	}
	return pl
}

func (pl plan) String() string {
	names := func(ps []*pipe) string {
		var s []string
		for _, p := range ps {
			s = append(s, fmt.Sprintf("%s@%d", p.p.Name, p.def.rev))
		}
		return strings.Join(s, ",")
	}
	var st []string
	for _, d := range pl.start {
		st = append(st, fmt.Sprintf("%s@%d", d.p.Name, d.rev))
	}
	return fmt.Sprintf("keep [%s] carry [%s] end [%s] start [%s]", names(pl.keep), names(pl.carry), names(pl.end), strings.Join(st, ","))
}

// reconfigure switches the pipelines at a checkpoint barrier; the pump
// calls it between records. barrier injects a barrier carrying the change
// and returns once that checkpoint is committed. fatal stops the node (the
// checkpoint failed); report is a pipeline of the set that would not start
// (the rest run).
func (n *node) reconfigure(ctx context.Context, req applyReq, barrier func(*fleetCommit) error) (report, fatal error) {
	pl := planFor(n.pipes, req.defs)
	n.lg.Info("edge: applying the hub's pipeline set", "generation", req.set.GetGeneration(), "plan", pl.String())
	for _, ps := range pl.end {
		if err := ps.rt.EndOfInput(); err != nil {
			return nil, fmt.Errorf("edge: pipeline %s: end of input: %w", ps.p.Name, err)
		}
	}
	set, err := proto.Marshal(req.set)
	if err != nil {
		return nil, err
	}
	fc := &fleetCommit{applied: set, ending: pl.end}
	for _, ps := range pl.end {
		if !pl.carried[ps.p.Name] {
			fc.drop = append(fc.drop, ps.p.Name)
		}
	}
	if err := barrier(fc); err != nil {
		return nil, err
	}
	// Checkpoint committed: the old revisions have nothing more to give.
	old := append(slices.Clone(pl.carry), pl.end...)
	for _, ps := range old {
		if _, err := ps.rt.Close(false); err != nil {
			n.lg.Warn("edge: closing a replaced pipeline", "pipeline", ps.p.Name, "err", err)
		}
	}
	next := slices.Clone(pl.keep)
	var startErr error
	for _, d := range pl.start {
		ps, err := n.newPipe(ctx, d, pl.carried[d.p.Name])
		if err != nil {
			// The set compiled; a pipeline that still fails to start
			// (an output that cannot open) is reported, the rest run.
			startErr = errors.Join(startErr, err)
			continue
		}
		next = append(next, ps)
	}
	err = n.write(func() error {
		n.pipes = next
		return nil
	})
	if err != nil {
		return nil, err
	}
	n.publishPipes()
	n.fleet.applied.Store(req.set)
	for _, ps := range old {
		ps.outs.close()
		ps.side.close()
	}
	if n.intakeSubs.Load() != nil {
		n.setIntakeTopics() // the embedded broker: nothing to subscribe to
	} else if src := n.status.src.Load(); src != nil {
		if err := src.SetTopics(ctx, n.subscriptions()); err != nil {
			n.lg.Warn("edge: mqtt: changing subscriptions", "err", err)
		}
	}
	return startErr, nil
}

// fleetState is the node's side of the hub's management: the applied set
// (pump only, after open) and what did not compile at start.
type fleetState struct {
	applied       atomic.Pointer[runnelv1.DesiredSet]
	startProblems []string // set at open
}

// fleetCommit is what a reconfiguring checkpoint stores besides the
// usual: the applied set, and the pipelines whose state goes.
type fleetCommit struct {
	applied []byte
	ending  []*pipe // revisions that end at this barrier
	drop    []string
	done    chan error // the writer's verdict on the commit
}

// storeFleet writes a reconfiguration into the checkpoint's transaction.
func storeFleet(tx *state.Tx, fc *fleetCommit) error {
	b, err := tx.Bucket(bucketFleet)
	if err != nil {
		return err
	}
	if err := b.Put([]byte(keyApplied), fc.applied); err != nil {
		return err
	}
	for _, name := range fc.drop {
		if err := tx.DeleteBucket(oplogBucket(name)); err != nil {
			return err
		}
		if err := tx.DeleteBucket(baseBucket(name)); err != nil {
			return err
		}
	}
	return nil
}
