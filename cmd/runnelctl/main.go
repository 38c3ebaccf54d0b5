// Command runnelctl manages a runnel fleet through its hub: pipelines,
// edges, deployments and their rollouts, results, tokens and the audit
// log. `runnelctl --help` lists the commands and exit codes;
// docs/runnelctl.md is the guide.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/runnel-io/runnel/cmd/runnelctl/internal/cli"
	"github.com/runnel-io/runnel/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	bi := buildinfo.Get()
	code := cli.Main(ctx, os.Args[1:], cli.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		LookupEnv: os.LookupEnv, Now: time.Now, Location: time.Local,
		Version: bi.Version, VersionText: bi.Text("runnelctl"), ReadFile: cli.ReadFile,
	})
	stop()
	os.Exit(code)
}
