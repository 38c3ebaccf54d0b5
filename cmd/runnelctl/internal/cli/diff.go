package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func (a *app) diffCmd() *cobra.Command {
	var files []string
	c := &cobra.Command{
		Use:   "diff pipeline NAME FROM TO | diff -f FILE",
		Short: "Diff two revisions of a pipeline, or manifests against the hub",
		Long: `diff pipeline NAME FROM TO prints the unified diff of two revisions and whether
the later keeps the earlier's window state and merges with its results.
diff -f FILE is apply -f FILE --dry-run showing only the diffs: nothing is
stored. Both exit 0 whether or not there are differences.`,
		Example: `  runnelctl diff pipeline line-temps 1 2
  runnelctl diff -f fleet/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return usagef("diff what? pipeline NAME FROM TO, or -f FILE")
			}
			m, err := a.readManifests(files)
			if err != nil {
				return err
			}
			return a.apply(cmd.Context(), m, true, true)
		},
	}
	c.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file or directory (repeatable; - for stdin)")
	c.MarkFlagFilename("filename", "yaml", "yml")
	c.AddCommand(&cobra.Command{
		Use: "pipeline NAME FROM TO", Aliases: []string{"pipelines", "pl"}, Short: "Diff two revisions of a pipeline",
		Args: exactArgs("NAME", "FROM", "TO"), ValidArgsFunction: a.complete(completePipelines, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var revs [2]uint32
			for i, s := range args[1:] {
				n, err := strconv.ParseUint(s, 10, 32)
				if err != nil || n == 0 {
					return usagef("diff pipeline %s: %q is not a revision (1, 2, ...)", args[0], s)
				}
				revs[i] = uint32(n)
			}
			fc, err := a.fleet()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			resp, err := fc.DiffRevisions(ctx, &runnelv1.DiffRevisionsRequest{Name: args[0], From: revs[0], To: revs[1]})
			if err != nil {
				return a.wrap(err, "diff pipeline %s %d %d", args[0], revs[0], revs[1])
			}
			fmt.Fprint(a.env.Stdout, resp.GetDiff())
			if resp.GetCompatible() {
				fmt.Fprintf(a.env.Stdout, "compatible: yes: revision %d keeps revision %d's window state and merges with its results\n", revs[1], revs[0])
			} else {
				fmt.Fprintf(a.env.Stdout, "compatible: no: %s; revision %d starts with empty state, and results of the two are not merged\n", resp.GetReason(), revs[1])
			}
			return nil
		},
	})
	return c
}
