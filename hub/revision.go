package hub

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/runnel-io/runnel/operators"
)

// Managed pipeline revisions and the catalog of what the hub merges.
//
// A pipeline of Config.Pipelines is local: its partials carry revision 0
// and merge into one pipe, stored under the pipeline's name, as before
// revisions existed. A managed revision belongs to a class (the first
// revision of a run of revisions each Compatible with its predecessor,
// as the fleet store assigns it); the partials of every revision of one
// class merge into one pipe, stored under "name@class". '@' is in no
// pipeline name (operators/spec allows [a-z0-9_-]), so that store name
// never meets a local pipeline's.
//
// The catalog is the set of pipes. It is immutable once published:
// Define builds a new one and publishes it under commitMu and Hub.mu,
// so that the readers that take neither (validate, Query, Subscribe,
// Pipeline) see one consistent set, and a commit sees the set its
// writeSet was prepared with.

// ErrBadRevision: Define (or Open, for Config.Revisions) refuses a
// revision: malformed, not compiled, in another class than the one the
// hub knows it in, or not Compatible with the other revisions of its
// class. Nothing is changed.
var ErrBadRevision = errors.New("hub: bad revision")

// classSep separates a pipeline name from its class in the store names
// of managed classes; operators/spec allows it in no pipeline name.
const classSep = '@'

// maxClassDigits is the longest class number in a store name.
const maxClassDigits = 10

// Revision is a managed pipeline revision the hub merges: revision
// Revision (1, 2, 3, ...) of the pipeline Name, whose partials merge with
// those of every other revision of class Class (the first revision of the
// run of revisions that keep state and merge, operators.Compatible).
// Pipeline is its compiled spec; Pipeline.Name is Name.
type Revision struct {
	Name     string
	Revision uint32
	Class    uint32
	Pipeline *operators.Pipeline
}

// check reports what is wrong with r on its own, or nil.
func (r *Revision) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("hub: revision %d of %q: %s: %w", r.Revision, r.Name, fmt.Sprintf(format, args...), ErrBadRevision)
	}
	switch {
	case r.Name == "" || len(r.Name) > maxPipeLen-1-maxClassDigits:
		return bad("name of %d bytes, want 1..%d", len(r.Name), maxPipeLen-1-maxClassDigits)
	case strings.IndexByte(r.Name, classSep) >= 0:
		return bad("the name holds %q, which no pipeline name does", classSep)
	case r.Revision == 0:
		return bad("revision 0 is a local pipeline's (Config.Pipelines); managed revisions start at 1")
	case r.Class == 0 || r.Class > r.Revision:
		return bad("class %d: a class is the first revision of its run, 1..%d", r.Class, r.Revision)
	case r.Pipeline == nil || r.Pipeline.Aggregates == nil || r.Pipeline.Spec == nil:
		return bad("not compiled")
	case r.Pipeline.Name != r.Name:
		return bad("the pipeline is named %q", r.Pipeline.Name)
	}
	return nil
}

// storeName is the name a pipe's records are stored under: the pipeline's
// own for a local one (class 0), name@class for a managed class.
func storeName(name string, class uint32) string {
	if class == 0 {
		return name
	}
	return name + string(classSep) + strconv.FormatUint(uint64(class), 10)
}

type revKey struct {
	name string
	rev  uint32
}

// catalog is the pipes the hub merges. Never changed once published.
type catalog struct {
	pipes []*pipe // by pipe.idx: Config.Pipelines, then classes as learned
	names map[string]*named
	revs  map[revKey]*pipe // managed (name, revision) -> its class's pipe
}

// named is what the catalog holds under one pipeline name.
type named struct {
	local   *pipe   // the Config.Pipelines one, or nil
	classes []*pipe // managed classes, in the order learned
	// latest is the highest managed revision known (0: none), in class
	// pipe latestPipe, with spec latestP.
	latest     uint32
	latestPipe *pipe
	latestP    *operators.Pipeline
}

func newCatalog() *catalog {
	return &catalog{names: map[string]*named{}, revs: map[revKey]*pipe{}}
}

// pipeOf returns the pipe partials of (name, revision) merge into: the
// local pipeline for revision 0, the class of a managed revision; nil
// when the hub does not know it.
func (c *catalog) pipeOf(name string, rev uint32) *pipe {
	if rev == 0 {
		if n := c.names[name]; n != nil {
			return n.local
		}
		return nil
	}
	return c.revs[revKey{name, rev}]
}

