package edge

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/runnel-io/runnel/edge/ingestlog"
	"github.com/runnel-io/runnel/operators"
	"github.com/runnel-io/runnel/sync/rawarchive"
	"github.com/runnel-io/runnel/window/aggregate"
)

// ReplayConfig says what Replay reads and where its outputs go.
type ReplayConfig struct {
	Pipeline *operators.Pipeline
	Input    io.Reader // JSON lines: one payload per line, file order is arrival order
	// Records, when set, is the input instead: ingest-log records as the
	// edge wrote them, with their positions (ArchivedRecords reads them
	// from the raw archive). Clock records move the pipeline's clock as
	// they did on the edge.
	Records func(ctx context.Context, fn func(rec []byte, pos int64) error) error
	Results io.Writer // window results as JSON lines
	Late    io.Writer // late records as JSON lines, each with its reason
	Dead    io.Writer // dead letters as JSON lines, each with its reason
	Runtime operators.Options
	// MaxLine bounds one payload; a longer line is a dead letter. Default 1 MiB.
	MaxLine int
}

// Replay runs a pipeline over a recorded stream and writes every result it
// emits, as `runnel-edge replay` does. Line numbers (from 1) are the records'
// offsets. At end of input the watermark advances to the end of time and
// every open window fires. Empty lines are skipped. Event times are bounded
// (event_time.max_future, max_past) by the clock when Replay starts; the
// clock does not move during a replay, so no idle advance happens.
func Replay(ctx context.Context, cfg ReplayConfig) (operators.Stats, error) {
	if cfg.MaxLine <= 0 {
		cfg.MaxLine = 1 << 20
	}
	sink := newJSONLines(cfg.Pipeline, cfg.Results, cfg.Late, cfg.Dead)
	rt, err := operators.Start(ctx, cfg.Pipeline, sink, cfg.Runtime)
	if err != nil {
		return operators.Stats{}, err
	}
	// Event times are bounded by the clock at the start of the replay, as
	// the live edge bounds them by its clock (a recording is of the past,
	// so what the edge took, replay takes).
	if now := time.Now().UnixMilli(); now >= plausibleClock {
		rt.Clock(now)
	}
	if cfg.Records != nil {
		match, topic := newTopicMatch(cfg.Pipeline), ""
		err = cfg.Records(ctx, func(rec []byte, pos int64) error {
			r, derr := decodeRecord(rec, topic)
			if r.topic != "" {
				topic = r.topic
			}
			return feedRecord(rt, match, rec, r, derr, pos, ingestlog.DefaultMaxRecordSize)
		})
	} else {
		err = feedLines(cfg.Input, cfg.MaxLine, rt)
	}
	stats, cerr := rt.Close(err == nil)
	if err == nil {
		err = cerr
	}
	if ferr := sink.flush(); err == nil {
		err = ferr
	}
	return stats, err
}

func feedLines(in io.Reader, maxLine int, rt *operators.Runtime) error {
	br := bufio.NewReaderSize(in, 64<<10)
	var line int64
	var long []byte
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A line longer than the buffer: collect it, up to maxLine.
			long = append(long[:0], b...)
			for errors.Is(err, bufio.ErrBufferFull) {
				b, err = br.ReadSlice('\n')
				if len(long) <= maxLine {
					long = append(long, b...)
				}
			}
			b = long
		}
		if len(b) > 0 {
			line++
			p := trimEOL(b)
			switch {
			case len(p) > maxLine:
				reason := fmt.Sprintf("line longer than %d bytes (first %d kept here)", maxLine, min(len(p), 1024))
				if ierr := rt.Reject(p[:min(len(p), 1024)], "", line, reason); ierr != nil {
					return ierr
				}
			case len(p) > 0:
				if ierr := rt.Ingest(p, "", line); ierr != nil {
					return ierr
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("edge: replay: read line %d: %w", line+1, err)
		}
	}
}

func trimEOL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// jsonLines is the Sink of replay: one JSON object per line on each output.
type jsonLines struct {
	p               *operators.Pipeline
	res, late, dead *bufio.Writer
	st              *aggregate.State
	buf             []byte
}

func newJSONLines(p *operators.Pipeline, res, late, dead io.Writer) *jsonLines {
	s := &jsonLines{p: p, st: p.Aggregates.New()}
	s.res = bufio.NewWriterSize(orDiscard(res), 64<<10)
	s.late = bufio.NewWriterSize(orDiscard(late), 4<<10)
	s.dead = bufio.NewWriterSize(orDiscard(dead), 4<<10)
	return s
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

func (s *jsonLines) Result(r *operators.Result) error {
	var err error
	s.buf, err = s.p.AppendResultJSON(s.buf[:0], r, s.st)
	if err != nil {
		return err
	}
	s.buf = append(s.buf, '\n')
	_, err = s.res.Write(s.buf)
	return err
}

func (s *jsonLines) Late(l *operators.Late) error {
	var err error
	s.buf, err = s.p.AppendLateJSON(s.buf[:0], l)
	if err != nil {
		return err
	}
	s.buf = append(s.buf, '\n')
	_, err = s.late.Write(s.buf)
	return err
}

func (s *jsonLines) Dead(d *operators.DeadLetter) error {
	s.buf = append(s.p.AppendDeadJSON(s.buf[:0], d), '\n')
	_, err := s.dead.Write(s.buf)
	return err
}

func (s *jsonLines) flush() error {
	return errors.Join(s.res.Flush(), s.late.Flush(), s.dead.Flush())
}

// ArchivedRecords reads positions [from, to) (to 0: to the end) of an
// edge's raw archive, for ReplayConfig.Records: each archived segment is
// downloaded and verified whole (sizes, SHA-256, every frame's CRC) before
// any of its records is passed on, so a damaged object stops the replay
// with an error naming it rather than feeding part of it. Positions no
// manifest covers (segments the edge deleted unarchived) are reported to
// gap, when set, and skipped.
func ArchivedRecords(a *rawarchive.Archive, from, to uint64, gap func(rawarchive.Gap)) func(ctx context.Context, fn func(rec []byte, pos int64) error) error {
	return func(ctx context.Context, fn func(rec []byte, pos int64) error) error {
		cat, err := a.Catalog(ctx)
		if err != nil {
			return err
		}
		picked, gaps := rawarchive.Range(cat, from, to)
		if len(picked) == 0 {
			return fmt.Errorf("edge: replay: the raw archive of edge %s holds no segment in positions %d to %d (%d segments archived)", a.Edge, from, to, len(cat))
		}
		if gap != nil {
			for _, g := range gaps {
				gap(g)
			}
		}
		for _, m := range picked {
			raw, err := a.Fetch(ctx, m)
			if err != nil {
				return err
			}
			_, err = ingestlog.ReadSegment(ctx, bytes.NewReader(raw), int64(len(raw)), m.Segment, func(pos ingestlog.Position, rec []byte) error {
				if uint64(pos) < from || to != 0 && uint64(pos) >= to {
					return nil
				}
				return fn(rec, int64(pos))
			})
			if err != nil {
				return fmt.Errorf("edge: replay: archived segment %s: %w", m.Object, err)
			}
		}
		return nil
	}
}
