// Command runnel-edge runs runnel's edge node. `runnel-edge replay` runs a
// pipeline over a recorded JSON-lines file and prints its window results.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/runnel-io/runnel/edge"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
)

const usage = `usage: runnel-edge <command> [flags]

commands:
  replay   run a pipeline over a recorded JSON-lines file, results to stdout
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
