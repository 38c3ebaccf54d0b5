package edge

import (
	"bufio"
	"fmt"
	"os"

	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/operators/spec"
	"github.com/runnel-io/runnel/window/aggregate"
)

// fileOutputs writes a pipeline's committed results to its file and stdout
// outputs, as JSON lines, after the checkpoint that covers them commits: a
// result reaches a file at most once, and after the outbox (which stays the
// record the uplink and a restart rely on). A crash between the commit and
// the write loses those lines from the file, not from the outbox.
type fileOutputs struct {
	p     *operators.Pipeline
	ws    []*bufio.Writer
	files []*os.File
	st    *aggregate.State
	buf   []byte
}

func openOutputs(p *operators.Pipeline) (*fileOutputs, error) {
	o := &fileOutputs{p: p, st: p.Aggregates.New()}
	for _, out := range p.Spec.Outputs {
		switch out.Kind {
		case spec.OutputFile:
			f, err := os.OpenFile(out.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				o.close()
				return nil, fmt.Errorf("edge: pipeline %s: output: %w", p.Name, err)
			}
			o.files = append(o.files, f)
			o.ws = append(o.ws, bufio.NewWriter(f))
		case spec.OutputStdout:
			o.ws = append(o.ws, bufio.NewWriter(os.Stdout))
		}
	}
	return o, nil
}

// write renders committed outbox entries (encodeOutbox format) to every
// output and flushes.
func (o *fileOutputs) write(entries [][]byte) error {
	if len(o.ws) == 0 || len(entries) == 0 {
		return nil
	}
	for i, e := range entries {
		oe, err := DecodeOutbox(uint64(i), e)
		if err != nil {
			return err
		}
		if o.buf, err = o.p.AppendResultJSON(o.buf[:0], &oe.Result, o.st); err != nil {
			return err
		}
		o.buf = append(o.buf, '\n')
		for _, w := range o.ws {
			if _, err := w.Write(o.buf); err != nil {
				return err
			}
		}
	}
	for _, w := range o.ws {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func (o *fileOutputs) close() {
	for _, f := range o.files {
		f.Close()
	}
}
