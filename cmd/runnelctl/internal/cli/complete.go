package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// completionTimeout bounds the call a shell completion makes: a TAB must
// not hang on an unreachable hub.
const completionTimeout = 2 * time.Second

// lister lists the names a completion offers.
type lister func(ctx context.Context, fc runnelv1.FleetClient) ([]string, error)

// complete completes the first n arguments with the names list returns.
func (a *app) complete(list lister, n int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= n {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		fc, err := a.fleet()
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		names, err := list(ctx, fc)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var out []cobra.Completion
		for _, s := range names {
			if strings.HasPrefix(s, toComplete) {
				out = append(out, s)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func completePipelines(ctx context.Context, fc runnelv1.FleetClient) ([]string, error) {
	resp, err := fc.ListManagedPipelines(ctx, &runnelv1.ListManagedPipelinesRequest{})
	var out []string
	for _, p := range resp.GetPipelines() {
		out = append(out, p.GetName())
	}
	return out, err
}

func completeEdges(ctx context.Context, fc runnelv1.FleetClient) ([]string, error) {
	resp, err := fc.ListFleetEdges(ctx, &runnelv1.ListFleetEdgesRequest{})
	var out []string
	for _, e := range resp.GetEdges() {
		out = append(out, e.GetEdgeId())
	}
	return out, err
}

func completeDeployments(ctx context.Context, fc runnelv1.FleetClient) ([]string, error) {
	resp, err := fc.ListDeployments(ctx, &runnelv1.ListDeploymentsRequest{})
	var out []string
	for _, d := range resp.GetDeployments() {
		out = append(out, d.GetSpec().GetName())
	}
	return out, err
}

func completeTokens(ctx context.Context, fc runnelv1.FleetClient) ([]string, error) {
	resp, err := fc.ListTokens(ctx, &runnelv1.ListTokensRequest{})
	var out []string
	for _, t := range resp.GetTokens() {
		out = append(out, t.GetName())
	}
	return out, err
}
