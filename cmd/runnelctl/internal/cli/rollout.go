package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// Rollout phases (RolloutStatus.phase).
const (
	phaseSucceeded  = "succeeded"
	phaseFailed     = "failed"
	phaseAborted    = "aborted"
	phaseSuperseded = "superseded"
)

func (a *app) rolloutCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "rollout status|pause|resume|abort|undo NAME",
		Short: "Watch and control a deployment's rollout",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usagef("rollout what? status, pause, resume, abort or undo, and a deployment's name")
		},
	}
	var watch bool
	var interval time.Duration
	status := &cobra.Command{
		Use:   "status NAME [--watch]",
		Short: "Show the rollout's state; with --watch, follow it until it ends",
		Long: `status prints the current rollout of the deployment: phase, step, and how many
of the targeted edges applied it or failed. With --watch it polls until the
rollout ends (a hub that cannot be reached meanwhile is retried), and exits 0
when it succeeded, 6 when it failed or was aborted.`,
		Args: exactArgs("NAME"), ValidArgsFunction: a.complete(completeDeployments, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval <= 0 {
				return usagef("--interval %s: must be positive", interval)
			}
			return a.rolloutStatus(cmd.Context(), args[0], watch, interval)
		},
	}
	status.Flags().BoolVarP(&watch, "watch", "w", false, "follow the rollout until it succeeds, fails or is aborted")
	status.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch asks the hub")
	c.AddCommand(status)
	for _, act := range []struct{ name, short string }{
		{"pause", "Pause the rollout: no further step starts"},
		{"resume", "Resume a paused rollout"},
		{"abort", "Stop the rollout and put the edges it touched back on the previous version"},
		{"undo", "Roll back: a new version with the previous version's content"},
	} {
		c.AddCommand(&cobra.Command{
			Use: act.name + " NAME", Short: act.short,
			Args: exactArgs("NAME"), ValidArgsFunction: a.complete(completeDeployments, 1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return a.rolloutAction(cmd.Context(), args[0], act.name)
			},
		})
	}
	return c
}

// statusLine is one line of rollout status.
func statusLine(d *runnelv1.Deployment) string {
	r := d.GetRollout()
	var b strings.Builder
	fmt.Fprintf(&b, "deployment/%s version %d: %s", d.GetSpec().GetName(), d.GetVersion(), r.GetPhase())
	if d.GetSpec().GetStrategy().GetStaged() {
		fmt.Fprintf(&b, ", step %s", stepText(d))
	}
	fmt.Fprintf(&b, ", %d of %d edges applied, %d pending, %d failed", r.GetApplied(), r.GetTargeted(), r.GetPending(), r.GetFailed())
	if r.GetRolledBack() {
		b.WriteString(", rolled back")
	}
	if len(r.GetFailedEdges()) > 0 {
		fmt.Fprintf(&b, " (failed: %s)", strings.Join(r.GetFailedEdges(), ", "))
	}
	if m := r.GetMessage(); m != "" {
		b.WriteString(": " + strings.ReplaceAll(m, "\n", "; "))
	}
	return b.String()
}

func (a *app) rolloutStatus(ctx context.Context, name string, watch bool, interval time.Duration) error {
	fc, err := a.fleet()
	if err != nil {
		return err
	}
	last := ""
	outage := false
	for {
		cctx, cancel := a.call(ctx)
		d, err := fc.GetDeployment(cctx, &runnelv1.GetDeploymentRequest{Name: name})
		cancel()
		switch {
		case ctx.Err() != nil:
			return &exitError{code: ExitError, err: fmt.Errorf("rollout status %s: stopped watching: %w", name, context.Cause(ctx))}
		case err != nil && watch && (isCode(err, codes.Unavailable) || isCode(err, codes.DeadlineExceeded)):
			if !outage {
				a.printError(fmt.Errorf("%w; retrying every %s", a.wrap(err, "rollout status %s", name), interval))
				outage = true
			}
		case err != nil:
			return a.wrap(err, "rollout status %s", name)
		default:
			if outage {
				fmt.Fprintln(a.env.Stderr, "runnelctl: the hub answers again")
				outage = false
			}
			if line := statusLine(d); line != last {
				fmt.Fprintln(a.env.Stdout, line)
				last = line
			}
			if !watch {
				return nil
			}
			switch phase := d.GetRollout().GetPhase(); phase {
			case phaseSucceeded:
				return nil
			case phaseFailed, phaseAborted, phaseSuperseded:
				return &exitError{code: ExitRolloutFailed, err: fmt.Errorf("rollout of deployment %s version %d %s", name, d.GetVersion(), phase)}
			}
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return &exitError{code: ExitError, err: fmt.Errorf("rollout status %s: stopped watching: %w", name, context.Cause(ctx))}
		case <-t.C:
		}
	}
}

func (a *app) rolloutAction(ctx context.Context, name, action string) error {
	fc, err := a.fleet()
	if err != nil {
		return err
	}
	cctx, cancel := a.call(ctx)
	defer cancel()
	d, err := fc.Rollout(cctx, &runnelv1.RolloutRequest{Name: name, Action: action})
	if err != nil {
		return a.wrap(err, "rollout %s %s", action, name)
	}
	done := map[string]string{"pause": "paused", "resume": "resumed", "abort": "aborted", "undo": "rolled back"}[action]
	fmt.Fprintf(a.env.Stdout, "deployment/%s %s\n%s\n", name, done, statusLine(d))
	return nil
}
