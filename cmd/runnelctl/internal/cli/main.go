package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/runnel-io/runnel/operators/spec"
)

// Exit codes, the same for every command (docs/runnelctl.md).
const (
	ExitOK = 0
	// ExitError: the hub could not be reached or answered with an error
	// not listed below, or runnelctl failed itself.
	ExitError = 1
	// ExitUsage: bad flags or arguments, a manifest or config with
	// problems, or a request the hub refused as invalid (InvalidArgument,
	// OutOfRange).
	ExitUsage = 2
	// ExitNotFound: no such pipeline, revision, edge, deployment or token.
	ExitNotFound = 3
	// ExitPermission: no token, an unknown one, or one whose role does
	// not allow the call (Unauthenticated, PermissionDenied).
	ExitPermission = 4
	// ExitConflict: the hub's state forbids the call (FailedPrecondition,
	// AlreadyExists, Aborted).
	ExitConflict = 5
	// ExitRolloutFailed: rollout status --watch saw the rollout end
	// failed or aborted.
	ExitRolloutFailed = 6
)

// exitCodes is the table shown in --help.
const exitCodes = `Exit codes:
  0  ok
  1  an error talking to the hub (unreachable, timed out, internal), or of runnelctl
  2  usage or invalid input: bad flags, a manifest or config with problems,
     a spec or request the hub refused (InvalidArgument)
  3  not found (NotFound)
  4  permission: no token, an unknown one, or a role that may not (Unauthenticated, PermissionDenied)
  5  conflict: the hub's state forbids it (FailedPrecondition, AlreadyExists)
  6  rollout status --watch: the rollout ended failed or aborted`

// Env is what a run of runnelctl reads and writes besides the hub: the
// process's streams, environment and clock, injected so that tests run
// commands in process.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// LookupEnv reads an environment variable (os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Now is the clock "3m ago" is measured with (time.Now).
	Now func() time.Time
	// Location is the zone absolute times are shown in (time.Local).
	Location *time.Location
	// Version is runnelctl's own version.
	Version string
	// VersionText is what --version prints (buildinfo.Info.Text); when
	// empty, "runnelctl VERSION".
	VersionText string
	// ReadFile reads the config file, token files and manifests.
	ReadFile func(string) ([]byte, error)
}

// app is one run: the global flags, the connection made on first use.
type app struct {
	env   Env
	flags globalFlags
	root  *cobra.Command

	started bool // a command's RunE started: its errors are not usage errors
	conn    *grpc.ClientConn
	target  *connConfig
}

// usageError is a mistake in the command line (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitError ends a command with code, after printing err (if any).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// Main runs runnelctl with args (without the program name) and returns
// its exit code. Errors go to env.Stderr: the first line of each starts
// with "runnelctl: " and names the object; a refused spec adds its
// problems, one a line, as file:line:col: field: message.
func Main(ctx context.Context, args []string, env Env) int {
	a := &app{env: env}
	a.root = a.rootCmd()
	a.root.SetArgs(args)
	a.root.SetIn(env.Stdin)
	a.root.SetOut(env.Stdout)
	a.root.SetErr(env.Stderr)
	cmd, err := a.root.ExecuteContextC(ctx)
	if a.conn != nil {
		a.conn.Close()
	}
	if err == nil {
		return ExitOK
	}
	code := a.codeOf(err)
	a.printError(err)
	if code == ExitUsage && !a.started && cmd != nil {
		fmt.Fprintf(env.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return code
}

// codeOf maps an error to its exit code.
func (a *app) codeOf(err error) int {
	var ee *exitError
	var ue usageError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue), errors.Is(err, spec.ErrInvalid):
		return ExitUsage
	}
	if code, ok := grpcExit(err); ok {
		return code
	}
	if !a.started {
		// cobra refused the command line before any command ran: an
		// unknown command or flag, a wrong number of arguments.
		return ExitUsage
	}
	return ExitError
}

