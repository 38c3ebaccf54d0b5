// Command runnel-edge runs runnel's edge node. `runnel-edge replay` runs a
// pipeline over a recorded JSON-lines file and prints its window results.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	"github.com/runnel-io/runnel/window/aggregate"
)

const usage = `usage: runnel-edge <command> [flags]

commands:
  run      run the edge node: MQTT in, checkpointed window results to the outbox
  replay   run a pipeline over a recorded JSON-lines file, results to stdout
  outbox   print the committed outbox (or --side late|dead) of a stopped node as JSON lines
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "replay":
		err = replay(ctx, os.Args[2:])
	case "run":
		err = run(ctx, os.Args[2:])
	case "outbox":
		err = outbox(ctx, os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "runnel-edge: unknown command %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runnel-edge:", err)
		if errors.Is(err, spec.ErrInvalid) || errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func replay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	pipeline := fs.String("pipeline", "", "pipeline spec (YAML)")
	input := fs.String("input", "-", "recorded payloads, one JSON document per line (- for stdin)")
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
	s, err := spec.Load(*pipeline)
	if err != nil {
		return err
	}
	p, err := operators.Compile(s)
	if err != nil {
		return err
	}
	in, closeIn, err := openIn(*input)
	if err != nil {
		return err
	}
	defer closeIn()
	cfg := edge.ReplayConfig{Pipeline: p, Input: in, Runtime: operators.Options{Workers: *workers}}
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
	var ps []*operators.Pipeline
	for _, path := range paths {
		s, err := spec.Load(path)
		if err != nil {
			return nil, err
		}
		p, err := operators.Compile(s)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("%w: at least one --pipeline", errUsage)
	}
	return ps, nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var pipelines multiFlag
	fs.Var(&pipelines, "pipeline", "pipeline spec (YAML); repeatable")
	cfg := edge.NodeConfig{}
	fs.StringVar(&cfg.EdgeID, "edge-id", "", "this edge's id (default: hostname)")
	fs.StringVar(&cfg.DataDir, "data-dir", "runnel-data", "ingest log, state and outbox")
	fs.StringVar(&cfg.BrokerURL, "broker-url", "", "MQTT broker (default: start the embedded broker)")
	fs.StringVar(&cfg.EmbeddedAddr, "embedded-broker-addr", "127.0.0.1:1883", "where the embedded broker listens")
	fs.DurationVar(&cfg.CheckpointInterval, "checkpoint-interval", time.Second, "time between checkpoints")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:9464", "serve /metrics and /healthz here (\"\" = off)")
	verbose := fs.Bool("v", false, "debug logs")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	ps, err := loadPipelines(pipelines)
	if err != nil {
		return err
	}
	cfg.Pipelines = ps
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return edge.Run(ctx, cfg)
}

func outbox(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("outbox", flag.ContinueOnError)
	var pipelines multiFlag
	fs.Var(&pipelines, "pipeline", "pipeline spec (YAML) of the entries to render; repeatable")
	dir := fs.String("data-dir", "runnel-data", "the node's data directory")
	side := fs.String("side", "", "print the committed late records (late) or dead letters (dead) instead")
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
