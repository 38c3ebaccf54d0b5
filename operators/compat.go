package operators

import (
	"fmt"
	"slices"

	"github.com/runnel-io/runnel/operators/spec"
)

// Compatible reports whether a pipeline revision next may take over the
// window state of prev, and whether the hub may merge partials of the two:
// the same name, key fields, event time field and unit, computed fields,
// window, and aggregates (name, function, arguments, in order). Anything
// else may change: the source topic, the filter, event_id, the watermark
// and event-time bounds, allowed lateness, outputs and side outputs.
// When they are not compatible, reason says the first difference.
// docs/fleet.md states the rule for users.
func Compatible(prev, next *Pipeline) (ok bool, reason string) {
	a, b := prev.Spec, next.Spec
	switch {
	case a.Name != b.Name:
		return false, fmt.Sprintf("name changed from %s to %s", a.Name, b.Name)
	case !slices.Equal(a.Key, b.Key):
		return false, fmt.Sprintf("key changed from %v to %v", a.Key, b.Key)
	case a.EventTime.Field != b.EventTime.Field || a.EventTime.Unit != b.EventTime.Unit:
		return false, fmt.Sprintf("event time changed from %s (%s) to %s (%s)", a.EventTime.Field, a.EventTime.Unit, b.EventTime.Field, b.EventTime.Unit)
	case a.Window != b.Window:
		return false, fmt.Sprintf("window changed from %s to %s", windowText(a.Window), windowText(b.Window))
	case !slices.EqualFunc(a.Compute, b.Compute, func(x, y spec.Computed) bool { return x.Name == y.Name && x.Expr == y.Expr }):
		return false, "computed fields changed"
	case !slices.EqualFunc(a.Aggregates, b.Aggregates, sameAggregate):
		return false, "aggregates changed"
	}
	return true, ""
}

func sameAggregate(x, y spec.Aggregate) bool {
	return x.Name == y.Name && x.Func == y.Func && slices.Equal(x.Args, y.Args) && x.Quantile == y.Quantile
}

func windowText(w spec.Window) string {
	switch w.Kind {
	case spec.Sliding:
		return fmt.Sprintf("sliding %s/%s", w.Size, w.Slide)
	case spec.Session:
		return fmt.Sprintf("session %s", w.Gap)
	}
	return fmt.Sprintf("%s %s", w.Kind, w.Size)
}
