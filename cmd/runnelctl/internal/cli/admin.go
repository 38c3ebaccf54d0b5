package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	runnelv1 "github.com/runnel-io/runnel/proto/runnelv1"
)

// auditPage is how many entries one ListAudit call asks for.
const auditPage = 500

func (a *app) auditCmd() *cobra.Command {
	var limit int
	var output string
	c := &cobra.Command{
		Use:   "audit [--limit N]",
		Short: "The audit log: who changed what, when, before and after",
		Long: `audit prints the last N entries of the hub's audit log, oldest first: every
change made through the API, with the token that made it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			if limit < 1 {
				return usagef("--limit %d: must be 1 or more", limit)
			}
			fc, err := a.fleet()
			if err != nil {
				return err
			}
			// The log is read oldest first after an id: read it to the
			// end, keeping the last limit entries.
			var entries []*runnelv1.AuditEntry
			var after uint64
			for {
				ctx, cancel := a.call(cmd.Context())
				resp, err := fc.ListAudit(ctx, &runnelv1.ListAuditRequest{AfterId: after, Limit: auditPage})
				cancel()
				if err != nil {
					return a.wrap(err, "audit")
				}
				page := resp.GetEntries()
				if len(page) == 0 || page[len(page)-1].GetId() <= after {
					break // the end, or a hub that does not move on
				}
				entries = append(entries, page...)
				if len(entries) > limit {
					entries = entries[len(entries)-limit:]
				}
				after = page[len(page)-1].GetId()
			}
			if output != "table" {
				return printProto(a.env.Stdout, &runnelv1.ListAuditResponse{Entries: entries}, output)
			}
			if len(entries) == 0 {
				a.empty("audit entries")
				return nil
			}
			t := newTable("ID", "TIME", "WHO", "ACTION", "OBJECT", "BEFORE", "AFTER")
			for _, e := range entries {
				t.add(fmt.Sprint(e.GetId()), a.abs(e.GetAtMs()), e.GetWho(), e.GetAction(), e.GetObject(), e.GetBefore(), e.GetAfter())
			}
			t.write(a.env.Stdout)
			return nil
		},
	}
	c.Flags().IntVar(&limit, "limit", 100, "the last N entries")
	c.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	return c
}

func (a *app) tokenCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "token create|list|revoke",
		Short: "API tokens (admin): create, list, revoke",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return usagef("token what? create NAME --role R, list, or revoke NAME")
		},
	}
	var role, output string
	create := &cobra.Command{
		Use:   "create NAME --role viewer|operator|admin",
		Short: "Create a token; its secret is printed once, on stdout",
		Long: `create makes an API token and prints its secret, alone on stdout, once: the hub
keeps only its hash. Roles: viewer reads results and status; operator also
changes pipelines, deployments and labels; admin also manages tokens.`,
		Example: `  runnelctl token create ci --role operator > ci.token`,
		Args:    exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch role {
			case "viewer", "operator", "admin":
			case "":
				return usagef("token create %s: give --role viewer, operator or admin", args[0])
			default:
				return usagef("token create %s: --role %q: use viewer, operator or admin", args[0], role)
			}
			fc, err := a.fleet()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			resp, err := fc.CreateToken(ctx, &runnelv1.CreateTokenRequest{Name: args[0], Role: role})
			if err != nil {
				return a.wrap(err, "token create %s", args[0])
			}
			fmt.Fprintf(a.env.Stderr, "token/%s created (role %s); its secret follows, shown this once:\n", resp.GetToken().GetName(), resp.GetToken().GetRole())
			fmt.Fprintln(a.env.Stdout, resp.GetSecret())
			return nil
		},
	}
	create.Flags().StringVar(&role, "role", "", "viewer, operator or admin")
	create.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"viewer", "operator", "admin"}, cobra.ShellCompDirectiveNoFileComp))
	list := &cobra.Command{
		Use: "list", Short: "List the tokens (never their secrets)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json", "yaml"); err != nil {
				return err
			}
			fc, err := a.fleet()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			resp, err := fc.ListTokens(ctx, &runnelv1.ListTokensRequest{})
			if err != nil {
				return a.wrap(err, "token list")
			}
			if output != "table" {
				return printProto(a.env.Stdout, resp, output)
			}
			if len(resp.GetTokens()) == 0 {
				a.empty("tokens")
				return nil
			}
			t := newTable("NAME", "ROLE", "CREATED", "CREATED BY")
			for _, tok := range resp.GetTokens() {
				t.add(tok.GetName(), tok.GetRole(), a.ago(tok.GetCreatedMs()), tok.GetCreatedBy())
			}
			t.write(a.env.Stdout)
			return nil
		},
	}
	list.Flags().StringVarP(&output, "output", "o", "table", "table, json or yaml")
	revoke := &cobra.Command{
		Use: "revoke NAME", Short: "Revoke a token: calls with it are refused from now on",
		Args: exactArgs("NAME"), ValidArgsFunction: a.complete(completeTokens, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			fc, err := a.fleet()
			if err != nil {
				return err
			}
			ctx, cancel := a.call(cmd.Context())
			defer cancel()
			if _, err := fc.RevokeToken(ctx, &runnelv1.RevokeTokenRequest{Name: args[0]}); err != nil {
				return a.wrap(err, "token revoke %s", args[0])
			}
			fmt.Fprintf(a.env.Stdout, "token/%s revoked\n", args[0])
			return nil
		},
	}
	c.AddCommand(create, list, revoke)
	return c
}
