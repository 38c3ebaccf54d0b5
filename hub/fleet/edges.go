package fleet

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/runnel-io/runnel/hub/fleet/selector"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// MaxEdgeIDBytes bounds an edge id.
const MaxEdgeIDBytes = 255

func checkEdgeID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("fleet: empty edge id: %w", ErrInvalid)
	case len(id) > MaxEdgeIDBytes:
		return fmt.Errorf("fleet: edge id of %d bytes, at most %d: %w", len(id), MaxEdgeIDBytes, ErrInvalid)
	case !utf8.ValidString(id):
		return fmt.Errorf("fleet: edge id %q is not UTF-8: %w", id, ErrInvalid)
	}
	return nil
}

// checkLabels checks every label of a set, listing each bad one.
func checkLabels(what string, labels map[string]string) error {
	var probs []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := selector.ValidateKey(k); err != nil {
			probs = append(probs, err.Error())
		} else if err := selector.ValidateValue(labels[k]); err != nil {
			probs = append(probs, fmt.Sprintf("label %s: %v", k, err))
		}
	}
	if len(probs) > 0 {
		return fmt.Errorf("fleet: %s: %s: %w", what, strings.Join(probs, "; "), ErrInvalid)
	}
	return nil
}

// effectiveLabels overlays the hub's labels on the edge's own.
func effectiveLabels(own, hub map[string]string) map[string]string {
	if len(hub) == 0 {
		return own // shared: neither map is changed in place, only replaced
	}
	out := make(map[string]string, len(own)+len(hub))
	maps.Copy(out, own)
	maps.Copy(out, hub)
	return out
}

// afterFunc is context.AfterFunc, through ctx's own AfterFunc when it
// has one (the hub's wire streams do): context.AfterFunc would make the
// stream a Done channel and a child context besides, about 400 bytes an
// edge for as long as it is connected.
func afterFunc(ctx context.Context, f func()) (stop func() bool) {
	if a, ok := ctx.(interface{ AfterFunc(func()) func() bool }); ok {
		return a.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}

// labelText renders labels as "a=1,b=2", sorted, for the audit log.
func labelText(labels map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(labels[k])
	}
	return b.String()
}

// Connect registers an edge's control stream: the first time it records
// the edge (registered_ms), later it updates the edge's own labels,
// version, OS and arch. reg.Status, when set, is recorded as a Status.
// The channel delivers the edge's current desired set at once and every
// change after it; a set the edge has not taken yet is replaced by a
// newer one. It closes when ctx ends, when the edge connects again, or
// when the Fleet closes. notify, unless nil, is called after each set
// is put on the channel and after it closes, so that a caller can take
// the sets without a goroutine waiting on the channel; it is called with
// the Fleet's lock held and must neither block nor call the Fleet. The
// sets' DesiredPipelines are shared: do not modify them.
func (f *Fleet) Connect(ctx context.Context, edgeID string, reg *runnelv1.Register, notify func()) (<-chan *runnelv1.DesiredSet, error) {
	if err := checkEdgeID(edgeID); err != nil {
		return nil, err
	}
	switch {
	case reg == nil:
		return nil, fmt.Errorf("fleet: edge %q: no Register: %w", edgeID, ErrInvalid)
	case reg.EdgeId != edgeID:
		return nil, fmt.Errorf("fleet: edge %q: Register names edge %q: %w", edgeID, reg.EdgeId, ErrInvalid)
	}
	if err := checkLabels(fmt.Sprintf("edge %q: labels", edgeID), reg.Labels); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	now := f.nowMs()
	c := newChanges()
	e := f.edges[edgeID]
	isNew := e == nil
	if isNew {
		e = &edge{rec: edgeRecord{ID: edgeID, RegisteredMs: now}}
		f.edges[edgeID] = e
		i, _ := slices.BinarySearch(f.edgeIDs, edgeID)
		f.edgeIDs = slices.Insert(f.edgeIDs, i, edgeID)
	}
	if e.conn != nil {
		// A newer stream of the edge replaces the old one.
		e.conn.stop()
		e.conn.end()
		e.conn = nil
	}
	e.rec.Labels = maps.Clone(reg.Labels)
	if len(e.rec.Labels) == 0 {
		e.rec.Labels = nil
	}
	e.rec.Version, e.rec.OS, e.rec.Arch = reg.Version, reg.Os, reg.Arch
	e.lastSeenMs = now
	if reg.Status != nil {
		e.status = reg.Status
	}
	e.statusSeq++
	c.status[e] = struct{}{}
	c.edges[e] = struct{}{}
	f.relabelled(c, e, isNew)
	if err := f.commit(c); err != nil {
		return nil, err
	}
	cn := &conn{ch: make(chan *runnelv1.DesiredSet, 1), notify: notify}
	cn.offer(f.desiredSet(e))
	e.conn = cn
	cn.stop = afterFunc(ctx, func() { f.disconnect(e.rec.ID, cn) })
	if reg.Status != nil {
		f.kickEval()
	}
	return cn.ch, nil
}