// printError writes err: its first line after "runnelctl: ", the rest
// (problems, one a line) as they are.
func (a *app) printError(err error) {
	msg := err.Error()
	if msg == "" {
		return
	}
	first, rest, _ := strings.Cut(msg, "\n")
	fmt.Fprintln(a.env.Stderr, "runnelctl: "+first)
	if rest != "" {
		fmt.Fprintln(a.env.Stderr, rest)
	}
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "runnelctl",
		Short: "runnelctl manages a runnel fleet through its hub",
		Long: `runnelctl manages a runnel fleet through the hub's API: pipelines and their
revisions, the edges that registered, deployments that roll pipelines out to
the edges a label selector picks, their status, the results the hub merged,
API tokens and the audit log. docs/runnelctl.md is the guide.

Connection (flag > environment > config file > default):
  --hub host:port     RUNNEL_HUB         hub: 127.0.0.1:7443
  --token             RUNNEL_TOKEN       token:
  --token-file        RUNNEL_TOKEN_FILE  token_file:
  --ca-file           RUNNEL_CA_FILE     ca_file:   TLS with this CA
  --insecure          RUNNEL_INSECURE    insecure:  plaintext even beyond loopback
  --config            RUNNEL_CONFIG      default $XDG_CONFIG_HOME/runnel/runnelctl.yaml
TLS is used when ca_file is set or the hub is not on loopback; a loopback hub
is spoken to in plaintext unless ca_file is set. The token is never printed.

` + exitCodes,
		SilenceErrors:     true,
		SilenceUsage:      true,
		DisableAutoGenTag: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			a.started = true
			return nil
		},
	}
	root.Version = a.env.Version
	if root.Version == "" {
		root.Version = "devel"
	}
	if a.env.VersionText != "" {
		// cobra renders it as a template: braces in it are text.
		root.SetVersionTemplate(strings.ReplaceAll(a.env.VersionText, "{{", "{{`{{`}}"))
	} else {
		root.SetVersionTemplate("runnelctl {{.Version}}\n")
	}
	a.flags.register(root.PersistentFlags())
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddGroup(&cobra.Group{ID: "fleet", Title: "Fleet:"}, &cobra.Group{ID: "data", Title: "Results and administration:"})
	for _, c := range []*cobra.Command{a.applyCmd(), a.getCmd(), a.describeCmd(), a.rolloutCmd(), a.labelCmd(), a.diffCmd(), a.deleteCmd()} {
		c.GroupID = "fleet"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{a.resultsCmd(), a.auditCmd(), a.tokenCmd()} {
		c.GroupID = "data"
		root.AddCommand(c)
	}
	root.AddCommand(a.versionCmd())
	return root
}

// globalFlags are the connection flags every command takes.
type globalFlags struct {
	set                                       *pflag.FlagSet
	hub, token, tokenFile, caFile, configFile string
	insecure                                  bool
	timeout                                   time.Duration
}

func (g *globalFlags) register(fs *pflag.FlagSet) {
	g.set = fs
	fs.StringVar(&g.hub, "hub", "", "hub gRPC address, host:port (default 127.0.0.1:7443)")
	fs.StringVar(&g.token, "token", "", "API token (visible to other users in ps; prefer --token-file or RUNNEL_TOKEN)")
	fs.StringVar(&g.tokenFile, "token-file", "", "file holding the API token")
	fs.StringVar(&g.caFile, "ca-file", "", "PEM CA certificate to verify the hub with; implies TLS")
	fs.BoolVar(&g.insecure, "insecure", false, "plaintext even to a hub beyond loopback (the token crosses the network readable)")
	fs.StringVar(&g.configFile, "config", "", "config file (default $XDG_CONFIG_HOME/runnel/runnelctl.yaml)")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "timeout of each call to the hub")
}

// changed reports whether flag name was given on the command line.
func (g *globalFlags) changed(name string) bool {
	f := g.set.Lookup(name)
	return f != nil && f.Changed
}

// ctx is a context for one unary call: the command's, with --timeout.
func (a *app) call(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.flags.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.flags.timeout)
}

// exactArgs is cobra.ExactArgs naming the arguments expected.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			return usagef("%s takes %d argument(s): %s; got %d", commandName(cmd), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// checkOutput refuses an -o value not in allowed.
func checkOutput(o string, allowed ...string) error {
	for _, a := range allowed {
		if o == a {
			return nil
		}
	}
	return usagef("-o %s: use %s", o, strings.Join(allowed, ", "))
}

// commandName is the command's path without the program's name.
func commandName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), "runnelctl ")
}
