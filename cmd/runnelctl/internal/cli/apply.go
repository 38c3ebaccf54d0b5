package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	yaml "go.yaml.in/yaml/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/runnel-io/runnel/cmd/runnelctl/internal/manifest"
	"github.com/runnel-io/runnel/internal/linediff"
	"github.com/runnel-io/runnel/operators/spec"
	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func (a *app) applyCmd() *cobra.Command {
	var files []string
	var dryRun bool
	c := &cobra.Command{
		Use:   "apply -f FILE|DIR [-f ...] [--dry-run]",
		Short: "Create or update pipelines and deployments from YAML manifests",
		Long: `apply makes the hub hold the pipelines and deployments of the manifests.

A manifest file holds YAML documents separated by ---:
  kind: Deployment   name, selector, pipelines: [{name, revision}], strategy
  kind: Pipeline     spec: the pipeline spec as a mapping
  a pipeline spec    a document with name and source, as an edge reads it
A directory means its *.yaml and *.yml files, in name order; - is stdin.

Every document is checked here first, and every pipeline spec by the hub
(a dry run) before anything is stored: on any problem, all of them are
printed and nothing is applied. Pipelines are applied before deployments.
--dry-run stores nothing and prints, per object, created, unchanged or
changed, with the diff against what the hub holds.`,
		Example: `  runnelctl apply -f examples/line-temps.yaml
  runnelctl apply -f fleet/ --dry-run`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usagef("apply needs -f FILE or -f DIR")
			}
			m, err := a.readManifests(files)
			if err != nil {
				return err
			}
			return a.apply(cmd.Context(), m, dryRun, false)
		},
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file or directory (repeatable; - for stdin)")
	c.Flags().BoolVar(&dryRun, "dry-run", false, "check and show what would change; store nothing")
	c.MarkFlagFilename("filename", "yaml", "yml")
	return c
}

// readManifests decodes every file (directories expanded) and merges
// them; every problem of every file is reported at once.
func (a *app) readManifests(args []string) (*manifest.Manifest, error) {
	var paths []string
	for _, f := range args {
		if f == "-" {
			paths = append(paths, f)
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			return nil, usagef("%s: %v", f, cause(err))
		}
		if !fi.IsDir() {
			paths = append(paths, f)
			continue
		}
		entries, err := os.ReadDir(f)
		if err != nil {
			return nil, usagef("%s: %v", f, cause(err))
		}
		var found []string
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") && (ext == ".yaml" || ext == ".yml") {
				found = append(found, filepath.Join(f, e.Name()))
			}
		}
		if len(found) == 0 {
			return nil, usagef("%s: no *.yaml or *.yml files in it", f)
		}
		sort.Strings(found)
		paths = append(paths, found...)
	}
	var all []*manifest.Manifest
	var probs spec.Problems
	for _, p := range paths {
		var data []byte
		var err error
		name := p
		if p == "-" {
			name = "<stdin>"
			data, err = io.ReadAll(io.LimitReader(a.env.Stdin, manifest.MaxSize+1))
		} else {
			data, err = a.env.ReadFile(p)
		}
		if err != nil {
			return nil, usagef("%s: %v", name, cause(err))
		}
		m, err := manifest.Decode(name, data)
		if err != nil {
			var ps spec.Problems
			if !errors.As(err, &ps) {
				return nil, err
			}
			probs = append(probs, ps...)
			continue
		}
		all = append(all, m)
	}
	if len(probs) == 0 {
		if len(all) == 0 {
			return &manifest.Manifest{}, nil
		}
		if err := manifest.Merge(all...); err != nil {
			errors.As(err, &probs)
		}
	}
	if len(probs) > 0 {
		return nil, usageError{fmt.Errorf("%s; nothing applied:\n%w", plural(len(probs), "problem"), problemsText(probs))}
	}
	return all[0], nil
}

// problemsText is spec.Problems as an error of their lines, in the
// order given (each file's sorted by Decode).
type problemsText spec.Problems

func (ps problemsText) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

func (ps problemsText) Unwrap() error { return spec.ErrInvalid }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// outcome is what applying one object did, or would do.
type outcome struct {
	object string // pipeline/NAME, deployment/NAME
	state  string // created, unchanged, changed
	detail string // (revision 2)
	diff   string
}

