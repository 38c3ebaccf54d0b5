package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func (a *app) deleteCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "delete pipeline NAME",
		Short: "Delete a pipeline the hub manages (refused while a deployment uses it)",
		Long: `delete removes a pipeline and its revisions from the hub. The hub refuses
(exit 5) while a deployment's current version names the pipeline or edges
still run a revision of it: deploy without it first. Its revision numbers
are not reused if a pipeline of the name is created again.`,
		Example: `  runnelctl delete pipeline old-temps`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return usagef("delete what? pipeline NAME") },
	}
	c.AddCommand(&cobra.Command{
		Use: "pipeline NAME", Aliases: []string{"pipelines", "pl"}, Short: "Delete a pipeline",
		Args: exactArgs("NAME"), ValidArgsFunction: a.complete(completePipelines, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fc, err := a.fleet()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			if _, err := fc.DeletePipeline(ctx, &runnelv1.DeletePipelineRequest{Name: args[0]}); err != nil {
				return a.wrap(err, "delete pipeline %s", args[0])
			}
			fmt.Fprintf(a.env.Stdout, "pipeline/%s deleted\n", args[0])
			return nil
		},
	})
	return c
}
