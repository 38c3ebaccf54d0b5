// Package selector parses and evaluates label selectors in the syntax of
// Kubernetes (k8s.io/apimachinery/pkg/labels), the language operators of
// a fleet already know:
//
//	site=plant-7,hw in (rpi4,cm4),!legacy
//
// A selector is a comma-separated list of requirements, all of which must
// hold (AND); the empty selector "" selects everything. A requirement is
// one of:
//
//	k=v, k==v   the label k exists and its value is v
//	k!=v        k does not exist, or its value is not v
//	k in (a,b)  k exists and its value is a or b
//	k notin (a,b)  k does not exist, or its value is neither a nor b
//	k           k exists (any value, "" included)
//	!k          k does not exist
//
// Whitespace around tokens is ignored. A value may be empty (k=, or an
// empty element of a list such as "k in (,a)"), as in Kubernetes; an in or
// notin list needs at least one element. Keys are "[prefix/]name": name at
// most 63 characters of [A-Za-z0-9._-] beginning and ending with a letter
// or digit; the optional prefix a DNS subdomain (lower-case RFC 1123
// labels separated by dots, at most 253 characters). Values are empty or
// follow the rule of a name. ValidateKey and ValidateValue apply the same
// rules to labels themselves, so that every label the fleet stores can be
// selected.
//
// Parse reports the first problem with its position (1-based column) and
// what was expected there. Selector.String renders the canonical form:
// requirements sorted by key, "==" written "=", list values sorted and
// deduplicated; parsing it gives an equal selector.
//
// The package is written by hand: k8s.io/apimachinery would bring the
// whole Kubernetes type machinery (and its dependencies) into the hub for
// one small parser.
//
// # Caveats
//
// The set-based operators of node affinity ("gt", "lt", and the
// "k > 5" form that labels.Parse accepts) are not supported; Parse
// refuses them by name. Matches costs one map lookup per requirement and
// allocates nothing.
package selector
