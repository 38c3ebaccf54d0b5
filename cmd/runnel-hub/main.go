// Command runnel-hub runs runnel's hub: it receives the edges'
// pre-aggregates over gRPC, merges them exactly once and serves the
// results (gRPC, REST, Server-Sent Events). `runnel-hub --help` lists
// every setting; docs/hub-config.md and docs/hub-api.md are the guides.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/runnel-io/runnel/examples"
	"github.com/runnel-io/runnel/hub"
	"github.com/runnel-io/runnel/hub/config"
	"github.com/runnel-io/runnel/hub/fleet"
	"github.com/runnel-io/runnel/hub/server"
	"github.com/runnel-io/runnel/internal/buildinfo"
	"github.com/runnel-io/runnel/internal/pageout"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	"github.com/runnel-io/runnel/sync/archive"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case len(os.Args) > 1 && (os.Args[1] == "--version" || os.Args[1] == "-version" || os.Args[1] == "version"):
		fmt.Print(buildinfo.Get().Text("runnel-hub"))
		return
	case len(os.Args) > 1 && os.Args[1] == "archive":
		err = runArchive(os.Args[2:], os.Environ(), os.Stdout)
	default:
		err = run(ctx, os.Args[1:], os.Environ(), os.Stderr)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		config.Usage(os.Stdout)
	case err != nil:
		fmt.Fprintln(os.Stderr, "runnel-hub:", err)
		if errors.Is(err, config.ErrInvalid) || errors.Is(err, spec.ErrInvalid) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run runs the hub until ctx ends, then shuts the server down and closes
