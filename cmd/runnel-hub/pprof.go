//go:build runnelpprof

package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
)

// Built with -tags runnelpprof, runnel-hub serves net/http/pprof on the
// loopback address RUNNEL_HUB_PPROF names (host:port), for profiling a
// benchmark's hub (internal/e2e, BenchmarkHub10kEdges with
// RUNNEL_HUB_PROFILE). Release builds have no such listener: the hub's
// HTTP server is reachable by clients, and a profile tells them more than
// they need to know.
func init() {
	addr := os.Getenv("RUNNEL_HUB_PPROF")
	if addr == "" {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "runnel-hub: RUNNEL_HUB_PPROF: %v\n", err)
		os.Exit(1)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	// The process ends with the listener: a profiling build only.
	go http.Serve(ln, mux)
}
