package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func (a *app) labelCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "label edge ID KEY=VALUE ... KEY- ...",
		Short: "Set (k=v) or remove (k-) labels the hub holds for an edge",
		Long: `label sets and removes labels of an edge at the hub. They override the labels
of the edge's own config, and deployments pick edges by them, so a change can
start or stop a deployment on the edge.`,
		Example: `  runnelctl label edge gw-001 site=plant-7 hw=rpi4
  runnelctl label edge gw-001 legacy-`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return usagef("label what? edge ID KEY=VALUE ... KEY-") },
	}
	c.AddCommand(&cobra.Command{
		Use: "edge ID KEY=VALUE ... KEY- ...", Aliases: []string{"edges"}, Short: "Label an edge",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usagef("label edge takes an edge ID and at least one KEY=VALUE or KEY-")
			}
			return nil
		},
		ValidArgsFunction: a.complete(completeEdges, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := parseLabels(args[0], args[1:])
			if err != nil {
				return err
			}
			fc, err := a.fleet()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			e, err := fc.LabelEdge(ctx, req)
			if err != nil {
				return a.wrap(err, "label edge %s", args[0])
			}
			fmt.Fprintf(a.env.Stdout, "edge/%s labeled: %s\n", e.GetEdgeId(), labels(e.GetLabels()))
			return nil
		},
	})
	return c
}

// parseLabels reads k=v (set) and k- (remove) arguments; a key set and
// removed, or set twice to different values, is refused.
func parseLabels(id string, args []string) (*runnelv1.LabelEdgeRequest, error) {
	req := &runnelv1.LabelEdgeRequest{EdgeId: id, Set: map[string]string{}}
	removed := map[string]bool{}
	var probs []string
	for _, arg := range args {
		if k, v, ok := strings.Cut(arg, "="); ok {
			switch old, dup := req.Set[k]; {
			case k == "":
				probs = append(probs, fmt.Sprintf("%q: the key is empty", arg))
			case removed[k]:
				probs = append(probs, fmt.Sprintf("%q: %s is also removed (%s-)", arg, k, k))
			case dup && old != v:
				probs = append(probs, fmt.Sprintf("%q: %s is also set to %q", arg, k, old))
			default:
				req.Set[k] = v
			}
			continue
		}
		if k, ok := strings.CutSuffix(arg, "-"); ok && k != "" {
			if _, set := req.Set[k]; set {
				probs = append(probs, fmt.Sprintf("%q: %s is also set", arg, k))
				continue
			}
			if !removed[k] {
				removed[k] = true
				req.Remove = append(req.Remove, k)
			}
			continue
		}
		probs = append(probs, fmt.Sprintf("%q is neither KEY=VALUE nor KEY-", arg))
	}
	if len(probs) > 0 {
		return nil, usagef("label edge %s: %s", id, strings.Join(probs, "; "))
	}
	sort.Strings(req.Remove)
	return req, nil
}
