// Command runnel-demo runs runnel end to end in one process: a hub with its
// fleet API and a fleet of simulated gateways (each with its own embedded
// MQTT broker, which hands its sensors' readings to the gateway's ingest
// log in-process) that start with no pipelines. An operator
// applies a pipeline through the API, deploys it, and later rolls a second
// revision out with a canary; the output shows the hub's merged results
// live and each gateway switching revision. One gateway loses its uplink
// meanwhile, keeps working, and catches up. Ctrl-C stops it; `make run` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	var opts Options
	flag.IntVar(&opts.Edges, "edges", 3, "simulated edge gateways")
	flag.DurationVar(&opts.Duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	flag.DurationVar(&opts.OfflineAt, "offline-at", 0, "when the last edge loses its uplink (default 20s)")
	flag.DurationVar(&opts.OfflineFor, "offline-for", 0, "how long its uplink stays down (default 15s; negative: never)")
	flag.DurationVar(&opts.Rollout, "rollout-at", 0, "when revision 2 rolls out (default 24s)")
	flag.StringVar(&opts.GRPCAddr, "grpc-addr", "", "hub gRPC listener (default 127.0.0.1:7443, or a free port)")
	flag.StringVar(&opts.HTTPAddr, "http-addr", "", "hub REST listener (default 127.0.0.1:7080, or a free port)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "runnel-demo:", err)
		os.Exit(1)
	}
}
