package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func (a *app) describeCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "describe pipeline|edge|deployment NAME",
		Short: "Show everything about one pipeline, edge or deployment",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usagef("describe what? pipeline NAME, edge ID or deployment NAME")
		},
	}
	c.AddCommand(&cobra.Command{
		Use: "pipeline NAME", Aliases: []string{"pipelines", "pl"}, Short: "A pipeline: its revisions, deployments and latest spec",
		Args: exactArgs("NAME"), ValidArgsFunction: a.complete(completePipelines, 1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.describePipeline(cmd, args[0]) },
	}, &cobra.Command{
		Use: "edge ID", Aliases: []string{"edges"}, Short: "An edge: labels, pipelines desired and applied, uplink, disk, rates",
		Args: exactArgs("ID"), ValidArgsFunction: a.complete(completeEdges, 1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.describeEdge(cmd, args[0]) },
	}, &cobra.Command{
		Use: "deployment NAME", Aliases: []string{"deployments", "deploy"}, Short: "A deployment: its spec, rollout and history",
		Args: exactArgs("NAME"), ValidArgsFunction: a.complete(completeDeployments, 1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.describeDeployment(cmd, args[0]) },
	})
	return c
}

// fields writes "Name:  value" lines with the values aligned.
type fields struct {
	w      io.Writer
	indent string
	rows   [][2]string
}

func (f *fields) add(name, format string, args ...any) {
	f.rows = append(f.rows, [2]string{name, fmt.Sprintf(format, args...)})
}

func (f *fields) flush() {
	width := 0
	for _, r := range f.rows {
		width = max(width, len(r[0]))
	}
	for _, r := range f.rows {
		v := r[1]
		if v == "" {
			v = none
		}
		fmt.Fprintf(f.w, "%s%-*s  %s\n", f.indent, width+1, r[0]+":", v)
	}
	f.rows = nil
}

// indented writes t's lines after prefix.
func indented(w io.Writer, prefix, t string) {
	for _, l := range strings.Split(strings.TrimSuffix(t, "\n"), "\n") {
		fmt.Fprintln(w, strings.TrimRight(prefix+l, " "))
	}
}

func (a *app) describePipeline(cmd *cobra.Command, name string) error {
	fc, err := a.fleet()
	if err != nil {
		return err
	}
	ctx, cancel := a.call(cmd.Context())
	defer cancel()
	p, err := fc.GetPipeline(ctx, &runnelv1.GetPipelineRequest{Name: name})
	if err != nil {
		return a.wrap(err, "describe pipeline %s", name)
	}
	revs, err := fc.ListRevisions(ctx, &runnelv1.ListRevisionsRequest{Name: name})
	if err != nil {
		return a.wrap(err, "describe pipeline %s: list its revisions", name)
	}
	w := a.env.Stdout
	r := p.GetLatestRevision()
	f := &fields{w: w}
	f.add("Name", "%s", p.GetName())
	f.add("Latest", "revision %d", p.GetLatest())
	f.add("Hash", "%s", r.GetHash())
	f.add("Compatible", "%s", compatText(r.GetCompatClass(), r.GetRevision()))
	f.add("Created", "%s", a.when(p.GetCreatedMs()))
	f.add("Updated", "%s by %s", a.when(p.GetUpdatedMs()), r.GetAuthor())
	f.add("Deployments", "%s", strings.Join(p.GetDeployments(), ", "))
	f.flush()
	fmt.Fprintln(w, "Revisions:")
	t := newTable("  REVISION", "CREATED", "AUTHOR", "HASH", "COMPAT")
	for _, r := range revs.GetRevisions() {
		t.add(fmt.Sprintf("  %d", r.GetRevision()), a.ago(r.GetCreatedMs()), r.GetAuthor(), shortHash(r.GetHash()), compat(r.GetCompatClass()))
	}
	t.write(w)
	fmt.Fprintf(w, "Spec (revision %d):\n", p.GetLatest())
	indented(w, "  ", r.GetSpec())
	return nil
}

func compatText(class, revision uint32) string {
	switch {
	case class == 0:
		return ""
	case class == revision:
		return fmt.Sprintf("revision %d starts a compatibility class: state does not carry over from earlier revisions", revision)
	}
	return fmt.Sprintf("keeps state and merges with revisions %d to %d", class, revision)
}

