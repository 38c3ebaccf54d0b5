package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

func (a *app) versionCmd() *cobra.Command {
	var client bool
	c := &cobra.Command{
		Use:   "version [--client]",
		Short: "Print runnelctl's version and the hub's",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := a.env.Version
			if v == "" {
				v = "devel"
			}
			fmt.Fprintf(a.env.Stdout, "runnelctl %s\n", v)
			if client {
				return nil
			}
			conn, err := a.dial()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			h, err := runnelv1.NewHealthClient(conn).Check(ctx, &runnelv1.HealthCheckRequest{})
			if err != nil {
				return a.wrap(err, "hub version")
			}
			fmt.Fprintf(a.env.Stdout, "hub %s at %s: %s, %d of %d edges live\n", h.GetVersion(), a.target.addr, h.GetStatus(), h.GetEdgesLive(), h.GetEdgesKnown())
			return nil
		},
	}
	c.Flags().BoolVar(&client, "client", false, "runnelctl's version only; do not ask the hub")
	return c
}
