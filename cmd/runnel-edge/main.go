// Command runnel-edge runs runnel's edge node. `runnel-edge replay` runs a
// pipeline over a recorded JSON-lines file and prints its window results.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/runnel-io/runnel/checkpoint"
	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/edge/config"
	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/edge/mqtt"
	"github.com/runnel-io/runnel/examples"
	"github.com/runnel-io/runnel/internal/buildinfo"
	"github.com/runnel-io/runnel/internal/edgecert"
	"github.com/runnel-io/runnel/internal/pageout"
	"github.com/runnel-io/runnel/internal/settings"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	"github.com/runnel-io/runnel/sync/rawarchive"
	"github.com/runnel-io/runnel/sync/uplink"
	"github.com/runnel-io/runnel/window/aggregate"
)

const usage = `usage:
  runnel-edge [--config edge.yaml] [flags]   run the edge node (runnel-edge --help lists every setting)
  runnel-edge replay --pipeline P.yaml --input events.jsonl
                                              run a pipeline over a recorded JSON-lines file, results to stdout
  runnel-edge outbox --data-dir D --pipeline P.yaml [--side late|dead|quarantine]
                                              print what a stopped node committed, as JSON lines
  runnel-edge restore --from STORE/EDGE-ID[@CHECKPOINT] --data-dir D [--force]
                                              rebuild a data directory from a snapshot (the latest, or the one named)
  runnel-edge snapshots list --from STORE/EDGE-ID
                                              list an edge's snapshots: checkpoint, time, epoch, sizes
  runnel-edge --version                       print the version, commit, build time, Go version and platform
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	cmd := "run"
	switch {
	case len(args) > 0 && (args[0] == "--version" || args[0] == "-version"):
		cmd = "version"
	case len(args) > 0 && !strings.HasPrefix(args[0], "-"):
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = run(ctx, args, os.Environ())
	case "replay":
		err = replay(ctx, args)
	case "outbox":
		err = outbox(ctx, args)
	case "restore":
		err = restore(ctx, args)
	case "snapshots":
		err = snapshots(ctx, args)
	case "help":
		fmt.Print(usage)
		return
	case "version":
		fmt.Print(buildinfo.Get().Text("runnel-edge"))
		return
	default:
		fmt.Fprintf(os.Stderr, "runnel-edge: unknown command %q\n%s", cmd, usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Print(usage)
		fmt.Println("\nsettings (YAML path, flag, environment variable, default):")
		config.Usage(os.Stdout)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runnel-edge:", err)
		if errors.Is(err, spec.ErrInvalid) || errors.Is(err, config.ErrInvalid) || errors.Is(err, errUsage) || errors.Is(err, checkpoint.ErrStoreURL) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func replay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	pipeline := fs.String("pipeline", "", "pipeline spec (YAML)")
	input := fs.String("input", "-", "recorded payloads, one JSON document per line (- for stdin); or an edge's raw archive, STORE/EDGE-ID with STORE a raw_archive.store URL (file:///path, s3://bucket/prefix)")
	fromPos := fs.Uint64("from", 0, "with a raw archive input: the first ingest-log position to replay")
	toPos := fs.Uint64("to", 0, "with a raw archive input: the position to stop before (0: the end of the archive)")
	output := fs.String("output", "-", "where window results go, JSON lines (- for stdout)")
	late := fs.String("late", "", "where late records go, JSON lines (default stderr)")
	dead := fs.String("dead-letter", "", "where dead letters go, JSON lines (default stderr)")
	workers := fs.Int("workers", 0, "window workers (default: one per CPU)")
	quiet := fs.Bool("quiet", false, "do not print the summary line to stderr")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *pipeline == "" {
		return fmt.Errorf("%w: replay needs --pipeline", errUsage)
	}
	ps, err := operators.LoadFiles([]string{*pipeline})
	if err != nil {
		return err
	}
	p := ps[0]
	cfg := edge.ReplayConfig{Pipeline: p, Runtime: operators.Options{Workers: *workers}}
	if strings.Contains(*input, "://") {
		storeURL, edgeID, id, err := checkpoint.ParseRef(*input)
		if err != nil {
			return err
		}
		if id != 0 {
			return fmt.Errorf("%w: replay --input %s: a raw archive is read by positions (--from, --to), not @checkpoint", errUsage, *input)
		}
		schemes, err := envStoreSchemes(ctx)
		if err != nil {
			return err
		}
		st, err := checkpoint.OpenStore(storeURL, schemes)
		if err != nil {
			return err
		}
		a := &rawarchive.Archive{Store: st, Edge: edgeID}
		cfg.Records = edge.ArchivedRecords(a, *fromPos, *toPos, func(g rawarchive.Gap) {
			fmt.Fprintf(os.Stderr, "runnel-edge: replay: positions %d to %d are not in the archive (deleted unarchived on the edge); skipped\n", g.From, g.To)
		})
	} else {
		in, closeIn, err := openIn(*input)
		if err != nil {
			return err
		}
		defer closeIn()
		cfg.Input = in
	}
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	for _, o := range []struct {
		path string
		def  io.Writer
		dst  *io.Writer
	}{{*output, os.Stdout, &cfg.Results}, {*late, os.Stderr, &cfg.Late}, {*dead, os.Stderr, &cfg.Dead}} {
		switch o.path {
		case "", "-":
			*o.dst = o.def
		default:
			f, err := os.Create(o.path)
			if err != nil {
				return err
			}
			closers = append(closers, f.Close)
			*o.dst = f
		}
	}
	st, err := edge.Replay(ctx, cfg)
	if err != nil {
		return err
	}
	for _, c := range closers {
		if err := c(); err != nil {
			return err
		}
	}
	closers = nil
	if !*quiet {
		fmt.Fprintf(os.Stderr, "runnel-edge: replay %s: %d payloads, %d results (%d late updates), %d late, %d dead letters, %d filtered\n",
			p.Name, st.In, st.Results, st.Updates, st.Late, st.Dead, st.Filtered)
	}
	return nil
}

func openIn(path string) (io.Reader, func(), error) {
	if path == "-" {
		return os.Stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func loadPipelines(paths []string) ([]*operators.Pipeline, error) {
	ps, err := operators.LoadFiles(paths)
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("%w: at least one --pipeline", errUsage)
	}
	return ps, nil
}

// run runs the edge node with the configuration edge/config loads from
// --config (or RUNNEL_CONFIG), environ and the flags in args. Before
// anything starts, the config and every pipeline file it names are
// checked together, so that a refusal lists every problem of all of them.
func run(ctx context.Context, args, environ []string) error {
	var ps []*operators.Pipeline
	c, err := config.LoadWithPipelines("", args, environ, func(globs []string) (err error) {
		ps, err = operators.LoadFiles(globs)
		return err
	})
	if err != nil {
		return err
	}
	lg := c.Log.Logger(os.Stderr)
	managed := c.Uplink.Hub != "" && c.Fleet.Enabled
	switch {
	case len(c.Pipelines) == 0 && managed:
		lg.Info("runnel-edge: no pipelines configured; running what the hub deploys to this edge", "hub", c.Uplink.Hub)
	case len(c.Pipelines) == 0:
		p, err := operators.CompileYAML("built-in demo pipeline", examples.LineTemps)
		if err != nil {
			return err
		}
		ps = append(ps, p)
		lg.Info("runnel-edge: no pipelines configured; running the built-in demo pipeline", "pipeline", p.Name)
	}
	nc, err := nodeConfig(ctx, c, ps, lg)
	if err != nil {
		return err
	}
	if c.MemoryLimit > 0 {
		debug.SetMemoryLimit(c.MemoryLimit)
		if c.State.MaxResidentKeys == 0 {
			lg.Info("runnel-edge: window keys in memory bounded from memory_limit", "memory_limit", c.MemoryLimit, "max_resident_keys", nc.Runtime.MaxResident)
		}
	}
	// A second signal, or the shutdown timeout, ends a drain that hangs.
	go func() {
		<-ctx.Done()
		time.Sleep(c.ShutdownTimeout)
		lg.Error("runnel-edge: shutdown timed out; exiting without a final checkpoint", "timeout", c.ShutdownTimeout)
		os.Exit(1)
	}()
	// Once the node runs, start-up's pages of the binary go back to the
	// kernel (internal/pageout): 18 of an idle edge's 25 MB resident.
	nc.Started = func(string) { releaseStartup(lg) }
	return edge.Run(ctx, nc)
}

// releaseStartup hands the executable's pages that start-up touched back
// to the kernel, and logs what it did.
func releaseStartup(lg *slog.Logger) {
	n, err := pageout.Executable()
	if err != nil {
		lg.Debug("runnel-edge: start-up pages of the binary stay resident", "err", err)
		return
	}
	lg.Debug("runnel-edge: start-up pages of the binary released", "mapped_bytes", n)
}

// nodeConfig translates the loaded config into the node's.
func nodeConfig(ctx context.Context, c *config.Config, ps []*operators.Pipeline, lg *slog.Logger) (edge.NodeConfig, error) {
	nc := edge.NodeConfig{
		EdgeID: c.EdgeID, DataDir: c.DataDir, Pipelines: ps, EmbeddedAddr: c.Broker.EmbeddedAddr,
		Broker: mqtt.Config{
			Protocol: mqtt.Protocol(c.Broker.Protocol),
			ClientID: c.Broker.ClientID, Username: c.Broker.Username, Password: c.Broker.Password,
			ReceiveMaximum: uint16(c.Broker.ReceiveMaximum), SessionExpiry: c.Broker.SessionExpiry,
			KeepAlive: c.Broker.KeepAlive, ConnectRetryMin: c.Broker.Reconnect.Min, ConnectRetryMax: c.Broker.Reconnect.Max,
			BatchWait: c.Broker.BatchWait,
		},
		CheckpointInterval: c.Checkpoint.Interval,
		IngestLog: ingestlog.Options{
			SegmentSize: c.IngestLog.SegmentSize, GroupDelay: c.IngestLog.SyncDelay,
			SpareSegments: spareSegments(c.IngestLog.SpareSegments),
			Sync:          map[config.SyncMode]ingestlog.SyncPolicy{config.SyncGroup: ingestlog.SyncGroup, config.SyncAlways: ingestlog.SyncAlways, config.SyncNever: ingestlog.SyncNever}[c.IngestLog.Sync],
			Compression:   map[config.Compression]ingestlog.Compression{config.CompressionNone: ingestlog.CompressionNone, config.CompressionZstd: ingestlog.CompressionZstd}[c.IngestLog.Compression],
		},
		Runtime:     operators.Options{DedupWindow: c.Dedup.IDs, MaxResident: c.ResidentKeys(len(ps))},
		DiskCap:     c.DiskCap.Bytes,
		SideOutputs: edge.SideOutputs{MaxBytes: c.SideOutputs.MaxBytes, MaxAge: c.SideOutputs.MaxAge},
		HTTPAddr:    c.HTTP.Addr,
		Logger:      lg,
	}
	if c.SideOutputs.MaxAge == 0 {
		nc.SideOutputs.MaxAge = -1 // the config's "no age limit"; 0 is the node's default
	}
	if c.Broker.URL != "" {
		nc.Broker.Brokers = []string{c.Broker.URL}
	}
	if c.Broker.TLS.IsSet() {
		nc.Broker.TLS = &mqtt.TLSConfig{CAFile: c.Broker.TLS.CAFile, CertFile: c.Broker.TLS.CertFile, KeyFile: c.Broker.TLS.KeyFile,
			InsecureSkipVerify: c.Broker.TLS.InsecureSkipVerify, ServerName: c.Broker.TLS.ServerName}
	}
	if c.Uplink.Hub != "" {
		up := &uplink.Config{Hub: c.Uplink.Hub, Token: c.Uplink.Token, Insecure: c.Uplink.Insecure,
			BatchEntries: c.Uplink.BatchEntries, Logger: lg}
		if !c.Uplink.Insecure {
			up.TLS = &tls.Config{ServerName: c.Uplink.ServerName, MinVersion: tls.VersionTLS12}
			if c.Uplink.CAFile != "" {
				pem, err := os.ReadFile(c.Uplink.CAFile)
				if err != nil {
					return edge.NodeConfig{}, err
				}
				up.TLS.RootCAs = x509.NewCertPool()
				up.TLS.RootCAs.AppendCertsFromPEM(pem)
			}
			if c.Uplink.CertFile != "" {
				// Read at each connection when renewed (internal/edgecert).
				cert, err := edgecert.Load(c.Uplink.CertFile, c.Uplink.KeyFile, c.EdgeID, lg)
				if err != nil {
					return edge.NodeConfig{}, err
				}
				up.TLS.GetClientCertificate = cert.GetClientCertificate
			}
		}
		nc.Uplink = up
		if c.Fleet.Enabled {
			nc.Fleet = &edge.FleetConfig{Labels: c.LabelMap(), Version: buildinfo.Version(), StatusInterval: c.Fleet.StatusInterval}
		}
	}
	nc.DropAtCap = c.DiskCap.Policy == config.PolicyDropRaw
	nc.MaxLag = int64(c.IngestLog.MaxLag)
	schemes := storeSchemes(ctx, c.ObjectStore, lg)
	if c.Snapshot.Store != "" {
		st, err := checkpoint.OpenStore(c.Snapshot.Store, schemes)
		if err != nil {
			return edge.NodeConfig{}, err
		}
		nc.Snapshots = &edge.SnapshotConfig{Store: st, Interval: c.Snapshot.Interval, Keep: c.Snapshot.Keep, Version: buildinfo.Version()}
	}
	if c.RawArchive.Store != "" {
		st, err := checkpoint.OpenStore(c.RawArchive.Store, schemes)
		if err != nil {
			return edge.NodeConfig{}, fmt.Errorf("raw_archive.store: %w", err)
		}
		nc.RawArchive = &edge.RawArchive{Archive: &rawarchive.Archive{Store: st}, Interval: c.RawArchive.Interval,
			YieldOutboxBytes: c.RawArchive.YieldOutboxBytes, MaxBytes: c.RawArchive.MaxBytes, Topics: c.RawArchive.Topics}
	}
	if nc.Broker.BatchWait == 0 {
		nc.Broker.BatchWait = -1 // none (mqtt's zero is its default)
	}
	return nc, nil
}

// storeSchemes opens the stores of URL schemes other than file:// (and
// plain paths): s3:// is a sync/objstore Bucket reached with the
// object_store.* settings (its errors match checkpoint's sentinels).
func storeSchemes(ctx context.Context, o settings.ObjectStore, lg *slog.Logger) map[string]checkpoint.Opener {
	return map[string]checkpoint.Opener{
		"s3": func(u *url.URL) (checkpoint.Store, error) { return o.Open(ctx, u.String(), lg) },
	}
}

// envStoreSchemes is storeSchemes for the commands that take no config
// file (restore, snapshots, replay): the object_store.* settings come
// from the environment (RUNNEL_OBJECT_STORE_*, and AWS_* credentials).
func envStoreSchemes(ctx context.Context) (map[string]checkpoint.Opener, error) {
	c, err := config.Load("", nil, os.Environ())
	if err != nil {
		return nil, err
	}
	return storeSchemes(ctx, c.ObjectStore, slog.New(slog.NewTextHandler(os.Stderr, nil))), nil
}

func outbox(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("outbox", flag.ContinueOnError)
	var pipelines multiFlag
	fs.Var(&pipelines, "pipeline", "pipeline spec (YAML) of the entries to render; repeatable")
	dir := fs.String("data-dir", "runnel-data", "the node's data directory")
	side := fs.String("side", "", "print the committed late records (late), dead letters (dead) or quarantined outbox entries (quarantine) instead")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if *side != "" {
		w := bufio.NewWriter(os.Stdout)
		defer w.Flush()
		return edge.ReadSideOutput(*dir, *side, func(line []byte) error {
			w.Write(line)
			return w.WriteByte('\n')
		})
	}
	ps, err := loadPipelines(pipelines)
	if err != nil {
		return err
	}
	byName := map[string]*operators.Pipeline{}
	for _, p := range ps {
		byName[p.Name] = p
	}
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	var buf []byte
	states := map[string]*aggregate.State{}
	return edge.ReadOutbox(ctx, *dir, func(e edge.OutboxEntry) error {
		if e.Marker {
			return nil // watermark markers are for the hub
		}
		p := byName[e.Pipeline]
		if p == nil {
			return fmt.Errorf("outbox entry %d: pipeline %q not given with --pipeline", e.Seq, e.Pipeline)
		}
		st := states[p.Name]
		if st == nil {
			st = p.Aggregates.New()
			states[p.Name] = st
		}
		var err error
		buf, err = p.AppendResultJSON(buf[:0], &e.Result, st)
		if err != nil {
			return err
		}
		buf = append(buf[:len(buf)-1], fmt.Sprintf(`,"seq":%d}`, e.Seq)...)
		buf = append(buf, '\n')
		_, err = w.Write(buf)
		return err
	})
}

// spareSegments maps the setting (0: none) to ingestlog.Options (0: the
// default, negative: none).
func spareSegments(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
