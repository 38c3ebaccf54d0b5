// Package manifest decodes the YAML files runnelctl applies: documents
// separated by ---, each a pipeline or a deployment of the hub's control
// plane (docs/runnelctl.md, "Manifests").
//
// # Documents
//
// A document is one of:
//
//   - kind: Deployment, with name, selector, pipelines and strategy, the
//     fields of runnel.v1.DeploymentSpec; durations (soak,
//     progress_deadline) are written as durations (30s, 10m) and become
//     the _ms fields.
//   - kind: Pipeline, with spec: holding a pipeline spec as a mapping.
//   - a document without kind that has name and source: a plain pipeline
//     spec, exactly the file an edge reads, so that examples/line-temps.yaml
//     applies as it is.
//
// # Invariants
//
//   - Every problem of every document is reported at once, as a
//     spec.Problem naming file:line:col and the field; a manifest with a
//     problem decodes to nothing (Decode returns nil and the problems).
//   - Unknown fields of a Deployment or of a Pipeline wrapper are
//     problems, with a did-you-mean hint; the pipeline spec itself is
//     checked by operators/spec, as an edge checks it.
//   - Pipeline.Spec is the text to send to the hub, with the line and
//     column of every character equal to the file's: a document that
//     starts at line N is sent after N-1 empty lines, and the lines of a
//     wrapper before its spec: are sent empty, so that the problems the
//     hub finds name the file's own lines.
//   - Nothing panics on input: the YAML library's panics become problems.
//
// # Caveats
//
//   - Because line numbers are kept, the same pipeline moved within its
//     file is a different text, so the hub stores a new revision (its
//     diff shows only the empty lines).
//   - A spec: that shares a line with the next field (a wrapper written as
//     one flow mapping), or that uses an anchor defined outside it,
//     cannot keep its line numbers and is refused; write spec: as a block.
//   - Documents are split at lines that start with --- or ... (as YAML
//     defines them), before parsing; YAML directives (%YAML) stay with
//     the document they precede.
package manifest
