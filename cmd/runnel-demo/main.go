// Command runnel-demo runs runnel end to end in one process: an embedded
// MQTT broker, a fleet of simulated edges and a hub, printing the hub's
// merged results live. Ctrl-C stops it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/runnel-io/runnel/internal/demo"
)

func main() {
	var opts demo.Options
	flag.IntVar(&opts.Edges, "edges", 3, "simulated edge gateways")
	flag.DurationVar(&opts.Duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	flag.DurationVar(&opts.OfflineAt, "offline-at", 0, "when the last edge goes offline (default 12s)")
	flag.DurationVar(&opts.OfflineFor, "offline-for", 0, "how long it stays offline (default 15s; negative: never)")
	flag.StringVar(&opts.GRPCAddr, "grpc-addr", "", "hub gRPC listener (default 127.0.0.1:7443, or a free port)")
	flag.StringVar(&opts.HTTPAddr, "http-addr", "", "hub REST listener (default 127.0.0.1:7080, or a free port)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "runnel-demo:", err)
		os.Exit(1)
	}
}