// the store.
func run(ctx context.Context, args, environ []string, logOut io.Writer) error {
	// The config and every pipeline file it names are checked together,
	// so that a refusal lists every problem of all of them.
	var ps []*operators.Pipeline
	c, err := config.LoadWithPipelines("", args, environ, func(globs []string) (err error) {
		ps, err = operators.LoadFiles(globs)
		return err
	})
	if err != nil {
		return err
	}
	lg := c.Log.Logger(logOut)
	if c.MemoryLimit > 0 {
		debug.SetMemoryLimit(c.MemoryLimit)
	}
	if !hasEnv(environ, "GOGC") {
		debug.SetGCPercent(c.GCPercent)
	}
	switch {
	case len(c.Pipelines) == 0 && c.Fleet.Enabled:
		lg.Info("runnel-hub: no pipelines configured; merging the pipelines managed through the fleet API")
	case len(c.Pipelines) == 0:
		p, err := operators.CompileYAML("built-in demo pipeline", examples.LineTemps)
		if err != nil {
			return err
		}
		lg.Info("runnel-hub: no pipelines configured; merging the built-in demo pipeline", "pipeline", p.Name)
		ps = []*operators.Pipeline{p}
	}
	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return err
	}
	hc := hub.Config{
		Dir: c.DataDir, Pipelines: ps, KeyGroups: c.Merge.KeyGroups, EdgeTimeout: c.Merge.EdgeTimeout,
		Retention: c.Merge.Retention, Resident: c.Merge.Resident, CommitInterval: c.Merge.CommitInterval,
		MaxFuture: c.Merge.MaxFuture, Logger: lg,
	}
	// The archive (sync/archive) runs beside the hub on its archive log;
	// the hub kicks it once a file's worth of results waits.
	var (
		archiveStore archive.Store
		kick         atomic.Pointer[archive.Archiver]
	)
	if c.Archive.URL != "" {
		if archiveStore, err = openArchiveStore(ctx, c); err != nil {
			return err
		}
		hc.ArchiveMaxPending = uint64(c.Archive.MaxPending)
		hc.ArchiveNotify = func(pending uint64) {
			if a := kick.Load(); a != nil && pending >= uint64(c.Archive.MaxRowsPerFile) {
				a.Kick()
			}
		}
	}
	// With the fleet API, its store (fleet.db) opens first: the hub
	// opens knowing every managed revision (fleet.OpenWithHub).
	var (
		h  *hub.Hub
		fl *fleet.Fleet
	)
	if c.Fleet.Enabled {
		h, fl, err = fleet.OpenWithHub(c.DataDir, fleet.Options{Tick: c.Fleet.Tick, Logger: lg}, hc)
	} else {
		h, err = hub.Open(hc)
	}
	if err != nil {
		return fmt.Errorf("open the hub store in %s: %w", c.DataDir, err)
	}
	var fc server.FleetCore
	closeHub := h.Close
	if fl != nil {
		fc = fl
		closeHub = func() error { return errors.Join(fl.Close(), h.Close()) }
	}
	closeAll := closeHub
	var ac server.ArchiveCore
	if archiveStore != nil {
		ao := archiveOptions(c, archiveStore, h.ArchiveLog())
		ao.Logger = lg
		ar, err := archive.New(ao)
		if err != nil {
			return errors.Join(err, closeHub())
		}
		kick.Store(ar)
		ac = ar
		actx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); ar.Run(actx) }()
		// The archiver stops before the store it reads closes.
		closeAll = func() error { cancel(); <-done; return closeHub() }
		lg.Info("runnel-hub: archiving results", "archive_url", c.Archive.URL, "staging_dir", c.Archive.StagingDir)
	}
	srv, err := server.New(h, server.Config{
		GRPCAddr: c.GRPC.Addr, HTTPAddr: c.HTTP.Addr,
		CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile, Insecure: c.Plaintext(),
		ClientAuth: server.ClientAuth(c.TLS.ClientAuth), ClientCAFile: c.TLS.ClientCAFile,
		EdgeTokens: c.Auth.EdgeTokens, APIToken: c.Auth.APIToken,
		Fleet: fc, FleetEdgeMetrics: server.EdgeMetrics(c.Fleet.EdgeMetrics), Archive: ac,
		PollDelay: pollDelay(c.GRPC.PollDelay), Version: buildinfo.Version(), Logger: lg,
	})
	if err != nil {
		return errors.Join(err, closeAll())
	}
	lg.Info("runnel-hub: ready", "pipelines", len(ps), "edges_with_tokens", len(c.Auth.EdgeTokens), "client_auth", c.TLS.ClientAuth, "data_dir", c.DataDir, "fleet", fl != nil)
	// Start-up's pages of the binary go back to the kernel
	// (internal/pageout): about 20 of an idle hub's MB resident.
	if n, err := pageout.Executable(); err != nil {
		lg.Debug("runnel-hub: start-up pages of the binary stay resident", "err", err)
	} else {
		lg.Debug("runnel-hub: start-up pages of the binary released", "mapped_bytes", n)
	}
	stopReload := reloadOnHangup(srv, c, lg)
	defer stopReload()
	err = srv.Serve(ctx, c.ShutdownTimeout)
	lg.Info("runnel-hub: stopping")
	return errors.Join(err, closeAll())
}

// pollDelay is grpc.poll_delay as server.Config takes it: 0 (off) is
// negative there.
func pollDelay(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// hasEnv reports whether environ sets name.
func hasEnv(environ []string, name string) bool {
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			return true
		}
	}
	return false
}

// reloadOnHangup reloads auth.edge_tokens_file on each SIGHUP: edges
// added to it connect at once, and those removed or given another token
// are cut off, without a restart that would drop every edge's
// connection. A file with problems is refused whole, with each problem
// logged, and the tokens before it stay. The returned func stops it.
func reloadOnHangup(srv *server.Server, c *config.Config, lg *slog.Logger) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-hup:
				r, err := srv.ReloadEdgeTokens(c.ReadEdgeTokens)
				if err != nil {
					lg.Error("runnel-hub: edge tokens not reloaded; the tokens before stay", "file", c.Auth.EdgeTokensFile, "err", err)
					continue
				}
				lg.Info("runnel-hub: edge tokens reloaded", "file", c.Auth.EdgeTokensFile, "edges", r.Edges,
					"added", r.Added, "removed", r.Removed, "changed", r.Changed, "streams_ended", r.StreamsEnded)
			case <-quit:
				return
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(quit)
		<-done
	}
}
