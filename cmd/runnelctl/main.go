// Command runnelctl manages a runnel fleet through its hub: pipelines,
// edges, deployments and their rollouts, results, tokens and the audit
// log. `runnelctl --help` lists the commands and exit codes;
// docs/runnelctl.md is the guide.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/runnel-io/runnel/cmd/runnelctl/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		LookupEnv: os.LookupEnv, Now: time.Now, Location: time.Local,
		Version: version(), ReadFile: cli.ReadFile,
	})
	stop()
	os.Exit(code)
}

func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
