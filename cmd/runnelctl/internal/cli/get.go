package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/proto"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// getFlags are get's -o and -l.
type getFlags struct {
	output, selector string
}

func (a *app) getCmd() *cobra.Command {
	var g getFlags
	c := &cobra.Command{
		Use:   "get pipelines|revisions NAME|edges|deployments",
		Short: "List pipelines, revisions, edges or deployments",
		Long: `get lists objects of the fleet as a table, or as the API's objects with
-o json or -o yaml (the response of the call, field names as in the REST API).
-o wide adds columns. -l SELECTOR picks edges by label (Kubernetes syntax:
site=plant-7,hw in (rpi4,cm4),!legacy).

In the PIPELINES column of edges, name@2 runs revision 2 as desired;
name@1→2 runs 1 and is to run 2; name@local is from the edge's own files;
a state other than running follows a colon (name@2:failed).`,
		Example: `  runnelctl get pipelines
  runnelctl get revisions line-temps
  runnelctl get edges -l site=plant-7 -o wide
  runnelctl get deployments -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usagef("get what? pipelines, revisions NAME, edges or deployments")
		},
	}
	c.PersistentFlags().StringVarP(&g.output, "output", "o", "table", "table, wide, json or yaml")
	c.PersistentFlags().StringVarP(&g.selector, "selector", "l", "", "label selector (edges only)")
	c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "wide", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	run := func(kind string, f func(ctx context.Context, fc runnelv1.FleetClient, args []string) (proto.Message, func(wide bool), error)) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(g.output, "table", "wide", "json", "yaml"); err != nil {
				return err
			}
			if g.selector != "" && kind != "edges" {
				return usagef("-l picks edges by label; %s have no labels", kind)
			}
			fc, err := a.fleet()
			if err != nil {
				return err
			}
			msg, table, err := f(cmd.Context(), fc, args)
			if err != nil {
				return err
			}
			if g.output == "json" || g.output == "yaml" {
				return printProto(a.env.Stdout, msg, g.output)
			}
			table(g.output == "wide")
			return nil
		}
	}
	c.AddCommand(&cobra.Command{
		Use: "pipelines [NAME]", Aliases: []string{"pipeline", "pl"}, Short: "Pipelines the hub manages",
		Args: maxArgs("NAME"), ValidArgsFunction: a.complete(completePipelines, 1),
		RunE: run("pipelines", a.getPipelines),
	}, &cobra.Command{
		Use: "revisions NAME", Aliases: []string{"revision", "rev"}, Short: "A pipeline's revisions, oldest first",
		Args: exactArgs("NAME"), ValidArgsFunction: a.complete(completePipelines, 1),
		RunE: run("revisions", a.getRevisions),
	}, &cobra.Command{
		Use: "edges [ID]", Aliases: []string{"edge"}, Short: "Edges that registered, with their status",
		Args: maxArgs("ID"), ValidArgsFunction: a.complete(completeEdges, 1),
		RunE: run("edges", func(ctx context.Context, fc runnelv1.FleetClient, args []string) (proto.Message, func(bool), error) {
			return a.getEdges(ctx, fc, args, g.selector)
		}),
	}, &cobra.Command{
		Use: "deployments [NAME]", Aliases: []string{"deployment", "deploy"}, Short: "Deployments and their rollouts",
		Args: maxArgs("NAME"), ValidArgsFunction: a.complete(completeDeployments, 1),
		RunE: run("deployments", a.getDeployments),
	})
	return c
}

// maxArgs allows at most the named arguments.
func maxArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > len(names) {
			return usagef("%s takes at most %d argument(s): %s; got %d", commandName(cmd), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

func (a *app) empty(what string) {
	fmt.Fprintf(a.env.Stderr, "no %s\n", what)
}

func (a *app) getPipelines(ctx context.Context, fc runnelv1.FleetClient, args []string) (proto.Message, func(bool), error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	var list []*runnelv1.ManagedPipeline
	var msg proto.Message
	if len(args) == 1 {
		p, err := fc.GetPipeline(cctx, &runnelv1.GetPipelineRequest{Name: args[0]})
		if err != nil {
			return nil, nil, a.wrap(err, "get pipeline %s", args[0])
		}
		list, msg = []*runnelv1.ManagedPipeline{p}, p
	} else {
		resp, err := fc.ListManagedPipelines(cctx, &runnelv1.ListManagedPipelinesRequest{})
		if err != nil {
			return nil, nil, a.wrap(err, "list pipelines")
		}
		list, msg = resp.GetPipelines(), resp
	}
	return msg, func(wide bool) {
		if len(list) == 0 {
			a.empty("pipelines")
			return
		}
		head := []string{"NAME", "REVISION", "DEPLOYMENTS", "UPDATED", "AUTHOR"}
		if wide {
			head = append(head, "CREATED", "HASH", "COMPAT")
		}
		t := newTable(head...)
		for _, p := range list {
			r := p.GetLatestRevision()
			row := []string{p.GetName(), fmt.Sprint(p.GetLatest()), strings.Join(p.GetDeployments(), ","), a.ago(p.GetUpdatedMs()), r.GetAuthor()}
			if wide {
				row = append(row, a.ago(p.GetCreatedMs()), shortHash(r.GetHash()), compat(r.GetCompatClass()))
			}
			t.add(row...)
		}
		t.write(a.env.Stdout)
	}, nil
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// compat names a compatibility class by its first revision.
func compat(class uint32) string {
	if class == 0 {
		return ""
	}
	return fmt.Sprintf("since %d", class)
}

func (a *app) getRevisions(ctx context.Context, fc runnelv1.FleetClient, args []string) (proto.Message, func(bool), error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	resp, err := fc.ListRevisions(cctx, &runnelv1.ListRevisionsRequest{Name: args[0]})
	if err != nil {
		return nil, nil, a.wrap(err, "list revisions of pipeline %s", args[0])
	}
	return resp, func(wide bool) {
		if len(resp.GetRevisions()) == 0 {
			a.empty("revisions")
			return
		}
		t := newTable("REVISION", "CREATED", "AUTHOR", "HASH", "COMPAT")
		for _, r := range resp.GetRevisions() {
			h := shortHash(r.GetHash())
			if wide {
				h = r.GetHash()
			}
			t.add(fmt.Sprint(r.GetRevision()), a.ago(r.GetCreatedMs()), r.GetAuthor(), h, compat(r.GetCompatClass()))
		}
		t.write(a.env.Stdout)
	}, nil
}

func (a *app) getEdges(ctx context.Context, fc runnelv1.FleetClient, args []string, selector string) (proto.Message, func(bool), error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	var list []*runnelv1.FleetEdge
	var msg proto.Message
	if len(args) == 1 {
		if selector != "" {
			return nil, nil, usagef("get edges: give an ID or -l, not both")
		}
		e, err := fc.GetFleetEdge(cctx, &runnelv1.GetFleetEdgeRequest{EdgeId: args[0]})
		if err != nil {
			return nil, nil, a.wrap(err, "get edge %s", args[0])
		}
		list, msg = []*runnelv1.FleetEdge{e}, e
	} else {
		resp, err := fc.ListFleetEdges(cctx, &runnelv1.ListFleetEdgesRequest{Selector: selector})
		if err != nil {
			if selector != "" {
				return nil, nil, a.wrap(err, "list edges -l %q", selector)
			}
			return nil, nil, a.wrap(err, "list edges")
		}
		list, msg = resp.GetEdges(), resp
	}
	return msg, func(wide bool) {
		if len(list) == 0 {
			a.empty("edges")
			return
		}
		head := []string{"ID", "CONNECTED", "LAST SEEN", "VERSION", "LABELS", "PIPELINES", "DISK"}
		if wide {
			head = append(head, "OS/ARCH", "OUTBOX", "UNSENT", "RECORDS/MIN", "DEAD/MIN", "LATE/MIN")
		}
		t := newTable(head...)
		for _, e := range list {
			st := e.GetStatus()
			row := []string{e.GetEdgeId(), yesNo(e.GetConnected()), a.ago(e.GetLastSeenMs()), e.GetVersion(),
				labels(e.GetLabels()), edgePipelines(e), disk(st)}
			if wide {
				osArch := ""
				if e.GetOs() != "" || e.GetArch() != "" {
					osArch = e.GetOs() + "/" + e.GetArch()
				}
				row = append(row, osArch, outbox(st), unsent(st), rate(st, st.GetRecordsPerMin()), rate(st, st.GetDeadPerMin()), rate(st, st.GetLatePerMin()))
			}
			t.add(row...)
		}
		t.write(a.env.Stdout)
	}, nil
}

// edgePipelines renders what an edge runs against what it should run:
// name@2 (as desired), name@1→2 (running 1, to run 2), name@local (its
// own file), with the state after a colon unless running.
func edgePipelines(e *runnelv1.FleetEdge) string {
	desired := map[string]uint32{}
	for _, d := range e.GetDesired() {
		desired[d.GetName()] = d.GetRevision()
	}
	applied := map[string]*runnelv1.PipelineStatus{}
	for _, p := range e.GetStatus().GetPipelines() {
		applied[p.GetName()] = p
	}
	names := make([]string, 0, len(desired)+len(applied))
	for n := range desired {
		names = append(names, n)
	}
	for n := range applied {
		if _, ok := desired[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		d, isDesired := desired[n]
		p := applied[n]
		var s string
		switch {
		case p == nil:
			s = fmt.Sprintf("%s@-→%d", n, d)
		case !isDesired && p.GetRevision() == 0:
			s = n + "@local"
		case !isDesired:
			s = fmt.Sprintf("%s@%d→none", n, p.GetRevision())
		case p.GetRevision() == d:
			s = fmt.Sprintf("%s@%d", n, d)
		default:
			s = fmt.Sprintf("%s@%s→%d", n, rev(p.GetRevision()), d)
		}
		switch state := p.GetState(); {
		case p == nil:
			s += ":pending"
		case state != "" && state != "running":
			s += ":" + state
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}

func rev(r uint32) string {
	if r == 0 {
		return "local"
	}
	return fmt.Sprint(r)
}

func disk(st *runnelv1.EdgeStatus) string {
	switch {
	case st == nil:
		return ""
	case st.GetDiskCapBytes() > 0:
		return fmt.Sprintf("%s/%s", bytesText(st.GetDiskUsedBytes()), bytesText(st.GetDiskCapBytes()))
	}
	return bytesText(st.GetDiskUsedBytes())
}

func outbox(st *runnelv1.EdgeStatus) string {
	if st == nil {
		return ""
	}
	return fmt.Sprint(st.GetOutboxEntries())
}

func unsent(st *runnelv1.EdgeStatus) string {
	if st == nil || st.GetOldestUnsentMs() == 0 {
		return ""
	}
	return duration(st.GetOldestUnsentMs())
}

func rate(st *runnelv1.EdgeStatus, v float64) string {
	if st == nil {
		return ""
	}
	return number(v)
}

func (a *app) getDeployments(ctx context.Context, fc runnelv1.FleetClient, args []string) (proto.Message, func(bool), error) {
	cctx, cancel := a.call(ctx)
	defer cancel()
	var list []*runnelv1.Deployment
	var msg proto.Message
	if len(args) == 1 {
		d, err := fc.GetDeployment(cctx, &runnelv1.GetDeploymentRequest{Name: args[0]})
		if err != nil {
			return nil, nil, a.wrap(err, "get deployment %s", args[0])
		}
		list, msg = []*runnelv1.Deployment{d}, d
	} else {
		resp, err := fc.ListDeployments(cctx, &runnelv1.ListDeploymentsRequest{})
		if err != nil {
			return nil, nil, a.wrap(err, "list deployments")
		}
		list, msg = resp.GetDeployments(), resp
	}
	return msg, func(wide bool) {
		if len(list) == 0 {
			a.empty("deployments")
			return
		}
		head := []string{"NAME", "VERSION", "PHASE", "STEP", "TARGETED", "APPLIED", "FAILED", "AGE"}
		if wide {
			head = append(head, "PENDING", "SELECTOR", "PIPELINES", "MESSAGE")
		}
		t := newTable(head...)
		for _, d := range list {
			r := d.GetRollout()
			row := []string{d.GetSpec().GetName(), fmt.Sprint(d.GetVersion()), r.GetPhase(), step(d),
				fmt.Sprint(r.GetTargeted()), fmt.Sprint(r.GetApplied()), fmt.Sprint(r.GetFailed()), a.age(d.GetCreatedMs())}
			if wide {
				row = append(row, fmt.Sprint(r.GetPending()), d.GetSpec().GetSelector(), refs(resolvedOrSpec(d)), r.GetMessage())
			}
			t.add(row...)
		}
		t.write(a.env.Stdout)
	}, nil
}

// step renders a rollout's step: "1/4", "-" when there is one step.
func step(d *runnelv1.Deployment) string {
	r := d.GetRollout()
	if r.GetSteps() <= 1 && !d.GetSpec().GetStrategy().GetStaged() {
		return ""
	}
	return fmt.Sprintf("%d/%d", r.GetStep()+1, r.GetSteps())
}

func resolvedOrSpec(d *runnelv1.Deployment) []*runnelv1.PipelineRef {
	if len(d.GetResolved()) > 0 {
		return d.GetResolved()
	}
	return d.GetSpec().GetPipelines()
}

// refs renders pipeline refs as name@rev (name@latest for revision 0).
func refs(rs []*runnelv1.PipelineRef) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		if r.GetRevision() == 0 {
			parts[i] = r.GetName() + "@latest"
		} else {
			parts[i] = fmt.Sprintf("%s@%d", r.GetName(), r.GetRevision())
		}
	}
	return strings.Join(parts, ",")
}
