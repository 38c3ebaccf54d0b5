// Package spec reads pipeline specs: the YAML files in which users say what
// an edge computes per window and the hub merges. docs/pipeline-spec.md is
// the user's reference for the format; this note is for the code that
// consumes a parsed spec.
//
// # Model
//
// Parse turns one YAML document into a Pipeline. It works on yaml.Node
// rather than decoding into structs, so that every problem can name the
// file, line, column and field path (window.sliding.slide,
// aggregates.p95_temp, outputs[1].mqtt.topic). A spec is read in one pass,
// section by section, and then checked across sections (computed names
// against keys and topic fields, references between computed fields,
// aggregate names against keys).
//
// Expressions (filter, compute) are expr-lang/expr source. Their types are
// unknown until records arrive, so Parse compiles them with every variable
// of unknown type: that finds syntax errors and type errors between
// constants, and proves a filter is boolean where the types say so.
// ExprFields lists the record fields an expression reads; Pipeline.Fields
// gathers them, with the event time, key, event id and aggregate argument
// fields, into the projection the payload decoder extracts.
//
// # Invariants
//
//   - Parse returns either a valid Pipeline or Problems, never both, and
//     never stops at the first problem: a user fixes a spec in one round
//     trip. Problems sort by position and match ErrInvalid.
//   - A returned Pipeline has every default applied (format json, unit ms,
//     QoS 1, outputs [hub]); consumers never re-apply defaults.
//   - Durations are whole milliseconds, the resolution of event time.
//     Window sizes are > 0; lateness and watermark settings are >= 0; a
//     sliding window has slide <= size and at most MaxSlices slices.
//   - Aggregates and computed fields keep spec order: computed fields are
//     evaluated in that order, and each may use only earlier ones.
//   - Field paths in a Pipeline are non-empty dotted paths whose segments
//     hold only letters, digits, _, -, @ and $.
//   - Expressions do not call now(): results depend on event time only, so
//     a replay after a crash reproduces them exactly.
//
// Later stages (the compiler, the hub's admission of a pipeline) report
// their own refusals with Pipeline.Problemf at Pipeline.Where(field), so
// users see one format for every spec problem.
//
// # Caveats
//
//   - YAML syntax errors are placed at the line and column of the YAML
//     library's *yaml.LoadError (go.yaml.in/yaml/v4): for an unclosed
//     quote or bracket, where it opens (the library notices at the end of
//     the file or of the block); otherwise where the library stopped,
//     which for a wrong indentation is the line that is off. YAMLProblem
//     adds a hint for the common mistakes (tabs, an unquoted ": ", an
//     unclosed bracket) and is shared with internal/settings.
//   - Inside an expression the exact column is known only for one-line
//     plain or quoted values without escapes, and for literal blocks (|).
//     Otherwise the problem points at the value and names the column
//     within it.
//   - Only constant type errors are found at start-up: "temp + 'x'" passes
//     when temp's type is unknown, and can only fail per record at run
//     time.
//   - A payload field named like an expr-lang builtin (date, len) must be
//     read as $env.date in expressions; computed and topic fields may not
//     take such names at all.
//   - YAML merge keys (<<) are refused; anchors and aliases work.
//   - Topic levels count literally: a shared subscription
//     ($share/group/...) shifts topic_fields levels by two.
//   - Parse refuses specs over MaxSize, expressions over MaxExprLen, and
//     lists at most 100 problems: past those, the input is not a spec
//     someone wrote by hand.
package spec