// resolve returns the pipe a query of (name, revision) reads: revision 0
// picks the class of the latest managed revision of name, or its local
// pipeline when it has none; another revision, the class that holds it.
func (c *catalog) resolve(name string, rev uint32) *pipe {
	if rev != 0 {
		return c.revs[revKey{name, rev}]
	}
	n := c.names[name]
	switch {
	case n == nil:
		return nil
	case n.latestPipe != nil:
		return n.latestPipe
	}
	return n.local
}

// resolvedSpec is the spec of the pipeline resolve(name, 0) reads: the
// latest managed revision's, or the local pipeline's.
func (c *catalog) resolvedSpec(name string) *operators.Pipeline {
	n := c.names[name]
	switch {
	case n == nil:
		return nil
	case n.latestPipe != nil:
		return n.latestP
	case n.local != nil:
		return n.local.p
	}
	return nil
}

// class returns name's pipe of class (0: the local one), or nil.
func (c *catalog) class(name string, class uint32) *pipe {
	n := c.names[name]
	if n == nil {
		return nil
	}
	if class == 0 {
		return n.local
	}
	for _, pp := range n.classes {
		if pp.class == class {
			return pp
		}
	}
	return nil
}

// admit checks revision r (already checked on its own) against the
// catalog: known is true when the catalog has it in the same class
// (nothing to do); pp is the pipe of its class when the catalog has
// one. A revision the catalog holds in another class, or whose spec is
// not Compatible with its class's, is refused.
func (c *catalog) admit(r *Revision) (pp *pipe, known bool, err error) {
	if have := c.revs[revKey{r.Name, r.Revision}]; have != nil {
		if have.class != r.Class {
			return nil, false, fmt.Errorf("hub: revision %d of %q: the hub has it in class %d, not %d; a revision's class never changes: %w",
				r.Revision, r.Name, have.class, r.Class, ErrBadRevision)
		}
		return have, true, nil
	}
	pp = c.class(r.Name, r.Class)
	if pp != nil {
		if ok, why := operators.Compatible(pp.spec0, r.Pipeline); !ok {
			return nil, false, fmt.Errorf("hub: revision %d of %q: not compatible with class %d (%s), so its partials cannot merge with the class's: %w",
				r.Revision, r.Name, r.Class, why, ErrBadRevision)
		}
	}
	return pp, false, nil
}

// with returns a copy of c that knows revision r, in pipe pp (r's class:
// one of c's, or a new one with pp.idx == len(c.pipes)). The maps are
// copied, the pipes shared.
func (c *catalog) with(r *Revision, pp *pipe) *catalog {
	out := &catalog{pipes: slices.Clip(c.pipes), names: make(map[string]*named, len(c.names)+1), revs: make(map[revKey]*pipe, len(c.revs)+1)}
	for k, v := range c.names {
		out.names[k] = v
	}
	for k, v := range c.revs {
		out.revs[k] = v
	}
	out.add(r, pp)
	return out
}

// add makes c know revision r, in pipe pp, in place: for a catalog not
// yet published. The named entry is replaced, not changed, so that a copy
// made by with shares nothing that add changes.
func (c *catalog) add(r *Revision, pp *pipe) {
	n := &named{}
	if old := c.names[r.Name]; old != nil {
		*n = *old
	}
	if pp.idx == len(c.pipes) {
		c.pipes = append(c.pipes, pp)
		n.classes = append(slices.Clip(n.classes), pp)
	}
	if r.Revision > n.latest {
		n.latest, n.latestPipe, n.latestP = r.Revision, pp, r.Pipeline
	}
	c.names[r.Name] = n
	c.revs[revKey{r.Name, r.Revision}] = pp
}

// addLocal makes c know local pipeline pp, in place (Open: c is not yet
// published).
func (c *catalog) addLocal(pp *pipe) {
	c.pipes = append(c.pipes, pp)
	n := c.names[pp.name]
	if n == nil {
		n = &named{}
		c.names[pp.name] = n
	}
	n.local = pp
}

// addRevision records revision r in its class pipe pp (under Hub.mu):
// the revisions it lists, and the spec it shows (the class's latest).
func (pp *pipe) addRevision(r *Revision) {
	i, found := slices.BinarySearch(pp.revisions, r.Revision)
	if found {
		return
	}
	pp.revisions = slices.Insert(slices.Clip(pp.revisions), i, r.Revision)
	if i == len(pp.revisions)-1 {
		pp.p = r.Pipeline
	}
}