// disconnect ends cn if it is still the edge's stream.
func (f *Fleet) disconnect(id string, cn *conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.edges[id]; e != nil && e.conn == cn {
		cn.end()
		e.conn = nil
	}
}

// Status records an edge's report. It is kept in memory at once; it is
// written before Status returns when it changes what a rollout gate looks
// at (applied generation, apply error, a pipeline's name, revision, state
// or error), otherwise at most every Options.StatusWriteEvery. Status
// keeps st: the caller must not modify it afterwards. An edge with no
// open control stream is refused (ErrConflict).
func (f *Fleet) Status(edgeID string, st *runnelv1.EdgeStatus) error {
	if st == nil {
		return fmt.Errorf("fleet: edge %q: no status: %w", edgeID, ErrInvalid)
	}
	f.mu.Lock()
	if err := f.usable(); err != nil {
		f.mu.Unlock()
		return err
	}
	e := f.edges[edgeID]
	if e == nil {
		f.mu.Unlock()
		return fmt.Errorf("fleet: edge %q: %w", edgeID, ErrNotFound)
	}
	if e.conn == nil {
		f.mu.Unlock()
		return fmt.Errorf("fleet: edge %q has no open control stream: %w", edgeID, ErrConflict)
	}
	relevant := applyChanged(e.status, st)
	// A rollout's gate looks at what an edge applied and at its rates;
	// with none progressing there is nothing to evaluate (a status a
	// second at 10,000 edges would wake the evaluator for each).
	gate := (relevant || len(e.rec.Assign) > 0 && (e.status.GetRecordsPerMin() != st.RecordsPerMin || e.status.GetDeadPerMin() != st.DeadPerMin)) &&
		f.progressing()
	e.status = st
	e.lastSeenMs = f.nowMs()
	e.statusSeq++
	var payload []byte
	seq := e.statusSeq
	if relevant {
		var err error
		if payload, err = f.statusPayload(e); err != nil {
			f.mu.Unlock()
			return err
		}
		e.writtenMs = e.lastSeenMs
		delete(f.statusDirty, e)
	} else {
		f.statusDirty[e] = struct{}{}
	}
	f.mu.Unlock()
	if gate && f.opts.Tick > 0 {
		f.kickEval()
	}
	if payload == nil {
		return nil
	}
	if err := f.writer.write(f.db, edgeID, seq, payload); err != nil {
		f.mu.Lock()
		f.statusDirty[e] = struct{}{}
		f.mu.Unlock()
		return fmt.Errorf("fleet: edge %q: write status: %w", edgeID, err)
	}
	return nil
}

// applyChanged reports whether next differs from prev in what a rollout
// gate looks at. It allocates nothing: Status calls it for every report.
func applyChanged(prev, next *runnelv1.EdgeStatus) bool {
	if prev == nil || prev.AppliedGeneration != next.AppliedGeneration || prev.ApplyError != next.ApplyError || len(prev.Pipelines) != len(next.Pipelines) {
		return true
	}
	for i, p := range prev.Pipelines {
		q := next.Pipelines[i]
		if p.GetName() != q.GetName() || p.GetRevision() != q.GetRevision() || p.GetState() != q.GetState() || p.GetError() != q.GetError() {
			return true
		}
	}
	return false
}

// GetEdge returns an edge with its labels, status and desired set.
func (f *Fleet) GetEdge(id string) (*runnelv1.FleetEdge, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	e := f.edges[id]
	if e == nil {
		return nil, fmt.Errorf("fleet: edge %q: %w", id, ErrNotFound)
	}
	return e.proto(), nil
}