func (o outcome) line(dry bool) string {
	d := o.detail
	if dry {
		d = strings.TrimSuffix(d, ")") + ", dry run)"
	}
	return o.object + " " + o.state + " " + d
}

// apply checks every pipeline at the hub with a dry run, then (unless
// dry) applies pipelines and then deployments. diffOnly prints only the
// diffs (runnelctl diff -f).
func (a *app) apply(ctx context.Context, m *manifest.Manifest, dry, diffOnly bool) error {
	fc, err := a.fleet()
	if err != nil {
		return err
	}
	out := a.env.Stdout
	// Pass 1: the hub checks every spec; nothing is stored.
	var refused []error
	checked := make([]outcome, len(m.Pipelines))
	newPipelines := map[string]bool{}
	for i, p := range m.Pipelines {
		o, err := a.applyPipeline(ctx, fc, p, true)
		if err != nil {
			refused = append(refused, err)
			continue
		}
		checked[i] = o
		if o.state == "created" {
			newPipelines[p.Name] = true
		}
	}
	if len(refused) > 0 {
		for _, err := range refused[:len(refused)-1] {
			a.printError(err)
		}
		last := refused[len(refused)-1]
		return &exitError{code: a.codeOf(last), err: fmt.Errorf("%w\n(nothing applied: the hub did not accept %s)", last, plural(len(refused), "pipeline"))}
	}
	report := func(o outcome) {
		switch {
		case diffOnly:
			if o.diff != "" {
				fmt.Fprintf(out, "diff %s (%s)\n%s", o.object, o.state, o.diff)
			}
		default:
			fmt.Fprintln(out, o.line(dry))
			if dry && o.diff != "" {
				fmt.Fprint(out, o.diff)
			}
		}
	}
	var failed []error
	failedPipelines := map[string]bool{}
	for i, p := range m.Pipelines {
		if dry {
			report(checked[i])
			continue
		}
		o, err := a.applyPipeline(ctx, fc, p, false)
		if err != nil {
			failed = append(failed, err)
			failedPipelines[p.Name] = true
			a.printError(err)
			continue
		}
		report(o)
	}
	for _, d := range m.Deployments {
		var skip []string
		for _, r := range d.Spec.Pipelines {
			if failedPipelines[r.Name] {
				skip = append(skip, r.Name)
			}
		}
		if len(skip) > 0 {
			err := &exitError{code: ExitError, err: fmt.Errorf("apply deployment %s (%s): not applied: pipeline %s was not applied", d.Spec.Name, where(d.File, d.Pos), strings.Join(skip, ", "))}
			failed = append(failed, err)
			a.printError(err)
			continue
		}
		var pending []string
		for _, r := range d.Spec.Pipelines {
			if dry && newPipelines[r.Name] {
				pending = append(pending, r.Name)
			}
		}
		o, err := a.applyDeployment(ctx, fc, d, dry, pending)
		if err != nil {
			failed = append(failed, err)
			a.printError(err)
			continue
		}
		report(o)
	}
	if len(failed) > 0 {
		return &exitError{code: a.codeOf(failed[0]), err: fmt.Errorf("apply: %d of %d objects not applied", len(failed), len(m.Pipelines)+len(m.Deployments))}
	}
	return nil
}

func where(file string, pos spec.Pos) string {
	if pos.IsZero() {
		return file
	}
	return file + ":" + pos.String()
}

func isCode(err error, c codes.Code) bool {
	var se interface{ GRPCStatus() *status.Status }
	return errors.As(err, &se) && se.GRPCStatus().Code() == c
}