func (a *app) describeEdge(cmd *cobra.Command, id string) error {
	fc, err := a.fleet()
	if err != nil {
		return err
	}
	ctx, cancel := a.call(cmd.Context())
	defer cancel()
	e, err := fc.GetFleetEdge(ctx, &runnelv1.GetFleetEdgeRequest{EdgeId: id})
	if err != nil {
		return a.wrap(err, "describe edge %s", id)
	}
	w := a.env.Stdout
	st := e.GetStatus()
	f := &fields{w: w}
	f.add("ID", "%s", e.GetEdgeId())
	f.add("Connected", "%s", yesNo(e.GetConnected()))
	f.add("Last seen", "%s", a.when(e.GetLastSeenMs()))
	f.add("Registered", "%s", a.when(e.GetRegisteredMs()))
	f.add("Version", "%s", e.GetVersion())
	osArch := ""
	if e.GetOs() != "" || e.GetArch() != "" {
		osArch = e.GetOs() + "/" + e.GetArch()
	}
	f.add("OS/arch", "%s", osArch)
	f.flush()
	fmt.Fprintln(w, "Labels:")
	if len(e.GetLabels()) == 0 {
		fmt.Fprintln(w, "  "+none)
	} else {
		keys := make([]string, 0, len(e.GetLabels()))
		for k := range e.GetLabels() {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		t := newTable("  KEY", "VALUE", "FROM")
		for _, k := range keys {
			from := "edge config"
			if _, ok := e.GetHubLabels()[k]; ok {
				from = "hub"
				if v, ok := e.GetEdgeLabels()[k]; ok {
					from = fmt.Sprintf("hub (edge config says %s)", v)
				}
			}
			t.add("  "+k, e.GetLabels()[k], from)
		}
		t.write(w)
	}
	fmt.Fprintln(w, "Pipelines:")
	f = &fields{w: w, indent: "  "}
	f.add("Desired", "generation %d", e.GetDesiredGeneration())
	applied := "nothing reported"
	if st != nil {
		applied = fmt.Sprintf("generation %d", st.GetAppliedGeneration())
		if st.GetAppliedGeneration() != e.GetDesiredGeneration() {
			applied += " (behind)"
		}
	}
	f.add("Applied", "%s", applied)
	if st.GetApplyError() != "" {
		f.add("Apply error", "%s", strings.ReplaceAll(st.GetApplyError(), "\n", "; "))
	}
	f.flush()
	t := newTable("  NAME", "DESIRED", "APPLIED", "STATE", "WATERMARK", "LAG", "ERROR")
	desired := map[string]uint32{}
	var names []string
	for _, d := range e.GetDesired() {
		desired[d.GetName()] = d.GetRevision()
		names = append(names, d.GetName())
	}
	status := map[string]*runnelv1.PipelineStatus{}
	for _, p := range st.GetPipelines() {
		status[p.GetName()] = p
		if _, ok := desired[p.GetName()]; !ok {
			names = append(names, p.GetName())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		p := status[n]
		d := none
		if r, ok := desired[n]; ok {
			d = fmt.Sprint(r)
		}
		ap, state := none, "pending"
		wm, lag := "", ""
		if p != nil {
			ap, state = rev(p.GetRevision()), p.GetState()
			if p.GetWatermarkMs() != 0 {
				wm = a.abs(p.GetWatermarkMs())
				lag = duration(p.GetWatermarkLagMs())
			}
		}
		t.add("  "+n, d, ap, state, wm, lag, strings.ReplaceAll(p.GetError(), "\n", "; "))
	}
	if len(names) == 0 {
		fmt.Fprintln(w, "  "+none)
	} else {
		t.write(w)
	}
	fmt.Fprintln(w, "Status:")
	if st == nil {
		fmt.Fprintln(w, "  never reported")
		return nil
	}
	f = &fields{w: w, indent: "  "}
	f.add("Reported", "%s", a.when(st.GetAtMs()))
	oldest := "nothing unsent"
	if st.GetOldestUnsentMs() != 0 {
		oldest = "oldest unsent " + duration(st.GetOldestUnsentMs()) + " old"
	}
	f.add("Outbox", "%d entries, %s", st.GetOutboxEntries(), oldest)
	f.add("Disk", "%s", diskText(st))
	f.add("Records", "%s/min in, %s/min dead-lettered, %s/min late", number(st.GetRecordsPerMin()), number(st.GetDeadPerMin()), number(st.GetLatePerMin()))
	f.flush()
	return nil
}

func diskText(st *runnelv1.EdgeStatus) string {
	if st.GetDiskCapBytes() > 0 {
		return fmt.Sprintf("%s used of %s (%.0f%%)", bytesText(st.GetDiskUsedBytes()), bytesText(st.GetDiskCapBytes()),
			100*float64(st.GetDiskUsedBytes())/float64(st.GetDiskCapBytes()))
	}
	return bytesText(st.GetDiskUsedBytes()) + " used, no cap"
}

func (a *app) describeDeployment(cmd *cobra.Command, name string) error {
	fc, err := a.fleet()
	if err != nil {
		return err
	}
	ctx, cancel := a.call(cmd.Context())
	defer cancel()
	d, err := fc.GetDeployment(ctx, &runnelv1.GetDeploymentRequest{Name: name})
	if err != nil {
		return a.wrap(err, "describe deployment %s", name)
	}
	hist, err := fc.ListDeploymentVersions(ctx, &runnelv1.GetDeploymentRequest{Name: name})
	if err != nil {
		return a.wrap(err, "describe deployment %s: list its versions", name)
	}
	w := a.env.Stdout
	s, r := d.GetSpec(), d.GetRollout()
	f := &fields{w: w}
	f.add("Name", "%s", s.GetName())
	f.add("Version", "%d, %s by %s", d.GetVersion(), a.when(d.GetCreatedMs()), d.GetAuthor())
	sel := s.GetSelector()
	if sel == "" {
		sel = "(every edge)"
	}
	f.add("Selector", "%s", sel)
	f.add("Pipelines", "%s", refs(s.GetPipelines()))
	f.add("Resolved", "%s", refs(d.GetResolved()))
	f.add("Strategy", "%s", strategyText(s.GetStrategy()))
	f.flush()
	fmt.Fprintln(w, "Rollout:")
	f = &fields{w: w, indent: "  "}
	f.add("Phase", "%s", r.GetPhase())
	f.add("Step", "%s", stepText(d))
	f.add("Step started", "%s", a.when(r.GetStepStartedMs()))
	healthy := "not healthy"
	if r.GetHealthySinceMs() != 0 {
		healthy = a.when(r.GetHealthySinceMs())
	}
	f.add("Healthy since", "%s", healthy)
	f.add("Edges", "%d targeted, %d pending, %d applied, %d failed", r.GetTargeted(), r.GetPending(), r.GetApplied(), r.GetFailed())
	if len(r.GetFailedEdges()) > 0 {
		f.add("Failed edges", "%s", strings.Join(r.GetFailedEdges(), ", "))
	}
	f.add("Rolled back", "%s", yesNo(r.GetRolledBack()))
	f.add("Message", "%s", strings.ReplaceAll(r.GetMessage(), "\n", "; "))
	f.flush()
	fmt.Fprintln(w, "History:")
	t := newTable("  VERSION", "CREATED", "AUTHOR", "PHASE", "PIPELINES", "SELECTOR")
	for _, v := range hist.GetDeployments() {
		t.add(fmt.Sprintf("  %d", v.GetVersion()), a.ago(v.GetCreatedMs()), v.GetAuthor(), v.GetRollout().GetPhase(), refs(resolvedOrSpec(v)), v.GetSpec().GetSelector())
	}
	t.write(w)
	return nil
}

func strategyText(st *runnelv1.Strategy) string {
	if !st.GetStaged() {
		s := "all at once"
		if st.GetRollbackOnFailure() {
			s += ", rolled back on failure"
		}
		return s
	}
	var parts []string
	switch {
	case st.GetCanaryPercent() != 0:
		parts = append(parts, fmt.Sprintf("canary %d%%", st.GetCanaryPercent()))
	case st.GetCanary() != 0:
		parts = append(parts, fmt.Sprintf("canary %d", st.GetCanary()))
	}
	switch {
	case st.GetBatchPercent() != 0:
		parts = append(parts, fmt.Sprintf("batches of %d%%", st.GetBatchPercent()))
	case st.GetBatch() != 0:
		parts = append(parts, fmt.Sprintf("batches of %d", st.GetBatch()))
	}
	parts = append(parts, "soak "+duration(st.GetSoakMs()))
	rate := st.GetMaxDeadLetterRate()
	if rate == 0 {
		rate = 0.05
	}
	parts = append(parts, fmt.Sprintf("max dead letters %s%%", number(rate*100)))
	if st.GetProgressDeadlineMs() != 0 {
		parts = append(parts, "progress deadline "+duration(st.GetProgressDeadlineMs()))
	} else {
		parts = append(parts, "no progress deadline")
	}
	if st.GetRollbackOnFailure() {
		parts = append(parts, "rolled back on failure")
	}
	return "staged: " + strings.Join(parts, ", ")
}

func stepText(d *runnelv1.Deployment) string {
	r := d.GetRollout()
	if !d.GetSpec().GetStrategy().GetStaged() {
		return "all at once"
	}
	s := fmt.Sprintf("%d of %d", r.GetStep()+1, r.GetSteps())
	if r.GetStep() == 0 {
		s += " (canary)"
	}
	return s
}
