// Package fleet is the hub's control plane: its durable state and the
// rollout state machine, as a Go API with no network in it. hub/server
// serves it over gRPC and REST (*Fleet satisfies server.FleetCore); the
// hub's merge learns of new pipeline revisions through
// Options.OnRevision.
//
// # State
//
// One bbolt file, <dir>/fleet.db (layout: docs/formats/fleet-store.md),
// holds:
//
//   - Pipelines, each a run of immutable revisions 1, 2, 3… with the spec
//     text, its author, time, SHA-256 and compat_class. A spec is
//     validated as an edge validates it (operators.CompileYAML); one with
//     problems is refused with a *SpecError listing every one. A spec
//     equal to the latest revision adds none. compat_class is the previous
//     revision's when operators.Compatible(prev, next) holds, else the
//     revision's own number: revisions of one class keep window state
//     across a change and their partials merge. A deleted pipeline leaves
//     a tombstone, so a pipeline created again under its name goes on
//     numbering after it and a revision number never names two specs.
//   - Edges: what each registered with (its own labels, version, OS,
//     arch), the labels the hub sets for it (which override its own: the
//     effective labels are the edge's overlaid by the hub's), the version
//     of each deployment it is given, its desired set with its generation,
//     and its latest status.
//   - Deployments, each a history of versions 1, 2, 3…: a label selector
//     (package selector), pipeline revisions (0 resolved to the latest
//     when the version is created) and a strategy; and each version's
//     rollout.
//   - API tokens (the SHA-256 of each secret, never the secret) and the
//     audit log: one entry per change (who, when, what, before, after),
//     automatic rollbacks included (who is SystemAuthor).
//
// Every method that changes something changes memory and writes it in one
// bbolt transaction before it returns; a failed transaction reloads memory
// from the file, which it left untouched. A refused call changes nothing.
// So the file is at every moment the state as of the last call that
// returned, and a hub killed at any point (SIGKILL included) opens it and
// resumes every rollout where it was. The one exception is an edge's
// status when only its metrics changed (records, dead letters, lag,
// disk): kept in memory at once, written at most every
// Options.StatusWriteEvery, and reported again by the edge when it
// reconnects. A status that changes what a gate reads (applied
// generation, apply error, a pipeline's name, revision, state or error)
// is written before Status returns; such writes of many edges share one
// transaction (group commit).
//
// # Desired sets
//
// An edge's desired set is the union, over deployments, of the pipeline
// revisions of the version of each deployment it is given (a pipeline
// belongs to one deployment at a time: ApplyDeployment refuses one that
// another deployment's current version names, or that edges still run
// for it). Each change of the set adds one to the edge's generation,
// durably. Connect's channel delivers the current set at once and then
// every change; a set the edge has not taken yet is replaced by the newer
// one, so a slow edge gets the newest set, never a backlog. Connect's
// notify callback, called (under the Fleet's lock) after each set put on
// the channel and after it closes, lets the server take the sets without
// a goroutine per edge waiting on the channel.
//
// # Rollout state machine
//
// Creating a version of a deployment (ApplyDeployment, or Rollout undo)
// fixes its targets: the registered edges its selector picks at that
// moment, sorted by edge id. Edges that the new selector no longer picks
// lose the deployment's pipelines then. A rollout still progressing or
// paused of the version before becomes superseded; edges keep what it
// gave them until a step of the new version reaches them.
//
// The targets are cut into steps. All at once: one step of every target.
// Staged: step 0, the canary, of canary edges or ceil(canary_percent ×
// targets / 100), at least 1; then steps of batch edges or
// ceil(batch_percent × targets / 100) each, the last one shorter. No
// targets: no steps, and the rollout succeeds at once.
//
// Starting a step gives the version to its edges that the selector still
// picks: each one's desired set changes (generation + 1, when the
// pipelines differ) and the version it had before, if any, is remembered
// on it as the prior version of this rollout. Step 0 starts when the
// version is created.
//
// The gate of a step holds when every edge of the step that is still on
// the version has reported: applied_generation at least the generation
// it was given, each pipeline of the version running at its revision, no
// apply_error, and dead_per_min / records_per_min at most
// max_dead_letter_rate (default 0.05; no records is fine). healthy_since
// is when the gate became true without a break; a false gate clears it.
//
// Phases, and what moves a rollout between them:
//
//	progressing → progressing  the gate has held for soak_ms: the next
//	                           step starts (healthy_since cleared)
//	progressing → succeeded    the same, after the last step
//	progressing → failed       an edge of the current step reports an
//	                           apply_error for its generation, or a
//	                           pipeline of the version failed at its
//	                           revision; or progress_deadline_ms (0: none)
//	                           passed since the step started with the gate
//	                           not true. The message names the edges and
//	                           their errors (failed_edges lists them);
//	                           with rollback_on_failure every edge the
//	                           rollout gave the version gets its prior
//	                           version back (none, if it had none) and
//	                           rolled_back is set.
//	progressing → paused       Rollout pause: steps do not advance,
//	                           nothing fails; healthy_since is cleared.
//	paused → progressing       Rollout resume: the soak and the progress
//	                           deadline of the step start again.
//	progressing, paused → aborted   Rollout abort: as a failure with
//	                           rollback, whatever the strategy says.
//	progressing, paused → superseded   a new version was created.
//	any → (new version)        Rollout undo: a new version with the
//	                           selector and resolved revisions of the
//	                           latest earlier version whose content
//	                           differs from the current one, and its
//	                           strategy made all at once.
//
// Any other transition is refused with ErrConflict. Succeeded, failed,
// aborted and superseded are final for their version.
//
// Evaluate applies these rules at the Fleet's clock; evaluating twice at
// one instant changes nothing the second time. The Fleet's goroutine
// calls it every Options.Tick and right after a status that could change
// a gate.
//
// # Joiners and leavers
//
// An edge that the selector of a deployment's current version picks when
// it did not before (a new registration, a change of its own or of the
// hub's labels) is given the version being rolled out when that rollout
// is progressing, paused or succeeded and has reached the edge: for one
// of its targets, the edge's step has started; for any other edge, the
// rollout is all at once, has succeeded or is past its canary step.
// Otherwise it is given the deployment's last succeeded version, or
// nothing. When a rollout passes its canary or succeeds,
// every edge its selector picks that is not a target of a step still to
// come is given the version. An edge the selector no longer picks loses
// the deployment's pipelines. A reconnect with the same labels changes
// nothing.
//
// # Status counts
//
// GetDeployment reports, for the current version: targeted, the edges
// its selector picks now (joiners included); applied, those on the
// version that pass the gate's test; failed, those on it whose apply
// failed; pending, the rest.
//
// # Caveats
//
//   - Targets are fixed when a version is created: an edge that
//     registers later is a joiner, not a member of a step.
//   - Deleting a pipeline is refused while a deployment's current version
//     names it or edges still run an earlier version that does; an
//     earlier version can still name it after that, and undo to such a
//     version is refused.
//   - The audit log grows without bound; Audit pages it.
//   - One process: the Fleet assumes it is the only writer of its file
//     (bbolt's lock enforces it).
package fleet