// applyPipeline applies (or, dry, checks) one pipeline and says what it
// did: created, unchanged or changed, with the hub's diff.
func (a *app) applyPipeline(ctx context.Context, fc runnelv1.FleetClient, p *manifest.Pipeline, dry bool) (outcome, error) {
	what := fmt.Sprintf("apply pipeline %s (%s)", p.Name, where(p.File, p.Pos))
	o := outcome{object: "pipeline/" + p.Name}
	var latest *runnelv1.PipelineRevision
	if dry {
		cctx, cancel := a.call(ctx)
		mp, err := fc.GetPipeline(cctx, &runnelv1.GetPipelineRequest{Name: p.Name})
		cancel()
		switch {
		case isCode(err, codes.NotFound):
		case err != nil:
			return o, a.wrap(err, "%s", what)
		default:
			latest = mp.GetLatestRevision()
			// The same spec at other lines (moved within its file, or
			// into a file of several documents) is sent as the hub has
			// it, so that it adds no revision: its problems, the only
			// reason for the file's line numbers, were none.
			if l := latest.GetSpec(); l != string(p.Spec) && strings.TrimLeft(l, "\n") == strings.TrimLeft(string(p.Spec), "\n") {
				p.Spec = []byte(l)
			}
		}
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	resp, err := fc.ApplyPipeline(cctx, &runnelv1.ApplyPipelineRequest{Spec: string(p.Spec), File: p.File, DryRun: dry})
	if err != nil {
		return o, a.wrap(err, "%s", what)
	}
	rev := resp.GetRevision().GetRevision()
	o.diff = resp.GetDiff()
	switch {
	case dry && latest == nil:
		o.state = "created"
		o.diff = linediff.Unified("/dev/null", p.File, "", string(p.Spec))
	case dry:
		sum := sha256.Sum256(p.Spec)
		if hex.EncodeToString(sum[:]) == latest.GetHash() {
			o.state, o.diff, rev = "unchanged", "", latest.GetRevision()
		} else {
			o.state = "changed"
		}
	case !resp.GetCreated():
		o.state, o.diff = "unchanged", ""
	case rev == 1:
		o.state = "created"
	default:
		o.state = "changed"
	}
	o.detail = fmt.Sprintf("(revision %d)", rev)
	return o, nil
}

// applyDeployment applies (or, dry, checks) one deployment. pending
// names pipelines it runs that a dry run would create: the hub cannot
// check the deployment before they exist, so it is not sent.
func (a *app) applyDeployment(ctx context.Context, fc runnelv1.FleetClient, d *manifest.Deployment, dry bool, pending []string) (outcome, error) {
	name := d.Spec.Name
	what := fmt.Sprintf("apply deployment %s (%s)", name, where(d.File, d.Pos))
	o := outcome{object: "deployment/" + name}
	cctx, cancel := a.call(ctx)
	before, err := fc.GetDeployment(cctx, &runnelv1.GetDeploymentRequest{Name: name})
	cancel()
	switch {
	case isCode(err, codes.NotFound):
		before = nil
	case err != nil:
		return o, a.wrap(err, "%s", what)
	}
	var old string
	if before != nil {
		old = deploymentYAML(before.GetSpec())
	}
	o.diff = linediff.Unified(fmt.Sprintf("deployment/%s version %d", name, before.GetVersion()), where(d.File, d.Pos), old, deploymentYAML(d.Spec))
	if before == nil {
		o.diff = linediff.Unified("/dev/null", where(d.File, d.Pos), "", deploymentYAML(d.Spec))
	}
	if len(pending) > 0 {
		o.state = "created"
		if before != nil {
			o.state = "changed"
		}
		o.detail = fmt.Sprintf("(not checked by the hub: pipeline %s does not exist on it yet)", strings.Join(pending, ", "))
		return o, nil
	}
	cctx, cancel = a.call(ctx)
	defer cancel()
	after, err := fc.ApplyDeployment(cctx, &runnelv1.ApplyDeploymentRequest{Spec: d.Spec, DryRun: dry})
	if err != nil {
		return o, a.wrap(err, "%s", what)
	}
	switch {
	case before == nil:
		o.state = "created"
	case after.GetVersion() == before.GetVersion():
		o.state, o.diff = "unchanged", ""
	default:
		o.state = "changed"
	}
	o.detail = fmt.Sprintf("(version %d)", after.GetVersion())
	return o, nil
}

// deploymentYAML renders a deployment spec as a manifest document, for
// diffs and describe.
func deploymentYAML(s *runnelv1.DeploymentSpec) string {
	out, err := yaml.Dump(manifest.DeploymentNode(s), yaml.WithLineWidth(-1))
	if err != nil {
		return err.Error()
	}
	return string(out)
}

// ReadFile is os.ReadFile, bounded, for Env.ReadFile: a config, token
// or manifest file is small, and a wrong one (a device, a log) must not
// be read whole; past manifest.MaxSize the decoder refuses it.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "read", Path: path, Err: errors.New("is a directory")}
	}
	return io.ReadAll(io.LimitReader(f, manifest.MaxSize+1))
}