// ListEdges returns the edges the selector picks ("" picks every one),
// sorted by id. A selector that does not parse is refused (ErrInvalid,
// naming the column).
func (f *Fleet) ListEdges(sel string) ([]*runnelv1.FleetEdge, error) {
	s, err := selector.Parse(sel)
	if err != nil {
		return nil, fmt.Errorf("fleet: %v: %w", err, ErrInvalid)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	var out []*runnelv1.FleetEdge
	for _, id := range f.edgeIDs {
		if e := f.edges[id]; s.Matches(e.labels) {
			out = append(out, e.proto())
		}
	}
	return out, nil
}

func (e *edge) proto() *runnelv1.FleetEdge {
	fe := &runnelv1.FleetEdge{
		EdgeId:            e.rec.ID,
		Labels:            maps.Clone(e.labels),
		EdgeLabels:        maps.Clone(e.rec.Labels),
		HubLabels:         maps.Clone(e.rec.HubLabels),
		Version:           e.rec.Version,
		Os:                e.rec.OS,
		Arch:              e.rec.Arch,
		RegisteredMs:      e.rec.RegisteredMs,
		LastSeenMs:        e.lastSeenMs,
		Connected:         e.conn != nil,
		DesiredGeneration: e.rec.Generation,
	}
	if e.status != nil {
		fe.Status = proto.Clone(e.status).(*runnelv1.EdgeStatus)
	}
	for _, r := range e.rec.Desired {
		fe.Desired = append(fe.Desired, &runnelv1.PipelineRef{Name: r.Name, Revision: r.Revision})
	}
	return fe
}

// LabelEdge sets and removes labels the hub holds for an edge; they
// override the edge's own. Keys and values follow the Kubernetes label
// syntax; a bad one, or a key both set and removed, refuses the whole
// request (ErrInvalid). Removing a label the hub does not hold is no
// change. The edge joins or leaves deployments as its labels now say.
func (f *Fleet) LabelEdge(who string, req *runnelv1.LabelEdgeRequest) (*runnelv1.FleetEdge, error) {
	if req == nil {
		return nil, fmt.Errorf("fleet: label edge: no request: %w", ErrInvalid)
	}
	if err := checkLabels(fmt.Sprintf("label edge %q", req.EdgeId), req.Set); err != nil {
		return nil, err
	}
	var probs []string
	for _, k := range req.Remove {
		if err := selector.ValidateKey(k); err != nil {
			probs = append(probs, "remove: "+err.Error())
		} else if _, ok := req.Set[k]; ok {
			probs = append(probs, fmt.Sprintf("label %s is both set and removed", k))
		}
	}
	if len(probs) > 0 {
		return nil, fmt.Errorf("fleet: label edge %q: %s: %w", req.EdgeId, strings.Join(probs, "; "), ErrInvalid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.usable(); err != nil {
		return nil, err
	}
	e := f.edges[req.EdgeId]
	if e == nil {
		return nil, fmt.Errorf("fleet: label edge %q: %w", req.EdgeId, ErrNotFound)
	}
	hub := maps.Clone(e.rec.HubLabels)
	if hub == nil {
		hub = map[string]string{}
	}
	maps.Copy(hub, req.Set)
	for _, k := range req.Remove {
		delete(hub, k)
	}
	if maps.Equal(hub, e.rec.HubLabels) || len(hub) == 0 && len(e.rec.HubLabels) == 0 {
		return e.proto(), nil
	}
	before := labelText(e.rec.HubLabels)
	if len(hub) == 0 {
		hub = nil
	}
	c := newChanges()
	e.rec.HubLabels = hub
	c.edges[e] = struct{}{}
	f.relabelled(c, e, false)
	f.addAudit(c, who, "edge.label", "edge/"+e.rec.ID, before, labelText(hub))
	if err := f.commit(c); err != nil {
		return nil, err
	}
	return e.proto(), nil
}

// relabelled recomputes e's effective labels and, when they changed or
// the edge is new, its place in every deployment: an edge the selector no
// longer picks loses the deployment's pipelines; one it now picks is
// given a version by the joiner rule (rollout.go, joinVersion). A
// reconnect with the same labels changes nothing.
func (f *Fleet) relabelled(c *changes, e *edge, isNew bool) {
	labels := effectiveLabels(e.rec.Labels, e.rec.HubLabels)
	if !isNew && maps.Equal(labels, e.labels) {
		return
	}
	e.labels = labels
	for _, dn := range f.depNames {
		d := f.deps[dn]
		v := d.current()
		a, has := e.rec.Assign[dn]
		switch m := v.sel.Matches(e.labels); {
		case !m && has:
			f.assign(c, e, d, assignment{}, false)
		case m && !has:
			if n := f.joinVersion(d, v, e.rec.ID); n != 0 {
				a = assignment{Version: n}
				if n == v.rec.Num {
					a.By = n
				}
				f.assign(c, e, d, a, true)
			}
		}
	}
}
